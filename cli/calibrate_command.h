// `ravnest calibrate`: measures this host's LibTorch compute (exec/calibrate.h) and prints its
// profile: the fitted peak, per-operation overhead and efficiencies, and every timed sample.
#pragma once

#include <string>

namespace rv {

// Writes the profile file to `out` when given (the format of core/compute/profile.h). `threads`
// 0: every core. Returns the exit status (0).
int run_calibrate_command(const std::string& out, int threads, bool quick);

}  // namespace rv
