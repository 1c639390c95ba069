#include "theory/measure.h"

#include <fmt/core.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "algo/registry.h"
#include "core/data/dataset.h"
#include "core/data/partition.h"
#include "core/error.h"
#include "core/model/model.h"
#include "core/output/run_output.h"
#include "core/plan.h"
#include "core/problem/objective.h"
#include "core/problem/problem.h"
#include "core/scenario/scenario.h"
#include "theory/estimate.h"

namespace fs = std::filesystem;

namespace rv {
namespace {

using StageKey = std::pair<int, int>;  // (cluster, stage)

// The run's own inputs of the bound (all but L, sigma² and Δ), from plan.json and metrics.csv.
struct RunInputs {
  Scenario scenario;
  ModelDesc model;
  Plan plan;
  std::vector<Event> events;
  BoundInputs in;
  double staleness_mean = 0;
  int64_t staleness_limit = 0;  // what the configuration allows: micro-batches in flight - 1
};

RunInputs read_run(const std::string& run) {
  const fs::path dir(run);
  for (const char* f : {"scenario.toml", "plan.json", "metrics.csv"})
    if (!fs::exists(dir / f)) throw InputError(run + ": not a run folder (no " + f + ")");
  RunInputs r{load_scenario((dir / "scenario.toml").string()), {}, {}, {}, {}, 0, 0};
  r.model = build_model(r.scenario);
  r.plan = plan_from_json(read_json_file((dir / "plan.json").string()));
  if (r.plan.clusters.empty()) throw InputError(run + "/plan.json: no clusters");
  r.events = read_events_csv((dir / "metrics.csv").string());
  // Staleness, and the samples per update.
  int64_t stale_max = 0, stale_n = 0, backwards = 0, first_updates = 0;
  double stale_sum = 0;
  for (const Event& e : r.events) {
    if (e.kind == EventKind::kUpdate && e.staleness >= 0) {
      stale_max = std::max(stale_max, e.staleness);
      stale_sum += static_cast<double>(e.staleness);
      ++stale_n;
    }
    if (e.stage == 0 && e.micro_batch >= 0 && e.kind == EventKind::kBackward) ++backwards;
    if (e.stage == 0 && e.kind == EventKind::kUpdate) ++first_updates;
  }
  r.staleness_mean = stale_n ? stale_sum / static_cast<double>(stale_n) : 0;
  const int64_t per_update =
      first_updates > 0 ? std::max<int64_t>(1, backwards / first_updates) : 1;
  const Scenario& s = r.scenario;
  r.in.batch = s.data.batch_size * per_update;
  r.in.staleness = stale_max;
  r.in.clusters = static_cast<int64_t>(r.plan.clusters.size());
  r.in.average_every = s.training.average_every;
  r.in.lr = s.training.lr;
  for (const ClusterPlan& c : r.plan.clusters)
    r.staleness_limit =
        std::max(r.staleness_limit,
                 in_flight(algorithm_of(s), s.training, static_cast<int>(c.stages.size())) - 1);
  return r;
}

// Each cluster's rows of the training set, as the run's samplers drew them (PipelineWorker): none
// for one cluster (it samples every row) or the quadratic (whose objective no shard changes).
std::vector<std::vector<int64_t>> cluster_shards(const Scenario& s, int clusters) {
  if (clusters <= 1 || s.data.kind == DataKind::kQuadratic) return {};
  const Dataset data = load_dataset(s.data, s.seed);
  std::vector<std::vector<int64_t>> shards;
  for (int c = 0; c < clusters; ++c)
    shards.push_back(partition_rows(data, s.data, clusters, c, s.seed));
  return shards;
}

// Each cluster's stages: where their parameters sit in the whole model's flat parameters.
std::map<StageKey, int64_t> stage_offsets(const RunInputs& r) {
  std::map<StageKey, int64_t> offset;  // (cluster, stage) -> first parameter
  for (size_t c = 0; c < r.plan.clusters.size(); ++c)
    for (size_t st = 0; st < r.plan.clusters[c].stages.size(); ++st)
      offset[{static_cast<int>(c), static_cast<int>(st)}] =
          r.model.prefix_params[static_cast<size_t>(r.plan.clusters[c].stages[st].layer_begin)];
  return offset;
}

// The common verdict: plain SGD, the condition, the averaging.
void judge(TheoryMeasure& m, const Scenario& s) {
  m.bound = convergence_bound(m.inputs);
  m.measured = m.running_mean.back();
  m.ratio = m.bound.value > 0 ? m.measured / m.bound.value : 0;
  m.plain_sgd = s.training.optimizer == OptimizerKind::kSgd && s.training.momentum == 0 &&
                s.training.weight_decay == 0;
  const BoundInputs& in = m.inputs;
  if (m.estimated)
    m.notes.push_back(
        "L, sigma^2 and f(w_0) - f* are estimates (a neural network's constants are unknown): the "
        "bound's shape, for comparison, not a guarantee");
  if (!m.plain_sgd)
    m.notes.push_back("the bound is for plain SGD; this run used " +
                      std::string(name_of(s.training.optimizer)) +
                      (s.training.momentum != 0 ? " with momentum" : "") +
                      (s.training.weight_decay != 0 ? " with weight decay" : ""));
  if (!m.bound.holds)
    m.notes.push_back(fmt::format(
        "the step-size condition fails: {} = {:.4g} > 1 (eta = {:g}, L = {:g}, T = {}, C = {}, H = "
        "{})",
        m.bound.theorem == 2
            ? "L eta + a L^2 eta^2 T^2 / (1 - rho), rho = 2 L^2 eta^2 (a T^2 + 4 kappa^2),"
            : "L eta + L^2 eta^2 (a T^2 + 4 kappa^2)",
        m.bound.condition, in.lr, in.smoothness, in.staleness, in.clusters, in.average_every));
  if (s.training.averaging != Averaging::kBulkSync && in.clusters > 1)
    m.notes.push_back("averaging = \"" + std::string(name_of(s.training.averaging)) +
                      "\": the analysis covers bulk-synchronous averaging");
  m.applies = !m.estimated && m.plain_sgd && m.bound.holds &&
              (s.training.averaging == Averaging::kBulkSync || in.clusters == 1);
  // Each term needed: the same theorem with the clusters averaging every update (no drift), and
  // with their objectives alike (no dissimilarity).
  BoundInputs no_drift = in, alike = in;
  no_drift.average_every = 1;
  alike.dissimilarity = 0;
  m.without_drift = convergence_bound(no_drift);
  m.without_dissimilarity = convergence_bound(alike);
  // The detection rule of docs/theory.md: the run's records against its configuration, then the
  // measured running mean against the bound at every K (the bound holds for every prefix).
  if (in.staleness > m.staleness_limit)
    m.violations.push_back(fmt::format(
        "an update applied a gradient {} updates old, more than the configuration allows ({}: "
        "micro-batches in flight - 1)",
        in.staleness, m.staleness_limit));
  if (m.applies)
    for (size_t k = 0; k < m.running_mean.size(); ++k)
      if (m.running_mean[k] > m.bound_at[k]) {
        m.violations.push_back(fmt::format(
            "the measured mean squared gradient norm {:.4g} exceeds the bound {:.4g} at K = {}",
            m.running_mean[k], m.bound_at[k], k + 1));
        break;
      }
}

void push_point(TheoryMeasure& m, double g2, double* total) {
  *total += g2;
  m.grad_norm2.push_back(g2);
  const int64_t k = static_cast<int64_t>(m.grad_norm2.size());
  m.running_mean.push_back(*total / static_cast<double>(k));
  BoundInputs at = m.inputs;
  at.updates = k;
  m.bound_at.push_back(convergence_bound(at).value);
}

// Per (cluster, stage), what each of its updates recorded, in update order; and the updates every
// stage of every cluster made. rv::InputError naming `file` where a node's updates are out of order
// or a stage made none.
template <typename T>
struct PerUpdate {
  std::map<StageKey, std::vector<T>> of;
  int64_t updates = 0;
};

template <typename T>
void append_update(PerUpdate<T>& p, const Event& e, T value, const std::string& file) {
  auto& list = p.of[{e.cluster, e.stage}];
  if (e.step != static_cast<int64_t>(list.size()) + 1)
    throw InputError(file + ": node " + std::to_string(e.node) + "'s update " +
                     std::to_string(e.step) + " follows update " + std::to_string(list.size()));
  list.push_back(std::move(value));
}

template <typename T>
void count_updates(PerUpdate<T>& p, const std::map<StageKey, int64_t>& offset,
                   const std::string& file) {
  int64_t updates = -1;
  for (const auto& [key, o] : offset) {
    auto it = p.of.find(key);
    const int64_t n = it == p.of.end() ? 0 : static_cast<int64_t>(it->second.size());
    updates = updates < 0 ? n : std::min(updates, n);
  }
  if (updates < 1) throw InputError(file + ": a stage made no update");
  p.updates = updates;
}

// A problem with known constants: the exact gradient norm at the clusters' average, from
// params.csv.
TheoryMeasure measure_problem(const std::string& run, RunInputs r) {
  const fs::path dir(run);
  const Scenario& s = r.scenario;
  if (s.sim.mode != SimMode::kNumeric && !fs::exists(dir / "params.csv"))
    throw InputError(run + ": a timing-mode run computes no parameters; run it in numeric mode");
  if (!fs::exists(dir / "params.csv"))
    throw InputError(run + ": no params.csv (the run recorded no parameters)");
  const Problem problem = make_problem(problem_spec(s.data));
  const int64_t dim = problem.spec.dim;
  const int clusters = static_cast<int>(r.plan.clusters.size());
  const Objective objective = make_objective(problem, cluster_shards(s, clusters));
  const auto offset = stage_offsets(r);

  // The parameters after each update, by (cluster, stage), in update order.
  const std::string file = run + "/params.csv";
  PerUpdate<std::vector<float>> after;
  for (Event& e : read_params_csv((dir / "params.csv").string()))
    append_update(after, e, std::move(e.values), file);
  count_updates(after, offset, file);
  const int64_t updates = after.updates;

  TheoryMeasure m;
  m.run = run;
  m.problem = name_of(s.data.kind);
  m.inputs = r.in;
  m.inputs.gap = objective.delta();
  m.inputs.smoothness = objective.smoothness;
  // sigma² as the bound reads it, sigma² / N the variance of an update's gradient: a micro-batch
  // drawn without replacement from its shard (objective.h), the update's micro-batches averaged.
  m.sigma2_sample = objective.sigma2;
  m.inputs.sigma2 =
      static_cast<double>(s.data.batch_size) * objective.micro_batch_noise(s.data.batch_size);
  m.inputs.dissimilarity = objective.dissimilarity;
  m.inputs.same_objective = objective.same_objective;
  m.inputs.updates = updates;
  m.staleness_mean = r.staleness_mean;
  m.staleness_limit = r.staleness_limit;

  // w̄_k: w_0 = 0 (the blocks start at zero), then each cluster's stages after update k, averaged.
  double total = 0;
  for (int64_t k = 0; k < updates; ++k) {
    Eigen::VectorXd w = Eigen::VectorXd::Zero(dim);
    if (k > 0)
      for (const auto& [key, o] : offset) {
        const std::vector<float>& v = after.of.at(key)[static_cast<size_t>(k - 1)];
        if (o + static_cast<int64_t>(v.size()) > dim)
          throw InputError(run +
                           "/params.csv: a stage's parameters run past the problem's dimension");
        for (size_t i = 0; i < v.size(); ++i)
          w(o + static_cast<int64_t>(i)) += static_cast<double>(v[i]) / clusters;
      }
    push_point(m, objective.gradient(w).squaredNorm(), &total);
  }
  judge(m, s);
  if (!problem.f_star_exact)
    m.notes.push_back("f* by Newton's method (to its tolerance), not in closed form");
  return m;
}

// A model with unknown constants: estimates along a replay (estimate.h), and the squared norm of
// each update's applied gradient (metrics.csv grad_norm2) less its expected noise.
namespace {

// sigma² at update k, interpolated between the estimate's points (the first before the first
// point, the last after the last).
double sigma2_at_update(const ConstantEstimates& est, int64_t k) {
  const auto& p = est.points;
  if (p.size() == 1 || k <= p.front().update) return p.front().sigma2;
  for (size_t i = 1; i < p.size(); ++i)
    if (k <= p[i].update) {
      const double f = static_cast<double>(k - p[i - 1].update) /
                       static_cast<double>(p[i].update - p[i - 1].update);
      return p[i - 1].sigma2 + f * (p[i].sigma2 - p[i - 1].sigma2);
    }
  return p.back().sigma2;
}

}  // namespace

TheoryMeasure measure_network(const std::string& run, RunInputs r) {
  const Scenario& s = r.scenario;
  const auto offset = stage_offsets(r);
  const std::string file = run + "/metrics.csv";
  PerUpdate<double> norms;  // (cluster, stage) -> per update
  for (const Event& e : r.events)
    if (e.kind == EventKind::kUpdate && e.step >= 1) {
      if (std::isnan(e.grad_norm2))
        throw InputError(file +
                         ": its updates carry no grad_norm2 (a timing-mode run, or a run made "
                         "before ravnest recorded it); run it in numeric mode");
      append_update(norms, e, e.grad_norm2, file);
    }
  count_updates(norms, offset, file);
  const int64_t updates = norms.updates;

  const Dataset data = load_dataset(s.data, s.seed);
  EstimateOptions options;
  options.updates = updates;
  const ConstantEstimates est = estimate_constants(s, r.model, data, options);
  TheoryMeasure m;
  m.run = run;
  m.problem = name_of(s.data.kind);
  m.estimated = true;
  m.estimates = est;
  m.inputs = r.in;
  m.inputs.gap = est.gap;
  m.inputs.smoothness = est.smoothness;
  m.inputs.sigma2 = est.sigma2;
  m.inputs.updates = updates;
  m.staleness_mean = r.staleness_mean;
  m.staleness_limit = r.staleness_limit;
  // A gradient over N samples carries sigma² / N of noise on average (one exchanged between the
  // clusters before the update, as sync-dp's: over C N samples),
  // with sigma² at update k interpolated between the replay's checkpoints.
  const bool exchanged = algorithm_of(s).traits.exchange == Exchange::kGradients;
  const double replicas = exchanged ? static_cast<double>(r.in.clusters) : 1.0;
  auto sigma2_at = [&](int64_t k) { return sigma2_at_update(est, k); };
  const int clusters = static_cast<int>(r.plan.clusters.size());
  double total = 0, removed = 0;
  for (int64_t k = 0; k < updates; ++k) {
    double sum = 0;
    for (const auto& [key, o] : offset) sum += norms.of.at(key)[static_cast<size_t>(k)] / clusters;
    const double noise = sigma2_at(k) / (static_cast<double>(r.in.batch) * replicas);
    removed += noise;
    push_point(m, sum - noise, &total);
  }
  m.noise_removed = removed / static_cast<double>(updates);
  judge(m, s);
  return m;
}

}  // namespace

TheoryMeasure measure_run(const std::string& run) {
  RunInputs r = read_run(run);
  if (is_problem(r.scenario.data)) return measure_problem(run, std::move(r));
  return measure_network(run, std::move(r));
}

static nlohmann::json points_json(const ConstantEstimates& e) {
  nlohmann::json a = nlohmann::json::array();
  for (const EstimatePoint& p : e.points)
    a.push_back({{"update", p.update},
                 {"smoothness", p.smoothness},
                 {"sigma2", p.sigma2},
                 {"loss", p.loss},
                 {"iterations", p.iterations},
                 {"converged", p.converged}});
  return a;
}

// Which bound a run is measured against, in words.
static std::string tested_bound(const TheoryMeasure& m) {
  return fmt::format(
      "Theorem {} of docs/theory.md ({}), a Lian et al. 2015-style bound with local-SGD drift, "
      "derived here",
      m.bound.theorem,
      m.bound.theorem == 2
          ? fmt::format("clusters whose objectives differ, zeta^2 = {:.4g}", m.inputs.dissimilarity)
          : "every cluster descends one objective");
}

static nlohmann::json bound_json(const Bound& b) {
  return {{"theorem", b.theorem},
          {"optimisation", b.optimisation},
          {"noise", b.noise},
          {"staleness", b.staleness},
          {"drift", b.drift},
          {"dissimilarity", b.dissimilarity},
          {"value", b.value},
          {"condition", b.condition},  // null where infinite (Theorem 2's rho >= 1)
          {"holds", b.holds},
          {"paper_condition", b.paper_condition}};
}

nlohmann::json theory_json(const TheoryMeasure& m) {
  const BoundInputs& in = m.inputs;
  return {{"run", m.run},
          {"problem", m.problem},
          {"tested", tested_bound(m)},
          {"inputs",
           {{"gap", in.gap},
            {"smoothness", in.smoothness},
            {"sigma2", in.sigma2},
            {"sigma2_sample", m.sigma2_sample},
            {"dissimilarity", in.dissimilarity},
            {"same_objective", in.same_objective},
            {"batch", in.batch},
            {"staleness", in.staleness},
            {"staleness_limit", m.staleness_limit},
            {"staleness_mean", m.staleness_mean},
            {"clusters", in.clusters},
            {"average_every", in.average_every},
            {"lr", in.lr},
            {"updates", in.updates}}},
          {"bound", bound_json(m.bound)},
          {"bound_without_drift", bound_json(m.without_drift)},
          {"bound_without_dissimilarity", bound_json(m.without_dissimilarity)},
          {"paper",
           {{"condition", "2 eta L T^2 / (C N_m) <= 1, with A1 > 0, A2 <= 0, A3 <= 1"},
            {"value", m.bound.paper_condition},
            {"holds", m.bound.paper_condition <= 1},
            {"n_m", "N, the samples of one cluster's update"},
            {"a1_a3", "not computable: the paper gives no computable form"}}},
          {"estimated", m.estimated},
          {"estimates", m.estimated ? nlohmann::json{{"smoothness", m.estimates.smoothness},
                                                     {"sigma2", m.estimates.sigma2},
                                                     {"gap", m.estimates.gap},
                                                     {"batch", m.estimates.batch},
                                                     {"micro_batches", m.estimates.micro_batches},
                                                     {"hessian_micro_batches",
                                                      m.estimates.hessian_micro_batches},
                                                     {"replay_updates", m.estimates.replay_updates},
                                                     {"converged", m.estimates.converged},
                                                     {"points", points_json(m.estimates)},
                                                     {"noise_removed", m.noise_removed}}
                                    : nlohmann::json()},
          {"measured", m.measured},
          {"ratio", m.ratio},
          {"plain_sgd", m.plain_sgd},
          {"applies", m.applies},
          {"notes", m.notes},
          {"violations", m.violations},
          {"violated", m.violated()},
          {"verdict", theory_line(m)}};
}

std::string theory_csv(const TheoryMeasure& m) {
  std::ostringstream os;
  os << "k,grad_norm2,running_mean,bound\n";
  for (size_t k = 0; k < m.grad_norm2.size(); ++k)
    os << k << ','
       << fmt::format("{:.17g},{:.17g},{:.17g}", m.grad_norm2[k], m.running_mean[k], m.bound_at[k])
       << "\n";
  return os.str();
}

std::string theory_line(const TheoryMeasure& m) {
  std::string line =
      fmt::format("measured {:.4g}, bound {:.4g} (measured/bound {:.3g}) over {} updates; ",
                  m.measured, m.bound.value, m.ratio, m.inputs.updates);
  const std::string paper = fmt::format(
      "; the paper's condition 2 eta L T^2 / (C N_m) = {:.3g} (N_m = N = {}; A1-A3 not computable)",
      m.bound.paper_condition, m.inputs.batch);
  std::string violated;
  for (const std::string& v : m.violations) violated += "; VIOLATED: " + v;
  if (m.estimated)
    return fmt::format(
               "estimates (the largest over an SGD replay of {} updates): L ~ {:.4g}, sigma^2 ~ "
               "{:.4g}, "
               "f(w_0) - f* <= {:.4g}; ",
               m.estimates.replay_updates, m.inputs.smoothness, m.inputs.sigma2, m.inputs.gap) +
           line + "a shape to compare with, not a guarantee" +
           (m.bound.holds ? ""
                          : fmt::format(" (with these estimates the condition fails: {:.3g} > 1)",
                                        m.bound.condition)) +
           violated;
  line += tested_bound(m) + ": ";
  if (m.applies)
    return line + fmt::format("eta, T and C meet its condition ({:.3g} <= 1)", m.bound.condition) +
           paper + violated;
  return line + "the bound does not apply: " + m.notes.front() + paper + violated;
}

}  // namespace rv
