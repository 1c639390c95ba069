#include "cli/validate_hardware.h"

#include <fmt/core.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <iostream>
#include <thread>

#include "cli/span_times.h"
#include "core/compute/profile.h"
#include "core/error.h"
#include "core/output/run_output.h"
#include "core/output/validation.h"
#include "core/spawn.h"
#include "core/units.h"
#include "exec/compute_threads.h"
#include "real/kernel_network.h"
#include "real/launcher.h"

namespace fs = std::filesystem;

namespace rv {
namespace {

std::string text_of(const fs::path& p) {
  std::ifstream in(p);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// Runs `argv` (this program), its output in `log`; rv::Error naming `what` and the log's end if it
// fails.
void run_step(const std::vector<std::string>& argv, const fs::path& log, const std::string& what) {
  const int status = wait_process(spawn_process(argv[0], argv, {.output_file = log.string()}));
  if (status == 0) return;
  std::string tail = text_of(log);
  if (tail.size() > 2000) tail = tail.substr(tail.size() - 2000);
  throw Error(
      fmt::format("ravnest validate: the hardware agreement's {} failed (status {}; {}):\n{}", what,
                  status, log.string(), tail));
}

// peak_tflops of a profile file written by `ravnest calibrate` (read as every device reads it).
double peak_of(const fs::path& profile) {
  return read_profile(profile.string()).peak_flops_per_s / kTflopsToFlopsPerSecond;
}

// The --set lines that make every device compute as `profile` says.
std::vector<std::string> device_overrides(const Scenario& s, const fs::path& profile, double peak) {
  std::vector<std::string> out;
  for (size_t i = 0; i < s.devices.size(); ++i) {
    const std::string d = "devices." + std::to_string(i) + ".";
    out.push_back(d + fmt::format("tflops={:.17g}", peak));
    out.push_back(d + "profile=\"" + profile.string() + "\"");
    out.push_back(d + "efficiency=0");
  }
  return out;
}

// `p` with every device computing as the profile file `profile` says (device_overrides' values,
// on the prepared scenario: its plan unchanged).
Prepared computing_as(const Prepared& p, const fs::path& profile) {
  Prepared out = p;
  const ComputeProfile c = read_profile(profile.string());
  for (DeviceGroup& g : out.scenario.devices) {
    g.profile = profile.string();
    g.compute = c;
    g.tflops = c.peak_flops_per_s / kTflopsToFlopsPerSecond;
    g.efficiency = 0;
  }
  return out;
}

// Step 3 below: `ravnest sim` of the scenario of `o` with `overrides`, its nodes sharing `cores`
// cores (sim.shared_cores), into `dir`/sim (its log `dir`/sim.log).
void simulate_sharing(const CommonOptions& o, const std::string& self_exe,
                      const std::vector<std::string>& overrides, int cores, const fs::path& dir) {
  std::vector<std::string> sim_args = {self_exe, "sim", o.scenario};
  for (const std::string& v : overrides) sim_args.insert(sim_args.end(), {"--set", v});
  sim_args.insert(sim_args.end(), {"--set", "sim.shared_cores=" + std::to_string(cores)});
  sim_args.insert(sim_args.end(), {"--run-dir", (dir / "sim").string(), "--progress", "off"});
  run_step(sim_args, dir / "sim.log", "simulation");
}

// The hardware agreement's reading of the real run in `dir`/real (`real`: its scenario, model and
// plan): its spans' real / modeled time under the calibration before, and the host's drift, their
// modeled time under the calibration `after` over that under the one before.
ValidationContext measured_context(const Prepared& real, const fs::path& dir,
                                   const fs::path& after) {
  const std::string metrics = (dir / "real" / "metrics.csv").string();
  const SpanTimes spans = span_times(real, metrics);
  ValidationContext ctx;
  ctx.agreement = Agreement::kHardware;
  ctx.compute_ratio = spans.median_ratio();
  ctx.host_drift =
      median_ratio(span_times(computing_as(real, after), metrics).modeled, spans.modeled);
  return ctx;
}

// What the packet path's delay lines and queues did (kernel_network.json), as notes.
std::vector<std::string> packet_path_notes(const fs::path& record) {
  std::vector<std::string> notes;
  const nlohmann::json j = nlohmann::json::parse(text_of(record), nullptr, false);
  if (!j.is_object()) return {"the real run left no kernel_network.json: its packet path unknown"};
  double worst_p99 = 0;
  long long drops = 0;
  for (const auto& l : j.value("delay_lines", nlohmann::json::array()))
    if (l["p99_lateness_us"].is_number())
      worst_p99 = std::max(worst_p99, l["p99_lateness_us"].get<double>());
  for (const auto& q : j.value("queues", nlohmann::json::array()))
    drops += std::max(0LL, q.value("drops", 0LL));
  notes.push_back(
      fmt::format("the real run's packet path: delay lines late by at most {:.0f} us at their 99th "
                  "percentile; {} packets dropped by the links' queues",
                  worst_p99, drops));
  return notes;
}

}  // namespace

std::string hardware_unmeasurable(const Scenario& s) {
  if (::geteuid() != 0)
    return "not root: the hardware agreement needs the kernel shaper (network namespaces, real "
           "TCP through htb and the delay lines); the user-space shaper is the network model "
           "itself, so a run through it measures nothing of the network against hardware";
  if (s.network.topology == Topology::kRegions)
    return "network.topology = \"regions\": the kernel shaper builds a star only";
  if (KernelNetwork::installed_delay_line().empty())
    return "rv-delay-line is not built beside ravnest (libnetfilter-queue-dev missing at build "
           "time): the kernel shaper cannot put the links' latency on the packet path";
  return "";
}

nlohmann::json validate_against_hardware(const CommonOptions& o, const std::string& self_exe,
                                         const Scenario& s, const fs::path& dir, bool quick) {
  if (const std::string why = hardware_unmeasurable(s); !why.empty())
    return {{"agreement", "hardware"}, {"measured", false}, {"why", why}};
  fs::create_directories(dir);
  // 1. One rank of this host as the real run gives it threads, computing alone: the simulation
  // shares the cores among the ranks (step 3). Not `calibrate --share`: its load processes make
  // the cores' time-sharing part of a calibration by chance (each operation is timed by itself,
  // and the median call is interrupted or not: on this project's 2-core host the matmul peak
  // came out 0.032 TFLOPS with 7 load processes in one calibration and 0.143 in the next).
  const int ranks = s.node_count();
  const int threads = threads_per_rank(ranks);
  const fs::path profile = fs::absolute(dir / "host.toml");
  std::cout << fmt::format(
      "model against hardware: calibrating this host ({} thread(s) a rank, alone; the simulation "
      "shares its cores among the {} ranks)\n",
      threads, ranks);
  // Run before the real run (host.toml, the simulation's) and again after it (host-after.toml,
  // the drift check's).
  auto calibrate = [&](const fs::path& out, const fs::path& log) {
    std::vector<std::string> argv = {self_exe, "calibrate", "--threads", std::to_string(threads),
                                     "--out",  out.string()};
    if (quick) argv.push_back("--quick");
    run_step(argv, log, "calibration");
  };
  calibrate(profile, dir / "calibrate.txt");
  const double peak = peak_of(profile);
  std::vector<std::string> overrides = o.overrides;
  const std::vector<std::string> devices = device_overrides(s, profile, peak);
  overrides.insert(overrides.end(), devices.begin(), devices.end());
  // 2. The real run, nothing from the model.
  std::vector<std::string> real_overrides = overrides;
  real_overrides.insert(real_overrides.end(), {"real.emulate_speed=false",
                                               "real.emulate_network=true", "real.shaper=kernel"});
  const Prepared real = prepare(load_checked(o.scenario, real_overrides));
  std::cout << "model against hardware: the real run (this host's compute, real TCP)\n";
  run_real(real.scenario, LaunchOptions{o.scenario, real_overrides, self_exe,
                                        (dir / "real").string(), o.progress});
  std::cout << "model against hardware: calibrating this host again (its drift over the run)\n";
  const fs::path after = fs::absolute(dir / "host-after.toml");
  calibrate(after, dir / "calibrate-after.txt");
  // 3. The simulation, told the calibration, its nodes sharing this host's cores as the real
  // run's ranks do (sim.shared_cores: the calibration is of one rank alone).
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  simulate_sharing(o, self_exe, overrides, cores, dir);

  ValidationContext ctx = measured_context(real, dir, after);
  ctx.host = {{"cores", cores},
              {"threads", threads},
              {"ranks", ranks},
              {"shared_cores", cores},
              {"peak_tflops", peak},
              {"peak_tflops_after", peak_of(after)},
              {"quick_calibration", quick},
              {"profile", "host.toml"},
              {"profile_after", "host-after.toml"}};
  ctx.same_plan = read_json_file((dir / "sim" / "plan.json").string()) ==
                  read_json_file((dir / "real" / "plan.json").string());
  ctx.notes = packet_path_notes(dir / "real" / "kernel_network.json");
  nlohmann::json v = compare_runs(read_json_file((dir / "sim" / "summary.json").string()),
                                  read_json_file((dir / "real" / "summary.json").string()), ctx);
  v["measured"] = true;
  return v;
}

}  // namespace rv
