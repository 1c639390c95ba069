#include "core/output/validation.h"

#include <fmt/core.h>

#include <cmath>
#include <limits>
#include <sstream>
#include <utility>
#include <vector>

namespace rv {
namespace {

using nlohmann::json;
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// The number at a "/"-separated path of a summary, NaN where absent or not a number.
double at(const json& j, const std::string& path) {
  const json* p = &j;
  std::stringstream ss(path);
  for (std::string part; std::getline(ss, part, '/');) {
    if (!p->is_object() || !p->contains(part)) return kNaN;
    p = &(*p)[part];
  }
  return p->is_number() ? p->get<double>() : kNaN;
}

json num(double v) { return std::isfinite(v) ? json(v) : json(nullptr); }

struct Figure {
  const char* path;  // in summary.json
  const char* label;
  const char* unit;
  bool difference;  // also compared by difference (bounded quantities)
};

const Figure kFigures[] = {
    {"steady_samples_per_s", "steady-state samples/s", "samples/s", false},
    {"time_per_step_s", "time per step", "s", false},
    {"time_s", "run time", "s", false},
    {"averaging/mean_round_s", "averaging round", "s", false},
    {"staleness/mean", "staleness, mean", "updates", false},
    {"staleness/max", "staleness, max", "updates", false},
    {"final/train_loss", "final train loss", "", false},
    {"final/test_accuracy", "final test accuracy", "", true},
};

std::string show(const json& v, const char* spec = "{:.4g}") {
  if (!v.is_number()) return "-";
  return fmt::format(fmt::runtime(spec), v.get<double>());
}

std::string percent(const json& v) {
  if (!v.is_number()) return "-";
  return fmt::format("{:.1f}%", 100 * v.get<double>());
}

// Whether the real run computed as its agreement means it to, and what it did: under the executor
// agreement its compute spans kept to their modeled times (at most kLateTolerance late), against
// hardware the host kept its speed over the run (the calibrations before and after it within
// kComputeTolerance on the run's spans).
std::pair<bool, std::string> real_compute_check(const ValidationContext& ctx) {
  if (ctx.agreement == Agreement::kExecutors)
    return {ctx.late_fraction <= kLateTolerance,
            fmt::format("{:.1f}% of the real run's compute spans late", 100 * ctx.late_fraction)};
  if (std::isnan(ctx.host_drift))
    return {false, "the host's drift over the run not measured (no spans)"};
  return {std::abs(ctx.host_drift - 1) <= kComputeTolerance,
          fmt::format("the host's calibration after the run at {:.2f}x the one before on its "
                      "spans (flagged beyond {:.0f}%)",
                      ctx.host_drift, 100 * kComputeTolerance)};
}

// validate.md's words under an agreement's verdict: what was compared with what.
std::string agreement_intro(const json& v, bool hardware) {
  if (hardware)
    return "Simulation (`hardware/sim/`), its devices computing as this host's calibration "
           "(`hardware/host.toml`) says, against a real run (`hardware/real/`) that takes nothing "
           "from the model: each node computes at this host's speed, and its messages cross real "
           "TCP through the kernel shaper with the links' latency on the packet path, undilated. "
           "Error: exp(|ln(sim/real)|) - 1.\n\n";
  const double k = v.value("dilation", 1.0);
  return fmt::format(
      "Simulation (`sim/`) against an emulated real run (`real/`) of the same scenario, seed and "
      "plan, both dilated {:g} times (every rate / {:g}, every time x {:g}): the real run's "
      "compute "
      "is stretched to the model's time and its messages held by the network model, so this "
      "measures that the two executors agree, not the model's accuracy. Error: "
      "exp(|ln(sim/real)|) - 1.\n\n",
      k, k, k);
}

// validate.json's "figures": each of kFigures either summary has, side by side with its error.
json figure_rows(const json& sim, const json& real) {
  json figures = json::array();
  for (const Figure& f : kFigures) {
    const double s = at(sim, f.path), r = at(real, f.path);
    if (std::isnan(s) && std::isnan(r)) continue;
    json row{{"figure", f.path}, {"label", f.label}, {"unit", f.unit},
             {"sim", num(s)},    {"real", num(r)},   {"error", num(ratio_error(s, r))}};
    if (f.difference) row["difference"] = num(s - r);
    figures.push_back(row);
  }
  return figures;
}

// validate.json's "per_node": each node's busy fraction and bytes in both runs, side by side;
// `busy_worst` the largest busy-fraction difference of a working node.
json per_node_rows(const json& sim, const json& real, double& busy_worst) {
  json nodes = json::array();
  const json& sn = sim.contains("per_node") ? sim["per_node"] : json::array();
  const json& rn = real.contains("per_node") ? real["per_node"] : json::array();
  for (size_t i = 0; i < sn.size() && i < rn.size(); ++i) {
    const double sb = at(sn[i], "busy_fraction"), rb = at(rn[i], "busy_fraction");
    const bool working = at(sn[i], "stage") >= 0;
    if (working && std::isfinite(sb - rb)) busy_worst = std::max(busy_worst, std::abs(sb - rb));
    nodes.push_back(
        {{"node", i},
         {"device", sn[i].value("device", "")},
         {"stage", sn[i].value("stage", -1)},
         {"busy_fraction", {{"sim", num(sb)}, {"real", num(rb)}, {"difference", num(sb - rb)}}},
         {"bytes_sent",
          {{"sim", num(at(sn[i], "bytes_sent"))},
           {"real", num(at(rn[i], "bytes_sent"))},
           {"error", num(ratio_error(at(sn[i], "bytes_sent"), at(rn[i], "bytes_sent")))}}},
         {"bytes_received",
          {{"sim", num(at(sn[i], "bytes_received"))},
           {"real", num(at(rn[i], "bytes_received"))},
           {"error",
            num(ratio_error(at(sn[i], "bytes_received"), at(rn[i], "bytes_received")))}}}});
  }
  return nodes;
}

// validate.md's paragraph on the hardware agreement's calibrations (`v`: its compare_runs object):
// what was calibrated, how the simulation shares the cores, the host's drift and the spans' ratio.
std::string calibration_text(const json& v) {
  const json& host = v["host"];
  return fmt::format(
      "\nCalibration: one rank alone, {} thread(s); the simulation shares the host's {} cores "
      "among its {} ranks (sim.shared_cores); peak {:.4g} TFLOPS before the real run, {:.4g} "
      "after it. Under the calibration after it, the run's "
      "compute spans would take {:.3f}x their time under the one before (median; the host's "
      "drift, flagged beyond {:.0f}%). The real spans took {:.3f}x their time under the "
      "calibration before (median; the model's error on them with any drift, reported, not "
      "judged).\n",
      host.value("threads", 0), host.value("cores", 0), host.value("ranks", 0),
      host.value("peak_tflops", 0.0), host.value("peak_tflops_after", NAN),
      v.value("host_drift", json()).is_number() ? v["host_drift"].get<double>() : NAN,
      100 * kComputeTolerance,
      v["compute_ratio"].is_number() ? v["compute_ratio"].get<double>() : NAN);
}

}  // namespace

const char* agreement_name(Agreement a) {
  return a == Agreement::kHardware ? "hardware" : "executors";
}

double ratio_error(double sim, double real) {
  if (std::isnan(sim) || std::isnan(real) || sim < 0 || real < 0) return kNaN;
  if (sim == 0 && real == 0) return 0;
  if (sim == 0 || real == 0) return kNaN;
  return std::exp(std::abs(std::log(sim / real))) - 1;
}

json compare_runs(const json& sim, const json& real, const ValidationContext& ctx) {
  json v;
  v["agreement"] = agreement_name(ctx.agreement);
  v["scenario"] = sim.value("scenario", "");
  v["algorithm"] = sim.value("algorithm", "");
  v["nodes"] = sim.value("nodes", 0);
  v["clusters"] = sim.value("clusters", 0);
  v["dilation"] = ctx.dilation;
  v["host"] = ctx.host;
  v["same_plan"] = ctx.same_plan;
  if (ctx.agreement == Agreement::kExecutors)
    v["late_fraction"] = ctx.late_fraction;
  else {
    v["compute_ratio"] = num(ctx.compute_ratio);
    v["host_drift"] = num(ctx.host_drift);
  }
  v["notes"] = ctx.notes;
  v["figures"] = figure_rows(sim, real);

  double busy_worst = 0;
  v["per_node"] = per_node_rows(sim, real, busy_worst);

  // The verdict: each target met or missed, the missed ones first.
  std::vector<std::string> met, missed;
  auto judge = [&](bool ok, const std::string& what) { (ok ? met : missed).push_back(what); };
  const double samples =
      ratio_error(at(sim, "steady_samples_per_s"), at(real, "steady_samples_per_s"));
  judge(samples <= kTargetSamplesError,
        std::isnan(samples) ? "steady samples/s not measured in both runs"
                            : fmt::format("steady samples/s {:.1f}% apart (target {:.0f}%)",
                                          100 * samples, 100 * kTargetSamplesError));
  judge(busy_worst <= kTargetBusyDifference,
        fmt::format("busy fractions within {:.3f} (target {:.1f})", busy_worst,
                    kTargetBusyDifference));
  const double acc = at(sim, "final/test_accuracy") - at(real, "final/test_accuracy");
  if (std::isfinite(acc))
    judge(std::abs(acc) * 100 <= kTargetAccuracyPoints,
          fmt::format("test accuracy {:.2f} points apart (target {:.0f})", std::abs(acc) * 100,
                      kTargetAccuracyPoints));
  const auto [computed_as_meant, how] = real_compute_check(ctx);
  judge(computed_as_meant, how);
  if (!ctx.same_plan) missed.push_back("the two runs' plans differ");
  std::string verdict = missed.empty() ? "agrees: " : "differs: ";
  bool first = true;
  for (const auto* list : {&missed, &met})
    for (const std::string& s : *list) {
      verdict += (first ? "" : "; ") + s;
      first = false;
    }
  v["agrees"] = missed.empty();
  v["verdict"] = verdict + (ctx.agreement == Agreement::kExecutors
                                ? fmt::format(" (dilation {:g})", ctx.dilation)
                                : std::string(" (undilated)"));
  return v;
}

std::string validation_markdown(const json& v) {
  std::ostringstream md;
  const bool hardware = v.value("agreement", "") == "hardware";
  md << (hardware ? "## Model against hardware\n\n" : "## Executor agreement\n\n");
  if (!v.value("measured", true)) {
    md << "**Not measured**: " << v.value("why", "") << "\n";
    return md.str();
  }
  md << "**" << v.value("verdict", "") << "**\n\n" << agreement_intro(v, hardware);
  md << "| figure | sim | real | error |\n|---|---:|---:|---:|\n";
  for (const auto& f : v["figures"]) {
    std::string err = percent(f["error"]);
    if (f.contains("difference") && f["difference"].is_number())
      err += fmt::format(" ({:+.2f} points)", 100 * f["difference"].get<double>());
    md << "| " << f["label"].get<std::string>()
       << (f["unit"].get<std::string>().empty() ? "" : " (" + f["unit"].get<std::string>() + ")")
       << " | " << show(f["sim"]) << " | " << show(f["real"]) << " | " << err << " |\n";
  }
  md << "\n| node | device | stage | busy sim | busy real | difference | sent sim | sent real | "
        "error | "
        "received sim | received real | error "
        "|\n|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n";
  for (const auto& n : v["per_node"]) {
    const auto& b = n["busy_fraction"];
    const auto& s = n["bytes_sent"];
    const auto& r = n["bytes_received"];
    md << "| " << n["node"].get<int>() << " | " << n["device"].get<std::string>() << " | "
       << n["stage"].get<int>() << " | " << show(b["sim"], "{:.3f}") << " | "
       << show(b["real"], "{:.3f}") << " | " << show(b["difference"], "{:+.3f}") << " | "
       << show(s["sim"], "{:.0f}") << " | " << show(s["real"], "{:.0f}") << " | "
       << percent(s["error"]) << " | " << show(r["sim"], "{:.0f}") << " | "
       << show(r["real"], "{:.0f}") << " | " << percent(r["error"]) << " |\n";
  }
  const json& host = v["host"];
  if (hardware && host.is_object()) md << calibration_text(v);
  if (host.is_object() && host.contains("nodes")) {
    md << fmt::format(
        "\nDilation: this host has {:g} cores, {:.2g} of a core per working node; each node's "
        "stage (one micro-batch, forward, backward and step) here against its modeled time:\n\n",
        host.value("cores", 0.0), host.value("share", 0.0));
    md << "| node | device | host ms | modeled ms | dilation it needs "
          "|\n|---:|---|---:|---:|---:|\n";
    for (const auto& n : host["nodes"])
      md << fmt::format("| {} | {} | {:.3f} | {:.3f} | {:.3g} |\n", n.value("node", -1),
                        n.value("device", ""), n.value("host_ms", 0.0), n.value("modeled_ms", 0.0),
                        n.value("needs", 0.0));
  }
  if (!hardware)
    md << fmt::format(
        "\nLate compute spans in the real run (more than {:.0f}% past their modeled time): "
        "{:.1f}%.\n",
        100 * kLateTolerance, 100 * v.value("late_fraction", 0.0));
  if (!v.value("same_plan", true))
    md << "\n**The two runs' plan.json differ**: they did not run the same plan.\n";
  if (v.contains("notes"))
    for (const auto& n : v["notes"]) md << "\nNote: " << n.get<std::string>() << "\n";
  return md.str();
}

}  // namespace rv
