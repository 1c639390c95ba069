// `ravnest validate`: the simulator measured against an emulated real run of the same scenario.
#include <fmt/core.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>
#include <nlohmann/json.hpp>
#include <thread>

#include "cli/commands.h"
#include "core/error.h"
#include "core/model/cost_model.h"
#include "core/output/run_output.h"
#include "core/output/validation.h"
#include "exec/dilation.h"
#include "real/launcher.h"

namespace fs = std::filesystem;

namespace rv {
namespace {

// The real run's training forwards and backwards: how long each took, how much CPU its maths
// took, and its modeled time.
struct SpanTimes {
  std::vector<Seconds> took, cpu, modeled;
  // The share that ran late (core/output/validation.h is_late), and the share of those whose maths
  // fitted their share of a core: late by a wait that woke late, not by the host's work.
  double late_fraction() const {
    return fraction([&](size_t i) { return is_late(took[i], modeled[i]); });
  }
  double late_within_share(double share) const {
    return fraction([&](size_t i) {
      return is_late(took[i], modeled[i]) && !(cpu[i] > share * modeled[i] * (1 + kLateTolerance));
    });
  }
  // Each span's CPU time over its share of a core times its modeled time (exec/dilation.h).
  std::vector<double> demand(double share) const {
    std::vector<double> d;
    for (size_t i = 0; i < cpu.size(); ++i)
      if (std::isfinite(cpu[i])) d.push_back(cpu[i] / (share * modeled[i]));
    return d;
  }

 private:
  template <typename Pred>
  double fraction(Pred pred) const {
    size_t n = 0;
    for (size_t i = 0; i < took.size(); ++i) n += pred(i) ? 1 : 0;
    return took.empty() ? 0.0 : static_cast<double>(n) / static_cast<double>(took.size());
  }
};

SpanTimes span_times(const Prepared& p, const std::string& metrics) {
  const Scenario& s = p.scenario;
  std::vector<StageWork> work;
  // An evaluation's forward (micro_batch < 0) is charged as the worker charges it: the layers
  // alone, without the first stage's input preparation (another code).
  std::vector<Work> eval;
  std::vector<ComputeProfile> device;
  for (int i = 0; i < p.plan.nodes; ++i) {
    const NodeRole r = p.plan.role_of(i);
    work.push_back(r.stage >= 0 ? stage_work(p.model, r.layer_begin, r.layer_end, s.training,
                                             s.data.batch_size)
                                : StageWork{});
    eval.push_back(r.stage >= 0
                       ? p.model.forward_work(r.layer_begin, r.layer_end, s.data.batch_size)
                       : Work{});
    device.push_back(s.device_of(i).compute_profile());
  }
  SpanTimes out;
  // Each node's compute spans in time order, for what the model needs of the spans before each
  // (DeviceHistory: the idle wait, and the wait after which its code first runs again).
  std::vector<Event> spans;
  for (const Event& e : read_events_csv(metrics))
    if (e.node >= 0 && e.node < p.plan.nodes &&
        (e.kind == EventKind::kForward || e.kind == EventKind::kBackward ||
         e.kind == EventKind::kUpdate))
      spans.push_back(e);
  std::stable_sort(spans.begin(), spans.end(), [](const Event& a, const Event& b) {
    return a.node != b.node ? a.node < b.node : a.start < b.start;
  });
  std::vector<DeviceHistory> history(static_cast<size_t>(p.plan.nodes));
  for (const Event& e : spans) {
    const StageWork& w = work[static_cast<size_t>(e.node)];
    const Work& unit = e.kind == EventKind::kForward
                           ? (e.micro_batch < 0 ? eval[static_cast<size_t>(e.node)] : w.forward)
                       : e.kind == EventKind::kBackward ? w.backward
                                                        : w.update;
    DeviceHistory& h = history[static_cast<size_t>(e.node)];
    const Seconds modeled =
        h.begin(unit, device[static_cast<size_t>(e.node)], e.start, saved_activations_of(e));
    h.end(e.end);
    if (e.micro_batch < 0 || e.kind == EventKind::kUpdate || modeled <= 0) continue;
    out.took.push_back(e.end - e.start);
    out.cpu.push_back(e.cpu);
    out.modeled.push_back(modeled);
  }
  return out;
}

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
        "its latency added at each receiver; the simulation is the network model's");
  return ctx;
}

// Compares the runs in `tmp` (validate.json, validate.md there), then renames `tmp` to
// `final_path` and names it.
void write_validation(const fs::path& tmp, const fs::path& final_path,
                      const ValidationContext& ctx) {
  const nlohmann::json v =
      compare_runs(read_json_file((tmp / "sim" / "summary.json").string()),
                   read_json_file((tmp / "real" / "summary.json").string()), ctx);
  std::ofstream(tmp / "validate.json") << v.dump(2) << "\n";
  std::ofstream md(tmp / "validate.md");
  md << validation_markdown(v);
  if (!md) throw Error((tmp / "validate.md").string() + ": cannot write");
  if (fs::exists(final_path)) throw InputError(final_path.string() + ": folder exists already");
  fs::rename(tmp, final_path);
  std::cout << fmt::format("validate folder: {}\n  {}\n", final_path.string(),
                           v["verdict"].get<std::string>());
}

}  // namespace

int cmd_validate(const CommonOptions& o, const std::string& self_exe, const std::string& run_path,
                 double dilation, double headroom) {
#if !RV_WITH_SIM
  throw InputError(
      "ravnest validate compares a simulation with a real run: this ravnest was built without the "
      "simulator (cmake -DRAVNEST_SIM=OFF)");
#endif
  // The scenario as given, planned once: what the host must keep up with.
  const Prepared base = prepare(load_checked(o.scenario, o.overrides));
  const Scenario& s = base.scenario;
  check_validatable(s, run_path);
  const DilationChoice choice = choose_dilation(
      measure_demands(s, base.model, base.plan),
      static_cast<double>(std::max(1u, std::thread::hardware_concurrency())), headroom);
  if (dilation <= 0 && choice.k > kMaxDilation) throw InputError(too_large_message(s, choice));
  const double k = dilation > 0 ? dilation : choice.k;
  nlohmann::json host = host_json(choice, headroom);
  std::cout << fmt::format("dilation {:g} ({}; this host needs {:g})\n", k,
                           dilation > 0 ? "given" : "chosen", choice.k);

  const fs::path final_path =
      fs::absolute(run_path.empty() ? new_run_path(s, "validate") : run_path).lexically_normal();
  fs::create_directories(final_path.parent_path());
  const fs::path tmp =
      final_path.parent_path() / ("." + final_path.filename().string() + ".partial");
  fs::remove_all(tmp);
  fs::create_directories(tmp);
  try {
    // The real runs first, then the simulation of the scenario at the final k (SimGrid runs once
    // per process).
    const RealRuns runs = run_real_attempts(o, self_exe, tmp, choice, dilation > 0, k);
    run_in_process(prepare(load_checked(o.scenario, runs.overrides)), Executor::kSim,
                   (tmp / "sim").string(), o.progress);
    host["chosen"] = runs.k;
    host["late_within_share"] = runs.late_waking;
    host["attempts"] = runs.attempts;
    write_validation(tmp, final_path, validation_context(runs, host, tmp));
  } catch (...) {
    std::error_code ec;
    fs::remove_all(tmp, ec);
    throw;
  }
  return 0;
}

}  // namespace rv
