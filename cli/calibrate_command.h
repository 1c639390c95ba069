// `ravnest calibrate`: measures this host's LibTorch compute (exec/calibrate.h) and prints its
// profile: the fitted peak, per-operation overhead and efficiencies, and every timed sample.
#pragma once

#include <string>

namespace rv {

// Writes the profile file to `out` when given (the format of core/compute/profile.h). `threads`
// 0: every core; `share`: devices sharing the host (exec/calibrate.h). With `load_parent` > 0 it
// is a load process of a shared calibration instead, and prints nothing. Returns the exit status.
int run_calibrate_command(const std::string& out, int threads, bool quick, int share, int load_parent);

}  // namespace rv
