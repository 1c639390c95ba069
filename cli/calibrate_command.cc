#include "cli/calibrate_command.h"

#include <cstdio>
#include <iostream>
#include <unistd.h>

#include "exec/calibrate.h"

namespace rv {

int run_calibrate_command(const std::string& out, int threads, bool quick) {
  const Calibration cal = calibrate(CalibrateOptions{threads, quick});
  const ComputeProfile& p = cal.profile;
  std::printf("%-12s %-22s %14s %12s %10s\n", "kind", "shape", "flops", "time us", "of peak");
  for (const CalibrationSample& s : cal.samples) {
    const double achieved = s.flops / std::max(s.time - p.op_overhead, 0.1 * s.time);
    std::printf("%-12s %-22s %14.4g %12.2f %10.4f\n", op_kind_name(s.kind), s.shape.c_str(), s.flops,
                s.time * 1e6, achieved / p.peak_flops_per_s);
  }
  char host[256] = "this host";
  gethostname(host, sizeof host - 1);
  const std::string comment = "ravnest calibrate on " + std::string(host) + ", " +
                              std::to_string(p.threads) + " LibTorch threads" +
                              (quick ? " (--quick)" : "");
  std::cout << "\n" << profile_to_toml(p, comment);
  if (!out.empty()) {
    write_profile(out, p, comment);
    std::cout << "wrote " << out << "\n";
  }
  return 0;
}

}  // namespace rv
