// The manual planner: one cluster holding every node in pool order; the model is cut into
// contiguous stages so that the largest ratio (stage memory / node RAM) is as small as possible,
// which puts memory on the nodes in proportion to their RAM.
#include <algorithm>
#include <cmath>
#include <sstream>

#include "algo/registry.h"
#include "core/error.h"
#include "core/model/cost_model.h"
#include "planner/layer_graph.h"
#include "planner/planner.h"

namespace rv {
namespace {

// Greedy cut for a ratio bound t: each stage takes layers while its memory stays within
// t * RAM of its node, leaving at least one layer for every remaining stage. Returns the layer
// boundaries (size stages + 1) or nothing if the bound cannot be met.
std::vector<int> greedy_cut(const ModelDesc& model, const std::vector<double>& ram,
                            const TrainingSpec& training, int64_t batch, int64_t in_flight,
                            double t) {
  const int n = static_cast<int>(ram.size());
  const int layers = model.layer_count();
  std::vector<int> cuts{0};
  int begin = 0;
  for (int k = 0; k < n; ++k) {
    const int remaining_stages = n - k - 1;
    int end = begin + 1;
    if (stage_cost(model, begin, end, training, batch, in_flight).memory > t * ram[k]) return {};
    while (end < layers - remaining_stages &&
           stage_cost(model, begin, end + 1, training, batch, in_flight).memory <= t * ram[k])
      ++end;
    if (k == n - 1 && end != layers) return {};
    cuts.push_back(end);
    begin = end;
  }
  return cuts;
}

// One cluster of every node in pool order, stage memory following each node's RAM.
Plan single_cluster_by_ram(const Scenario& scenario, const ModelDesc& model) {
  const int pool = scenario.node_count();
  const auto& fixed = scenario.planner.stage_layers;
  const int stages =
      fixed.empty() ? std::min(pool, model.layer_count()) : static_cast<int>(fixed.size());
  if (!fixed.empty()) {
    int64_t sum = 0;
    for (auto k : fixed) sum += k;
    if (sum != model.layer_count())
      throw ScenarioError(scenario.source, "planner.stage_layers",
                          "the stages hold " + std::to_string(sum) + " layers but the model has " +
                              std::to_string(model.layer_count()));
    if (stages > pool)
      throw ScenarioError(
          scenario.source, "planner.stage_layers",
          std::to_string(stages) + " stages but only " + std::to_string(pool) + " nodes");
  }
  const int64_t batch = scenario.data.batch_size;
  const TrainingSpec tr = effective_training(scenario);
  const int64_t in_flight = rv::in_flight(algorithm_of(scenario), tr, stages);
  std::vector<double> ram;
  for (int r = 0; r < stages; ++r) ram.push_back(scenario.device_of(r).ram_bytes());

  // Bisection on the ratio; at t = hi every stage fits its node or the pool is infeasible.
  const double whole =
      static_cast<double>(stage_cost(model, 0, model.layer_count(), tr, batch, in_flight).memory);
  double lo = 0, hi = whole / *std::min_element(ram.begin(), ram.end()) + 1.0;
  std::vector<int> best;
  if (!fixed.empty()) {
    best.push_back(0);
    for (auto k : fixed) best.push_back(best.back() + static_cast<int>(k));
    lo = hi;  // no search
  } else {
    best = greedy_cut(model, ram, tr, batch, in_flight, hi);
    RV_CHECK(!best.empty(), "manual planner: no cut at the loosest bound");
  }
  for (int it = 0; it < 100 && hi - lo > 1e-9 * hi; ++it) {
    const double mid = 0.5 * (lo + hi);
    auto cut = greedy_cut(model, ram, tr, batch, in_flight, mid);
    if (cut.empty())
      lo = mid;
    else {
      hi = mid;
      best = cut;
    }
  }

  Plan plan;
  plan.method = "manual";
  plan.nodes = pool;
  ClusterPlan cluster;
  for (int k = 0; k < stages; ++k) {
    StagePlan s;
    s.node = k;
    s.layer_begin = best[k];
    s.layer_end = best[k + 1];
    StageCost c = stage_cost(model, s.layer_begin, s.layer_end, tr, batch, in_flight);
    s.memory = c.memory;
    s.predicted_time =
        stage_compute_time(stage_work(model, s.layer_begin, s.layer_end, tr, batch),
                           scenario.device_of(k).compute_profile(), steady_ahead(k + 1 == stages));
    if (static_cast<double>(s.memory) > ram[k]) {
      std::ostringstream os;
      os << "the model does not fit the cluster's RAM: stage " << k << " (layers " << s.layer_begin
         << ".." << s.layer_end - 1 << ") needs " << format_gib(s.memory) << " but node " << k
         << " (" << scenario.device_of(k).name << ") has " << format_gib(ram[k])
         << "; the whole model needs " << format_gib(whole) << " and the pool has ";
      double total = 0;
      for (double r : ram) total += r;
      os << format_gib(total) << " (add RAM or nodes, or shrink the model or batch_size)";
      throw PlanRefused(scenario.source, "devices", os.str());
    }
    cluster.stages.push_back(s);
  }
  plan.clusters.push_back(cluster);
  CostModel(scenario, model).annotate(plan);
  return plan;
}

// Explicit clusters: [[planner.cluster]] nodes (pipeline order) and, optionally, stage_layers;
// without stage_layers the cut is the one that minimises the bottleneck (best_partition).
Plan explicit_clusters(const Scenario& scenario, const ModelDesc& model) {
  CostModel cost(scenario, model);
  LayerGraph graph(model);
  std::vector<char> used(scenario.node_count(), 0);
  std::vector<Partition> clusters;
  for (size_t c = 0; c < scenario.planner.cluster.size(); ++c) {
    const auto& spec = scenario.planner.cluster[c];
    const std::string key = "planner.cluster[" + std::to_string(c) + "]";
    std::vector<int> order;
    for (int64_t n : spec.nodes) {
      if (n < 0 || n >= scenario.node_count())
        throw ScenarioError(scenario.source, key + ".nodes",
                            "no node " + std::to_string(n) + " in a pool of " +
                                std::to_string(scenario.node_count()));
      if (used[n])
        throw ScenarioError(scenario.source, key + ".nodes",
                            "node " + std::to_string(n) + " is in two clusters");
      used[n] = 1;
      order.push_back(static_cast<int>(n));
    }
    Partition p;
    if (!spec.stage_layers.empty()) {
      if (spec.stage_layers.size() != order.size())
        throw ScenarioError(scenario.source, key + ".stage_layers",
                            "needs one entry per node of the cluster");
      p.order = order;
      p.cuts.push_back(0);
      for (auto k : spec.stage_layers) p.cuts.push_back(p.cuts.back() + static_cast<int>(k));
      if (p.cuts.back() != model.layer_count())
        throw ScenarioError(scenario.source, key + ".stage_layers",
                            "the stages hold " + std::to_string(p.cuts.back()) +
                                " layers but the model has " + std::to_string(model.layer_count()));
      p.period = cost.cluster_period(p.order, p.cuts);
    } else {
      auto best = best_partition(cost, order, graph.cuttable());
      if (!best)
        throw PlanRefused(scenario.source, key + ".nodes",
                          "these nodes cannot hold the model in any cut (too little RAM, or more "
                          "nodes than layers)");
      p = *best;
    }
    const int64_t f = cost.in_flight(static_cast<int>(order.size()));
    for (size_t s = 0; s < order.size(); ++s) {
      if (!cost.fits(order[s], p.cuts[s], p.cuts[s + 1], f))
        throw PlanRefused(scenario.source, key,
                          "the model does not fit: stage " + std::to_string(s) + " (layers " +
                              std::to_string(p.cuts[s]) + ".." + std::to_string(p.cuts[s + 1] - 1) +
                              ") needs " + format_gib(cost.memory(p.cuts[s], p.cuts[s + 1], f)) +
                              " but node " + std::to_string(order[s]) + " has " +
                              format_gib(cost.node(order[s]).ram));
    }
    clusters.push_back(p);
  }
  return assemble_plan("manual", cost, clusters);
}

}  // namespace

Plan plan_manual(const Scenario& scenario, const ModelDesc& model) {
  if (!scenario.planner.cluster.empty()) return explicit_clusters(scenario, model);
  if (scenario.planner.clusters > 1)
    throw ScenarioError(
        scenario.source, "planner.clusters",
        "method \"manual\" makes one cluster unless [[planner.cluster]] tables list them");
  return single_cluster_by_ram(scenario, model);
}

}  // namespace rv
