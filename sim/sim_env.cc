#include "sim/sim_env.h"

#include <memory>

#include <simgrid/s4u/Actor.hpp>
#include <simgrid/s4u/Engine.hpp>

#include "core/error.h"

namespace sg4 = simgrid::s4u;

namespace rv {

SimTransport::SimTransport(int rank, const std::vector<sg4::Mailbox*>& mailboxes)
    : rank_(rank), mailboxes_(mailboxes) {
  mailboxes_[rank_]->set_receiver(sg4::Actor::self());
}

void SimTransport::send(int dst, Message msg) {
  RV_CHECK(dst >= 0 && dst < size() && dst != rank_, "send to an invalid node " + std::to_string(dst));
  msg.src = rank_;
  const auto bytes = static_cast<uint64_t>(std::max<Bytes>(msg.bytes, 1));
  auto* p = new Message(std::move(msg));
  pending_.push_back(mailboxes_[dst]->put_async(p, bytes));
  // Reap finished sends so the list stays short.
  while (!pending_.empty()) {
    ssize_t k = sg4::Comm::test_any(pending_);
    if (k < 0) break;
    pending_.erase(pending_.begin() + k);
  }
}

Message SimTransport::recv() {
  std::unique_ptr<Message> p(mailboxes_[rank_]->get<Message>());
  return std::move(*p);
}

std::optional<Message> SimTransport::try_recv() {
  if (!mailboxes_[rank_]->ready()) return std::nullopt;
  return recv();
}

void SimTransport::flush() {
  sg4::Comm::wait_all(pending_);
  pending_.clear();
}

Seconds SimClock::now() const { return sg4::Engine::get_clock(); }

void SimClock::sleep_for(Seconds s) {
  if (s > 0) sg4::this_actor::sleep_for(s);
}

void SimCompute::run(double flops, const std::function<void()>& maths) {
  if (numeric_) maths();
  if (flops > 0) sg4::this_actor::execute(flops);
}

}  // namespace rv
