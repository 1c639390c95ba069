// Clock: time as a node sees it, simulated or on the wall. Executors implement it (sim/, exec/);
// core/env.h hands it to the algorithms, and the run's live outputs read the wall through it.
#pragma once

#include <limits>

#include "core/units.h"

namespace rv {

// How long before a modeled instant a wall-clock wait stops sleeping and yields until it comes:
// a timed sleep wakes late by up to milliseconds on a busy machine (executors on wall time).
constexpr Seconds kSpinSeconds = 0.0005;

// Time as the node sees it, in seconds since the start of the run.
class Clock {
 public:
  virtual ~Clock() = default;
  virtual Seconds now() const = 0;
  virtual void sleep_for(Seconds s) = 0;
  // Returns once now() >= t (at once if it is). Wall clocks wake on time, not a timed sleep late.
  virtual void wait_until(Seconds t) {
    const Seconds left = t - now();
    if (left > 0) sleep_for(left);
  }
  // CPU seconds the calling thread has used, on a real clock; NaN in simulated time (where a
  // device computes exactly as long as its spans last).
  virtual Seconds thread_cpu_now() const { return std::numeric_limits<double>::quiet_NaN(); }
};

}  // namespace rv
