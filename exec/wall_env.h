// Clock and Compute of the executors that run on wall time (loopback and real): CLOCK_MONOTONIC
// from a start instant shared by all nodes of a run, and LibTorch maths on this machine's CPU,
// optionally stretched to emulate a slower device.
#pragma once

#include <chrono>

#include "core/env.h"

namespace rv {

class WallClock : public Clock {
 public:
  WallClock() : start_(std::chrono::steady_clock::now()) {}
  // Resets the origin (after the run's start barrier).
  void reset() { start_ = std::chrono::steady_clock::now(); }
  // Sets the origin to `ns` nanoseconds of this machine's steady clock (CLOCK_MONOTONIC, shared by
  // every process of one machine), so that processes started together share one time axis.
  void set_origin_ns(int64_t ns) {
    start_ = std::chrono::steady_clock::time_point(std::chrono::nanoseconds(ns));
  }
  int64_t origin_ns() const {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(start_.time_since_epoch()).count();
  }
  Seconds now() const override;
  void sleep_for(Seconds s) override;

 private:
  std::chrono::steady_clock::time_point start_;
};

class WallCompute : public Compute {
 public:
  // emulate_flops_per_s > 0: after the maths, sleep until `flops / emulate_flops_per_s` seconds
  // have passed since the unit began (a device slower than this machine); 0: no emulation.
  explicit WallCompute(double emulate_flops_per_s = 0) : emulate_(emulate_flops_per_s) {}
  bool numeric() const override { return true; }
  void run(double flops, const std::function<void()>& maths) override;

 private:
  double emulate_;
};

}  // namespace rv
