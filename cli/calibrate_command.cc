#include "cli/calibrate_command.h"

#include <fmt/core.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <iostream>

#include "calibrate/calibrate.h"
#include "core/error.h"
#include "core/output/whole_file.h"

namespace rv {

int run_calibrate_command(const CalibrateCommand& c) {
  if (c.load_parent > 0) {
    calibration_load(CalibrateOptions{c.threads, c.quick, 1}, c.load_parent);
    return 0;
  }
  if (c.from.empty() && (c.peak_tflops > 0 || c.memory_gbps > 0))
    throw InputError("calibrate: --peak-tflops and --memory-gbps go with --from");
  if (!c.from.empty() && (c.quick || c.share > 1 || c.threads > 0))
    throw InputError(
        "calibrate --from fits published timings: --quick, --share and --threads measure this "
        "host");
  const std::string stem = std::filesystem::path(c.from).stem().string();
  const Calibration cal =
      c.from.empty()
          ? calibrate(CalibrateOptions{c.threads, c.quick, c.share})
          : calibrate_published({c.from, stem, c.peak_tflops * 1e12, c.memory_gbps * 1e9});
  const ComputeProfile& p = cal.profile;
  std::printf("%-8s %-12s %-30s %12s %9s %11s %9s\n", "pass", "kind", "case", "flops", "flop/B",
              "time us", "of peak");
  for (const CalibrationSample& s : cal.samples)
    std::printf("%-8s %-12s %-30s %12.4g %9.2f %11.2f %9.4f%s\n", pass_name(s.pass),
                op_kind_name(s.kind), s.shape.c_str(), s.flops, s.flops / s.ops / s.bytes,
                s.time * 1e6, achieved_efficiency(s, cal.loops),
                s.fixed_cost ? "  (fixed cost, in a loop)" : "");
  for (const CalibrationSample& s : cal.network_fixed)
    std::printf("%-8s %-12s %-30s %12.4g %9.2f %11.2f %9s  (fixed cost, in a network)\n",
                pass_name(s.pass), op_kind_name(s.kind), s.shape.c_str(), s.flops,
                s.flops / s.ops / s.bytes, s.time * 1e6, "");
  for (const CalibrationSample& s : cal.network_cold)
    std::printf(
        "%-8s %-12s %-30s %12.4g %9.2f %11.2f %9s  (fixed cost, in a network, caches emptied)\n",
        pass_name(s.pass), op_kind_name(s.kind), s.shape.c_str(), s.flops,
        s.flops / s.ops / s.bytes, s.time * 1e6, "");
  char host[256] = "this host";
  gethostname(host, sizeof host - 1);
  const std::string comment =
      !c.from.empty()
          ? fmt::format(
                "ravnest calibrate --from {} --peak-tflops {:g} --memory-gbps {:g}: published "
                "timings, "
                "not this host; kinds without timings on the roofline at that bandwidth",
                std::filesystem::path(c.from).filename().string(), c.peak_tflops, c.memory_gbps)
          : "ravnest calibrate on " + std::string(host) + ", " + std::to_string(p.threads) +
                " LibTorch threads" +
                (c.share > 1 ? ", the host shared by " + std::to_string(c.share) + " devices"
                             : "") +
                (c.quick ? " (--quick)" : "");
  std::cout << "\n" << profile_to_toml(p, comment);
  if (!c.out.empty()) {
    write_whole_file(c.out, profile_to_toml(p, comment));
    std::cout << "wrote " << c.out << "\n";
  }
  return 0;
}

}  // namespace rv
