#include "exec/wall_env.h"

#include <c10/core/Event.h>
#include <c10/core/impl/VirtualGuardImpl.h>
#include <torch/version.h>

#include <ctime>
#include <limits>
#include <thread>

// c10::Event::elapsedTime (timing between two device events) is in LibTorch 2.x, not in 1.13.
#define RV_DEVICE_EVENT_TIMING (TORCH_VERSION_MAJOR >= 2)

namespace rv {

Seconds WallClock::now() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

double unix_now_s() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

Seconds WallClock::thread_cpu_now() const {
  timespec ts{};
  if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) != 0)
    return std::numeric_limits<double>::quiet_NaN();
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

void WallClock::sleep_for(Seconds s) {
  if (s > 0) std::this_thread::sleep_for(std::chrono::duration<double>(s));
}

void WallClock::wait_until(Seconds t) {
  const Seconds early = t - kSpinSeconds - now();
  if (early > 0) sleep_for(early);
  while (now() < t) std::this_thread::yield();
}

Seconds WallCompute::run(const Work& work, SavedActivations saved,
                         const std::function<void()>& maths) {
  const Seconds t0 = clock_.now();
  Seconds kernels = kNaN;
  if (device_.is_cpu()) {
    maths();
  } else {
    const c10::Stream stream = c10::impl::VirtualGuardImpl(device_.type()).getStream(device_);
#if RV_DEVICE_EVENT_TIMING
    // Events with timing (BACKEND_DEFAULT) around the maths on the stream its kernels run on.
    c10::Event begin(device_.type(), c10::EventFlag::BACKEND_DEFAULT),
        end(device_.type(), c10::EventFlag::BACKEND_DEFAULT);
    begin.record(stream);
    maths();
    end.record(stream);
    end.synchronize();
    kernels = begin.elapsedTime(end) * 1e-3;  // ms
#else
    maths();
    stream.synchronize();
#endif
  }
  // On time, not a timed sleep's milliseconds late (which would lengthen every emulated span).
  if (emulate_) {
    clock_.wait_until(t0 + history_.begin(work, *emulate_, t0, saved));
    history_.end(clock_.now());
  }
  return kernels;
}

}  // namespace rv
