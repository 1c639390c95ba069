#include "sim/sim_env.h"

#include <algorithm>
#include <simgrid/s4u/Actor.hpp>
#include <simgrid/s4u/Engine.hpp>
#include <simgrid/s4u/Exec.hpp>
#include <simgrid/s4u/Host.hpp>

#include "sim/platform.h"

namespace sg4 = simgrid::s4u;

namespace rv {

void SimTransport::send(int dst, Message msg) {
  msg.src = rank_;
  network_.send(rank_, dst, std::move(msg));
}

Seconds SimClock::now() const { return sg4::Engine::get_clock(); }

void SimClock::sleep_for(Seconds s) {
  if (s > 0) sg4::this_actor::sleep_for(s);
}

Seconds SimCompute::run(const Work& work, SavedActivations saved,
                        const std::function<void()>& maths) {
  if (numeric_) maths();
  const Seconds t = history_.begin(work, device_, sg4::Engine::get_clock(), saved);
  if (t > 0) {
    if (machine_ != nullptr) {
      const int threads = std::clamp(device_.threads, 1, machine_->get_core_count());
      sg4::this_actor::exec_init(t * kMachineCoreSpeed * threads)
          ->set_host(machine_)
          ->set_thread_count(threads)
          ->start()
          ->wait();
    } else if (host_speed_ > 0)
      sg4::this_actor::execute(t * host_speed_);
    else
      sg4::this_actor::sleep_for(t);
  }
  history_.end(sg4::Engine::get_clock());
  return kNaN;
}

}  // namespace rv
