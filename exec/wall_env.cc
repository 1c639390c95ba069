#include "exec/wall_env.h"

#include <ctime>
#include <limits>

#include <thread>

namespace rv {

Seconds WallClock::now() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
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
  const auto t0 = std::chrono::steady_clock::now();
  maths();
  if (emulate_) {
    using Clock = std::chrono::steady_clock;
    const auto target = t0 + std::chrono::duration_cast<Clock::duration>(
                                 std::chrono::duration<double>(time_of(work, *emulate_)));
    // A timed sleep wakes late by up to milliseconds on a busy machine, which would lengthen every
    // emulated span: sleep until shortly before, then yield until the modeled time has passed.
    const auto early = target - std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(kSpinSeconds));
    if (Clock::now() < early) std::this_thread::sleep_until(early);
    while (Clock::now() < target) std::this_thread::yield();
  }
}

}  // namespace rv
