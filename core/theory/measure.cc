#include "core/theory/measure.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include <fmt/core.h>

#include "core/data/dataset.h"
#include "core/error.h"
#include "core/model/model.h"
#include "core/output/run_output.h"
#include "core/plan.h"
#include "core/problem/problem.h"
#include "core/scenario/scenario.h"

namespace fs = std::filesystem;

namespace rv {
namespace {

nlohmann::json read_json(const fs::path& p) {
  std::ifstream in(p);
  if (!in) throw InputError(p.string() + ": cannot read");
  try {
    return nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw InputError(p.string() + ": not JSON: " + e.what());
  }
}

}  // namespace

TheoryMeasure measure_run(const std::string& run) {
  const fs::path dir(run);
  for (const char* f : {"scenario.toml", "plan.json", "metrics.csv"})
    if (!fs::exists(dir / f)) throw InputError(run + ": not a run folder (no " + f + ")");
  const Scenario s = load_scenario((dir / "scenario.toml").string());
  if (!is_problem(s.data))
    throw InputError(run + ": a run of data.kind = \"" + s.data.kind + "\"; the bound is measured on problems with "
                     "known constants (data.kind = \"quadratic\" or \"logistic\", model.kind = \"blocks\")");
  if (s.sim.mode != "numeric" && !fs::exists(dir / "params.csv"))
    throw InputError(run + ": a timing-mode run computes no parameters; run it in numeric mode");
  if (!fs::exists(dir / "params.csv")) throw InputError(run + ": no params.csv (the run recorded no parameters)");
  const ModelDesc model = build_model(s);
  const Plan plan = plan_from_json(read_json(dir / "plan.json"));
  const Problem problem = make_problem(problem_spec(s.data));
  const int64_t dim = problem.spec.dim;
  const int clusters = static_cast<int>(plan.clusters.size());
  if (clusters < 1) throw InputError(run + "/plan.json: no clusters");

  TheoryMeasure m;
  m.run = run;
  m.problem = s.data.kind;

  // Each cluster's stages: where their parameters sit in w.
  std::map<std::pair<int, int>, int64_t> offset;  // (cluster, stage) -> first parameter
  for (int c = 0; c < clusters; ++c)
    for (size_t st = 0; st < plan.clusters[static_cast<size_t>(c)].stages.size(); ++st)
      offset[{c, static_cast<int>(st)}] = model.prefix_params[static_cast<size_t>(
          plan.clusters[static_cast<size_t>(c)].stages[st].layer_begin)];

  // The parameters after each update, by (cluster, stage), in update order.
  std::map<std::pair<int, int>, std::vector<std::vector<float>>> after;
  for (Event& e : read_params_csv((dir / "params.csv").string())) {
    auto& list = after[{e.cluster, e.stage}];
    if (e.step != static_cast<int64_t>(list.size()) + 1)
      throw InputError(run + "/params.csv: node " + std::to_string(e.node) + "'s update " + std::to_string(e.step) +
                       " follows update " + std::to_string(list.size()));
    list.push_back(std::move(e.values));
  }
  int64_t updates = -1;
  for (const auto& [key, o] : offset) {
    auto it = after.find(key);
    const int64_t n = it == after.end() ? 0 : static_cast<int64_t>(it->second.size());
    updates = updates < 0 ? n : std::min(updates, n);
  }
  if (updates < 1) throw InputError(run + "/params.csv: a stage made no update");

  // Staleness, and the samples per update, from metrics.csv.
  int64_t stale_max = 0, stale_n = 0, backwards = 0, first_updates = 0;
  double stale_sum = 0;
  for (const Event& e : read_events_csv((dir / "metrics.csv").string())) {
    if (e.kind == EventKind::kUpdate && e.staleness >= 0) {
      stale_max = std::max(stale_max, e.staleness);
      stale_sum += static_cast<double>(e.staleness);
      ++stale_n;
    }
    if (e.stage == 0 && e.micro_batch >= 0 && e.kind == EventKind::kBackward) ++backwards;
    if (e.stage == 0 && e.kind == EventKind::kUpdate) ++first_updates;
  }
  m.staleness_mean = stale_n ? stale_sum / static_cast<double>(stale_n) : 0;
  const int64_t per_update = first_updates > 0 ? std::max<int64_t>(1, backwards / first_updates) : 1;

  BoundInputs& in = m.inputs;
  in.gap = problem.delta();
  in.smoothness = problem.smoothness;
  in.sigma2 = problem.sigma2;
  in.batch = s.data.batch_size * per_update;
  in.staleness = stale_max;
  in.clusters = clusters;
  in.average_every = s.training.average_every;
  in.lr = s.training.lr;
  in.updates = updates;
  m.staleness_configured = s.training.max_in_flight > 0 ? s.training.max_in_flight - 1 : -1;

  // w̄_k: w_0 = 0 (the blocks start at zero), then each cluster's stages after update k, averaged.
  double total = 0;
  for (int64_t k = 0; k < updates; ++k) {
    Eigen::VectorXd w = Eigen::VectorXd::Zero(dim);
    if (k > 0)
      for (const auto& [key, o] : offset) {
        const std::vector<float>& v = after.at(key)[static_cast<size_t>(k - 1)];
        if (o + static_cast<int64_t>(v.size()) > dim)
          throw InputError(run + "/params.csv: a stage's parameters run past the problem's dimension");
        for (size_t i = 0; i < v.size(); ++i) w(o + static_cast<int64_t>(i)) += static_cast<double>(v[i]) / clusters;
      }
    const double g2 = problem.gradient(w).squaredNorm();
    total += g2;
    m.grad_norm2.push_back(g2);
    m.running_mean.push_back(total / static_cast<double>(k + 1));
    BoundInputs at = in;
    at.updates = k + 1;
    m.bound_at.push_back(convergence_bound(at).value);
  }
  m.bound = convergence_bound(in);
  m.measured = m.running_mean.back();
  m.ratio = m.bound.value > 0 ? m.measured / m.bound.value : 0;
  m.plain_sgd = s.training.optimizer == "sgd" && s.training.momentum == 0 && s.training.weight_decay == 0;
  if (!m.plain_sgd)
    m.notes.push_back("the bound is for plain SGD; this run used " + s.training.optimizer +
                      (s.training.momentum != 0 ? " with momentum" : "") +
                      (s.training.weight_decay != 0 ? " with weight decay" : ""));
  if (!m.bound.holds)
    m.notes.push_back(fmt::format("the step-size condition fails: L eta + L^2 eta^2 (a T^2 + 4 kappa^2) = {:.4g} > 1 "
                                  "(eta = {:g}, L = {:g}, T = {}, C = {}, H = {})",
                                  m.bound.condition, in.lr, in.smoothness, in.staleness, in.clusters, in.average_every));
  if (s.training.averaging != "bulk-sync" && clusters > 1)
    m.notes.push_back("averaging = \"" + s.training.averaging + "\": the analysis covers bulk-synchronous averaging");
  if (!problem.f_star_exact) m.notes.push_back("f* by Newton's method (to its tolerance), not in closed form");
  m.applies = m.plain_sgd && m.bound.holds && (s.training.averaging == "bulk-sync" || clusters == 1);
  return m;
}

nlohmann::json theory_json(const TheoryMeasure& m) {
  const BoundInputs& in = m.inputs;
  return {{"run", m.run},
          {"problem", m.problem},
          {"inputs",
           {{"gap", in.gap}, {"smoothness", in.smoothness}, {"sigma2", in.sigma2}, {"batch", in.batch},
            {"staleness", in.staleness}, {"staleness_configured", m.staleness_configured},
            {"staleness_mean", m.staleness_mean}, {"clusters", in.clusters}, {"average_every", in.average_every},
            {"lr", in.lr}, {"updates", in.updates}}},
          {"bound",
           {{"optimisation", m.bound.optimisation}, {"noise", m.bound.noise}, {"delay", m.bound.delay},
            {"value", m.bound.value}, {"condition", m.bound.condition}, {"holds", m.bound.holds}}},
          {"measured", m.measured},
          {"ratio", m.ratio},
          {"plain_sgd", m.plain_sgd},
          {"applies", m.applies},
          {"notes", m.notes},
          {"verdict", theory_line(m)}};
}

std::string theory_csv(const TheoryMeasure& m) {
  std::ostringstream os;
  os << "k,grad_norm2,running_mean,bound\n";
  for (size_t k = 0; k < m.grad_norm2.size(); ++k)
    os << k << ',' << fmt::format("{:.17g},{:.17g},{:.17g}", m.grad_norm2[k], m.running_mean[k], m.bound_at[k]) << "\n";
  return os.str();
}

std::string theory_line(const TheoryMeasure& m) {
  std::string line = fmt::format("measured {:.4g}, bound {:.4g} (measured/bound {:.3g}) over {} updates; ", m.measured,
                                 m.bound.value, m.ratio, m.inputs.updates);
  if (m.applies)
    return line + fmt::format("eta, T and C meet the condition ({:.3g} <= 1)", m.bound.condition);
  return line + "the bound does not apply: " + m.notes.front();
}

}  // namespace rv
