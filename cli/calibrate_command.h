// `ravnest calibrate`: measures this host's LibTorch compute (calibrate/calibrate.h) and prints its
// profile: the fitted peak, per-operation overhead and efficiencies, and every timed sample. With
// --from it fits a profile to a device's published kernel timings instead (calibrate_published).
#pragma once

#include <string>

namespace rv {

struct CalibrateCommand {
  std::string out;  // write the profile file here (the format of core/compute/profile.h)
  int threads = 0;  // 0: every core
  bool quick = false;
  int share = 1;           // devices sharing the host (calibrate/calibrate.h)
  int load_parent = 0;     // > 0: be a load process of a shared calibration, print nothing
  std::string from;        // a samples file of published timings: fit it instead of measuring
  double peak_tflops = 0;  // with `from`: the device's published peak
  double memory_gbps = 0;  // with `from`: its published memory bandwidth (GB/s), 0: none
};

// Returns the exit status.
int run_calibrate_command(const CalibrateCommand& c);

}  // namespace rv
