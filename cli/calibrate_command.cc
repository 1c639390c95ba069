#include "cli/calibrate_command.h"

#include <cstdio>
#include <iostream>
#include <unistd.h>

#include "exec/calibrate.h"

namespace rv {

int run_calibrate_command(const std::string& out, int threads, bool quick, int share, int load_parent) {
  if (load_parent > 0) {
    calibration_load(CalibrateOptions{threads, quick, 1}, load_parent);
    return 0;
  }
  const Calibration cal = calibrate(CalibrateOptions{threads, quick, share});
  const ComputeProfile& p = cal.profile;
  std::printf("%-8s %-12s %-30s %12s %9s %11s %9s\n", "pass", "kind", "case", "flops", "flop/B",
              "time us", "of peak");
  for (const CalibrationSample& s : cal.samples)
    std::printf("%-8s %-12s %-30s %12.4g %9.2f %11.2f %9.4f%s\n", pass_name(s.pass), op_kind_name(s.kind),
                s.shape.c_str(), s.flops, s.flops / s.ops / s.bytes, s.time * 1e6,
                achieved_efficiency(s, p), s.fixed_cost ? "  (fixed cost)" : "");
  char host[256] = "this host";
  gethostname(host, sizeof host - 1);
  const std::string comment = "ravnest calibrate on " + std::string(host) + ", " +
                              std::to_string(p.threads) + " LibTorch threads" +
                              (share > 1 ? ", the host shared by " + std::to_string(share) + " devices" : "") +
                              (quick ? " (--quick)" : "");
  std::cout << "\n" << profile_to_toml(p, comment);
  if (!out.empty()) {
    write_profile(out, p, comment);
    std::cout << "wrote " << out << "\n";
  }
  return 0;
}

}  // namespace rv
