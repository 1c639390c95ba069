// Clock and Compute of the executors that run on wall time (loopback and real): CLOCK_MONOTONIC
// from a start instant shared by all nodes of a run, and LibTorch maths on this machine's CPU,
// optionally stretched to emulate a slower device.
#pragma once

#include <chrono>
#include <limits>
#include <optional>

#include "core/compute/profile.h"
#include "core/env.h"

namespace rv {

// This machine's calendar time, seconds since the Unix epoch (run.json's start: RunInfo).
double unix_now_s();

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
  // Sleeps until kSpinSeconds before t, then yields until t.
  void wait_until(Seconds t) override;
  Seconds thread_cpu_now() const override;  // CLOCK_THREAD_CPUTIME_ID

 private:
  std::chrono::steady_clock::time_point start_;
};

class WallCompute : public Compute {
 public:
  // With `emulate`: after the maths, sleep until the device's modeled time for the work
  // (core/compute/profile.h time_of, its idle and wake from the wall times of the units before,
  // as DeviceHistory gives them) has passed since the unit began (a device slower than this
  // machine); without: no emulation.
  // On a GPU (`device`), a unit's span ends when the device has finished its kernels (its stream
  // is synchronised after the maths), so that the span is the kernels' time, not their launch's;
  // run() returns the kernels' seconds between two events recorded on the stream before and
  // after the maths (LibTorch 2.x; with 1.13, which cannot time events, NaN).
  explicit WallCompute(std::optional<ComputeProfile> emulate = std::nullopt,
                       c10::Device device = c10::kCPU)
      : emulate_(std::move(emulate)), device_(device) {}
  bool numeric() const override { return true; }
  Seconds run(const Work& work, SavedActivations saved,
              const std::function<void()>& maths) override;
  c10::Device device() const override { return device_; }

 private:
  std::optional<ComputeProfile> emulate_;
  c10::Device device_;
  WallClock clock_;
  DeviceHistory history_;  // clock_ s
};

}  // namespace rv
