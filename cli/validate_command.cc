// `ravnest validate`: the simulator measured against real runs of the same scenario, two ways: an
// emulated run (executor agreement) and one with nothing taken from the model (model against
// hardware, cli/validate_hardware.h).
#include <fmt/core.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>

#include "cli/commands.h"
#include "cli/span_times.h"
#include "cli/validate_hardware.h"
#include "core/error.h"
#include "core/model/cost_model.h"
#include "core/output/run_output.h"
#include "core/output/validation.h"
#include "exec/dilation.h"
#include "real/launcher.h"

namespace fs = std::filesystem;

namespace rv {
namespace {

std::string dilation_text(double k) { return fmt::format("dilation={:.17g}", k); }

// What a scenario must be for `ravnest validate` (and its folder, `run_path`, new): rv::InputError
// otherwise.
void check_validatable(const Scenario& s, const std::string& run_path) {
  check_simulable(s, Executor::kSim);
  check_no_churn(s, Executor::kReal);
  if (s.dilation != 1)
    throw InputError(s.where("dilation") +
                     ": ravnest validate chooses the dilation itself; give it as "
                     "--dilation K instead of the scenario's dilation key");
  if (!run_path.empty() && fs::exists(run_path))
    throw InputError(run_path + ": folder exists already");
}

// validate.json's "host": the dilation's inputs, as this host measured them.
nlohmann::json host_json(const DilationChoice& choice, double headroom) {
  nlohmann::json host{{"cores", choice.cores},
                      {"share", choice.share},
                      {"needed", choice.k},
                      {"headroom", headroom},
                      {"nodes", nlohmann::json::array()}};
  for (const NodeDemand& n : choice.nodes)
    host["nodes"].push_back({{"node", n.node},
                             {"device", n.device},
                             {"host_ms", n.host_s * 1e3},
                             {"modeled_ms", n.modeled_s * 1e3},
                             {"needs", n.needs}});
  return host;
}

// The real runs of `ravnest validate`, the last at the final dilation `k`.
struct RealRuns {
  Prepared real;                       // the last one's scenario, planned
  std::vector<std::string> overrides;  // the user's --set, and the final dilation
  double k = 0;
  double late = 0, late_waking = 0;  // SpanTimes::late_fraction() and late_within_share()
  nlohmann::json attempts = nlohmann::json::array();  // the runs made again at a larger k
  std::vector<std::string> notes;
};

// The emulated real run at runs.k, every device's speed and every link emulated, into
// `tmp`/real (made again); its compute spans' times.
SpanTimes run_real_at(const CommonOptions& o, const std::string& self_exe, const fs::path& tmp,
                      RealRuns& runs) {
  runs.overrides = o.overrides;
  runs.overrides.push_back(dilation_text(runs.k));
  fs::remove_all(tmp / "real");
  std::vector<std::string> real_overrides = runs.overrides;
  real_overrides.insert(real_overrides.end(),
                        {"real.emulate_speed=true", "real.emulate_network=true"});
  runs.real = prepare(load_checked(o.scenario, real_overrides));
  LaunchOptions lo{o.scenario, real_overrides, self_exe, (tmp / "real").string(), o.progress};
  run_real(runs.real.scenario, lo);
  return span_times(runs.real, (tmp / "real" / "metrics.csv").string());
}

// The real run at k first: a chosen k that it shows too small (the host's work of more than
// kLateTolerance of its spans over their share) is raised once by what the run measured
// (exec/dilation.h redilation), and the real run is made again. A k that was `given` is the
// user's, and is kept.
RealRuns run_real_attempts(const CommonOptions& o, const std::string& self_exe, const fs::path& tmp,
                           const DilationChoice& choice, bool given, double k) {
  RealRuns runs;
  runs.k = k;
  for (int attempt = 0;; ++attempt) {
    const SpanTimes spans = run_real_at(o, self_exe, tmp, runs);
    runs.late = spans.late_fraction();
    runs.late_waking = spans.late_within_share(choice.share);
    const std::vector<double> demand = spans.demand(choice.share);
    const double next = redilation(demand, runs.k);
    if (given || attempt > 0 || next == runs.k) break;
    const double over = over_share(demand);
    if (next > kMaxDilation) {
      runs.notes.push_back(fmt::format(
          "at dilation {:g} the host's work of {:.1f}% of the real run's compute spans did not "
          "fit their share of a core; keeping up would need {:g}, above the limit of {:g}",
          runs.k, 100 * over, next, kMaxDilation));
      break;
    }
    runs.attempts.push_back(
        {{"dilation", runs.k}, {"late_fraction", runs.late}, {"over_share", over}});
    std::cout << fmt::format(
        "at dilation {:g} the host's work of {:.1f}% of the real run's compute spans did not fit "
        "their share of a core: the real run again at {:g}\n",
        runs.k, 100 * over, next);
    runs.k = next;
  }
  return runs;
}

// What validate.json says beside the two runs' figures: the dilation, the host, whether both
// planned alike (from `tmp`'s sim and real folders), and notes on what the reader should know.
ValidationContext validation_context(const RealRuns& runs, const nlohmann::json& host,
                                     const fs::path& tmp) {
  ValidationContext ctx;
  ctx.dilation = runs.k;
  ctx.host = host;
  ctx.notes = runs.notes;
  ctx.same_plan = read_json_file((tmp / "sim" / "plan.json").string()) ==
                  read_json_file((tmp / "real" / "plan.json").string());
  ctx.late_fraction = runs.late;
  if (runs.late > kLateTolerance && runs.late_waking > 0.5 * runs.late)
    ctx.notes.push_back(
        fmt::format("{:.1f}% of the real run's compute spans were late with their maths within "
                    "their share of a core ({:.1f}% "
                    "late in all): their wait for the modeled time woke late, as this host "
                    "scheduled it; a larger dilation "
                    "does not mend that",
                    100 * runs.late_waking, 100 * runs.late));
  if (!runs.attempts.empty())
    ctx.notes.push_back(fmt::format(
        "dilation {:g} was chosen first, and the host's work of {:.0f}% of that real "
        "run's compute spans did not fit their share of a core; these runs are at {:g}, "
        "raised by what that run measured",
        runs.attempts[0]["dilation"].get<double>(),
        100 * runs.attempts[0]["over_share"].get<double>(), runs.k));
  const Scenario& real = runs.real.scenario;
  if (real.network.model == NetworkModel::kLv08 && real.real.shaper != Shaper::kKernel)
    ctx.notes.push_back(
        "network.model = \"lv08\": the emulator applies LV08's factors but not its "
        "cross-traffic, its weight-S or its TCP window cap; where those matter the two "
        "runs' networks differ by construction");
  if (real.real.shaper == Shaper::kKernel)
    ctx.notes.push_back(
        "real.shaper = \"kernel\": the real run's bytes went over real TCP through htb, "
        "its latency on the packet path (rv-delay-line); the simulation is the network model's");
  return ctx;
}

// An agreement's line in the output and validate.md's head.
std::string verdict_line(const nlohmann::json& v) {
  return v.value("measured", true) ? v.value("verdict", "") : "not measured: " + v.value("why", "");
}

// An agreement left out (--agreement), as validate.json gives it.
nlohmann::json left_out(Agreement a, const std::string& agreements) {
  return {{"agreement", agreement_name(a)},
          {"measured", false},
          {"why", "left out (--agreement " + agreements + ")"}};
}

// Writes validate.json and validate.md in `tmp`: the executor agreement (`executors`) at the top
// level, as validate.json always had it, and the model against hardware (`hardware`) under
// "model_against_hardware"; then renames `tmp` to `final_path` and names it.
void write_validation(const fs::path& tmp, const fs::path& final_path, nlohmann::json executors,
                      const nlohmann::json& hardware, const Scenario& s) {
  executors["scenario"] = s.name;
  executors["model_against_hardware"] = hardware;
  std::ofstream(tmp / "validate.json") << executors.dump(2) << "\n";
  std::ofstream md(tmp / "validate.md");
  md << "# Validation: " << s.name << " (" << s.training.algorithm
     << ")\n\n- executor agreement: " << verdict_line(executors)
     << "\n- model against hardware: " << verdict_line(hardware) << "\n\n"
     << validation_markdown(executors) << "\n"
     << validation_markdown(hardware);
  if (!md) throw Error((tmp / "validate.md").string() + ": cannot write");
  if (fs::exists(final_path)) throw InputError(final_path.string() + ": folder exists already");
  fs::rename(tmp, final_path);
  std::cout << fmt::format(
      "validate folder: {}\n  executor agreement: {}\n  model against hardware: {}\n",
      final_path.string(), verdict_line(executors), verdict_line(hardware));
}

}  // namespace

int cmd_validate(const CommonOptions& o, const std::string& self_exe, const std::string& run_path,
                 double dilation, double headroom, const std::string& agreements,
                 bool quick_calibration) {
#if !RV_WITH_SIM
  throw InputError(
      "ravnest validate compares a simulation with a real run: this ravnest was built without the "
      "simulator (cmake -DRAVNEST_SIM=OFF)");
#endif
  const bool executors = agreements != "hardware", hardware = agreements != "executors";
  // The scenario as given, planned once: what the host must keep up with.
  const Prepared base = prepare(load_checked(o.scenario, o.overrides));
  const Scenario& s = base.scenario;
  check_validatable(s, run_path);
  std::optional<DilationChoice> choice;
  double k = 1;
  if (executors) {
    choice = choose_dilation(measure_demands(s, base.model, base.plan),
                             static_cast<double>(std::max(1u, std::thread::hardware_concurrency())),
                             headroom);
    if (dilation <= 0 && choice->k > kMaxDilation) throw InputError(too_large_message(s, *choice));
    k = dilation > 0 ? dilation : choice->k;
    std::cout << fmt::format("dilation {:g} ({}; this host needs {:g})\n", k,
                             dilation > 0 ? "given" : "chosen", choice->k);
  }

  const fs::path final_path =
      fs::absolute(run_path.empty() ? new_run_path(s, "validate") : run_path).lexically_normal();
  fs::create_directories(final_path.parent_path());
  const fs::path tmp =
      final_path.parent_path() / ("." + final_path.filename().string() + ".partial");
  fs::remove_all(tmp);
  fs::create_directories(tmp);
  try {
    // The real runs first, then the simulation of the executor agreement (SimGrid runs once per
    // process; the hardware agreement's simulation is a child process).
    std::optional<RealRuns> runs;
    if (executors) runs = run_real_attempts(o, self_exe, tmp, *choice, dilation > 0, k);
    const nlohmann::json against_hardware =
        hardware ? validate_against_hardware(o, self_exe, s, tmp / "hardware", quick_calibration)
                 : left_out(Agreement::kHardware, agreements);
    nlohmann::json agreement = left_out(Agreement::kExecutors, agreements);
    if (executors) {
      run_in_process(prepare(load_checked(o.scenario, runs->overrides)), Executor::kSim,
                     (tmp / "sim").string(), o.progress);
      nlohmann::json host = host_json(*choice, headroom);
      host["chosen"] = runs->k;
      host["late_within_share"] = runs->late_waking;
      host["attempts"] = runs->attempts;
      agreement = compare_runs(read_json_file((tmp / "sim" / "summary.json").string()),
                               read_json_file((tmp / "real" / "summary.json").string()),
                               validation_context(*runs, host, tmp));
      agreement["measured"] = true;
    }
    write_validation(tmp, final_path, agreement, against_hardware, s);
  } catch (...) {
    std::error_code ec;
    fs::remove_all(tmp, ec);
    throw;
  }
  return 0;
}

}  // namespace rv
