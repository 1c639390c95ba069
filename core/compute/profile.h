// A device's compute as the calibrated model describes it: its peak, a fixed cost per operation
// (kernel launch, dispatch, memory allocation), and the fraction of the peak each kind and size
// class of operation achieves. time_of() is the model's one function: the simulator, the planner
// and emulate_speed are to charge work through it and nothing else.
//
// Profiles come from `ravnest calibrate` (a microbenchmark of LibTorch on this host, written as a
// profile file) or from published achieved/peak ratios; the file format (TOML):
//
//   name = "host"
//   peak_tflops = 0.21          # the best rate achieved (large matmuls), 1e12 flop/s
//   op_overhead_us = 6.5        # fixed cost of one operation, microseconds
//   threads = 2                 # LibTorch threads it was measured with
//   [efficiency]                # achieved / peak, per kind: small, medium, large operations
//   matmul = [0.12, 0.71, 1.0]
//   conv = [0.05, 0.33, 0.52]
//   elementwise = [0.004, 0.02, 0.03]
//
// Units: seconds, flop/s; efficiencies are fractions of the peak (0, 1.5] (a kind may beat the
// matmul that defines the peak a little).
#pragma once

#include <array>
#include <string>

#include "core/compute/work.h"
#include "core/units.h"

namespace rv {

struct ComputeProfile {
  std::string name = "peak";
  double peak_flops_per_s = 1e12;  // flop/s
  Seconds op_overhead = 0;         // per operation
  int threads = 0;                 // 0: not measured
  // Achieved / peak by kind and size class; the default (all 1, no overhead) is the peak-FLOPS
  // model: every flop at the device's peak.
  std::array<std::array<double, kSizeClasses>, kOpKinds> efficiency{
      {{{1, 1, 1}}, {{1, 1, 1}}, {{1, 1, 1}}}};

  double efficiency_of(OpKind k, int size_class) const {
    return efficiency[static_cast<size_t>(k)][static_cast<size_t>(size_class)];
  }
};

// How long `work` takes on a device of `profile`, in seconds.
Seconds time_of(const Work& work, const ComputeProfile& profile);

// The profile file (above). read_profile throws rv::InputError naming the file, the key and what
// is wrong; write_profile writes the same format (rv::Error if it cannot), with `comment` as a
// header line.
ComputeProfile read_profile(const std::string& path);
ComputeProfile parse_profile(const std::string& text, const std::string& source);
std::string profile_to_toml(const ComputeProfile& p, const std::string& comment = "");
void write_profile(const std::string& path, const ComputeProfile& p, const std::string& comment = "");

}  // namespace rv
