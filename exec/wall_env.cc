#include "exec/wall_env.h"

#include <ctime>
#include <limits>

#include <thread>

#include <c10/core/impl/VirtualGuardImpl.h>

namespace rv {

Seconds WallClock::now() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

double unix_now_s() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

Seconds WallClock::thread_cpu_now() const {
  timespec ts{};
  if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) != 0) return std::numeric_limits<double>::quiet_NaN();
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

void WallCompute::run(const Work& work, const std::function<void()>& maths) {
  const Seconds t0 = clock_.now();
  maths();
  if (!device_.is_cpu()) c10::impl::VirtualGuardImpl(device_.type()).getStream(device_).synchronize();
  // On time, not a timed sleep's milliseconds late (which would lengthen every emulated span).
  if (emulate_) clock_.wait_until(t0 + time_of(work, *emulate_));
}

}  // namespace rv
