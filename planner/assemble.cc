// What the planning methods share: feasibility checks, turning pipelines into an annotated Plan,
// the score every method maximises, and the snake dealing of nodes into clusters.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <sstream>

#include "core/error.h"
#include "planner/layer_graph.h"
#include "planner/planner.h"

namespace rv {

std::string format_gib(double bytes) {
  std::ostringstream os;
  os.precision(3);
  os << bytes / kGbToBytes << " GiB";
  return os.str();
}

std::string stashing_hint(const CostModel& cost) {
  if (!cost.training().weight_stashing) return "";
  return "; with weight stashing a stage keeps an older copy of its weights for each micro-batch "
         "in flight "
         "but one (as many micro-batches as stages): training.weight_stashing = false keeps none";
}

std::vector<int> nodes_by_speed(const CostModel& cost) {
  std::vector<int> nodes(cost.nodes());
  std::iota(nodes.begin(), nodes.end(), 0);
  std::stable_sort(nodes.begin(), nodes.end(),
                   [&](int a, int b) { return cost.node(a).speed > cost.node(b).speed; });
  return nodes;
}

void check_pool(const Scenario& scenario, const ModelDesc& model, const CostModel& cost) {
  double total = 0;
  for (int n = 0; n < cost.nodes(); ++n) total += cost.node(n).ram;
  const double whole = cost.memory(0, model.layer_count(), 1);
  if (total < whole) {
    throw PlanRefused(scenario.source, "devices",
                      "the pool's RAM (" + format_gib(total) + ") is below what the model needs (" +
                          format_gib(whole) +
                          " for weights, gradients, optimizer state and one micro-batch): add " +
                          format_gib(whole - total) + " or more");
  }
  double smallest = whole;
  int smallest_layer = 0;
  for (int l = 0; l < model.layer_count(); ++l) {
    const double m = cost.memory(l, l + 1, 1);
    if (m < smallest) {
      smallest = m;
      smallest_layer = l;
    }
  }
  for (int n = 0; n < cost.nodes(); ++n) {
    if (cost.node(n).ram < smallest) {
      throw ScenarioError(
          scenario.source, "devices",
          "node " + std::to_string(n) + " (" + scenario.device_of(n).name + ") has " +
              format_gib(cost.node(n).ram) + " of RAM, too little for any layer: the smallest (" +
              model.profile[smallest_layer].name + ") needs " + format_gib(smallest));
    }
  }
}

namespace {

// The clusters as a plan holds them: stages of node and layers, no figures yet.
std::vector<ClusterPlan> cluster_plans(const std::vector<const Partition*>& clusters) {
  std::vector<ClusterPlan> out;
  out.reserve(clusters.size());
  for (const Partition* p : clusters) {
    ClusterPlan c;
    c.stages.reserve(p->order.size());
    for (size_t s = 0; s < p->order.size(); ++s) {
      StagePlan st;
      st.node = p->order[s];
      st.layer_begin = p->cuts[s];
      st.layer_end = p->cuts[s + 1];
      c.stages.push_back(st);
    }
    out.push_back(std::move(c));
  }
  return out;
}

std::vector<const Partition*> pointers_to(const std::vector<Partition>& clusters) {
  std::vector<const Partition*> out;
  out.reserve(clusters.size());
  for (const Partition& p : clusters) out.push_back(&p);
  return out;
}

}  // namespace

Plan assemble_plan(const std::string& method, const CostModel& cost,
                   const std::vector<Partition>& clusters) {
  Plan plan;
  plan.method = method;
  plan.nodes = cost.nodes();
  plan.clusters = cluster_plans(pointers_to(clusters));
  cost.annotate(plan);
  return plan;
}

double score_clusters(const CostModel& cost, const std::vector<Partition>& clusters) {
  return score_clusters(cost, pointers_to(clusters));
}

double score_clusters(const CostModel& cost, const std::vector<const Partition*>& clusters) {
  if (clusters.empty()) return 0.0;
  if (clusters.size() == 1) return cost.batch() / clusters[0]->period;
  // The throughput annotate() gives the assembled plan, without the per-stage figures it also
  // fills in: each Partition's period is already cluster_period() of its pipeline.
  const std::vector<ClusterPlan> plans = cluster_plans(clusters);
  std::vector<double> periods;
  std::vector<CostModel::Fill> fills;
  std::vector<const std::vector<int>*> orders, cuts;
  periods.reserve(clusters.size());
  const bool drains = cost.drains(static_cast<int>(clusters.size()));
  for (const Partition* p : clusters) {
    periods.push_back(p->period);
    if (drains) fills.push_back(cost.fill(p->order, p->cuts));
    orders.push_back(&p->order);
    cuts.push_back(&p->cuts);
  }
  periods = cost.shared_periods(orders, cuts, std::move(periods));
  const std::vector<Ring> rings = make_rings(cost.model(), plans);
  return cost.throughput(periods, cost.averaging_time(plans, rings), fills);
}

std::vector<int> cluster_counts(const Scenario& scenario, int nodes, int most) {
  if (scenario.planner.clusters > 0) return {scenario.planner.clusters};
  std::vector<int> out;
  for (int c = 1; c <= std::min(nodes, most);) {
    out.push_back(c);
    // 1, 2, 3, 4, 6, 8, 12, 16, 24, ...: dense where it matters, sparse where it does not.
    int p = 1;
    while (p * 2 <= c) p *= 2;
    c += std::max(1, p / 2);
  }
  return out;
}

std::optional<std::vector<Partition>> snake_clusters(PipelineMemo& memo,
                                                     const std::vector<int>& nodes, int c) {
  const std::vector<char>& cuttable = memo.cuttable();
  if (c < 1 || c > static_cast<int>(nodes.size())) return std::nullopt;
  std::vector<std::vector<int>> groups(c);
  for (size_t i = 0; i < nodes.size(); ++i) {
    const int round = static_cast<int>(i) / c, k = static_cast<int>(i) % c;
    groups[round % 2 == 0 ? k : c - 1 - k].push_back(nodes[i]);
  }
  std::vector<Partition> out;
  for (auto& g : groups) {
    // A cluster larger than the model's cut points leaves its slowest nodes idle.
    const int room = static_cast<int>(std::count(cuttable.begin(), cuttable.end(), 1)) - 1;
    if (static_cast<int>(g.size()) > room) g.resize(room);
    auto p = memo.best(g);
    if (!p) {
      // Fewer, stronger stages may fit where all of them do not: drop the slowest until it does.
      while (!p && g.size() > 1) {
        g.pop_back();
        p = memo.best(g);
      }
      if (!p) return std::nullopt;
    }
    out.push_back(*p);
  }
  return out;
}

// Replicas (data parallelism): every node is a cluster holding the whole model, or the pool is
// refused. The plan's method is the algorithm's name.
Plan plan_replicas(const Scenario& scenario, const ModelDesc& model) {
  CostModel cost(scenario, model);
  const int layers = model.layer_count();
  const double need = cost.memory(0, layers, 1);
  std::vector<Partition> clusters;
  for (int n = 0; n < cost.nodes(); ++n) {
    if (cost.node(n).ram < need)
      throw PlanRefused(scenario.source, "training.algorithm",
                        std::string(cost.algorithm().name) +
                            " needs every node to hold the whole model (" + format_gib(need) +
                            "), but node " + std::to_string(n) + " (" + scenario.device_of(n).name +
                            ") has " + format_gib(cost.node(n).ram) +
                            ": Ravnest's pipelines need only a share of it on each node");
    Partition p;
    p.order = {n};
    p.cuts = {0, layers};
    p.period = cost.cluster_period(p.order, p.cuts);
    clusters.push_back(p);
  }
  return assemble_plan(cost.algorithm().name, cost, clusters);
}

namespace {

Plan plan_with(const Scenario& scenario, const ModelDesc& model) {
  if (algorithm_of(scenario).traits.layout == Layout::kReplicas)
    return plan_replicas(scenario, model);
  switch (scenario.planner.method) {
    case PlannerMethod::kManual:
      return plan_manual(scenario, model);
    case PlannerMethod::kGreedy:
      return plan_greedy(scenario, model);
    case PlannerMethod::kGa:
      return plan_ga(scenario, model);
    case PlannerMethod::kRavnestGa:
      return plan_ravnest_ga(scenario, model);
    case PlannerMethod::kExhaustive:
      return plan_exhaustive(scenario, model);
  }
  RV_CHECK(false, "plan_with: a planner method outside the enum");
}

}  // namespace

Plan make_plan(const Scenario& scenario, const ModelDesc& model) {
  if (scenario.initial_node_count() == scenario.node_count()) {
    Plan plan = plan_with(scenario, model);
    const CostModel cost(scenario, model);
    plan.reason = cost.explain(plan);
    plan.approximations = cost.approximations(plan);
    return plan;
  }
  // Groups that arrive later (devices[].join_at_s) are not there to plan with: the plan covers
  // the nodes present at the start, ranks [0, initial_node_count()), and names the whole pool,
  // whose later ranks start as spares.
  Scenario present = scenario;
  present.devices.erase(std::remove_if(present.devices.begin(), present.devices.end(),
                                       [](const DeviceGroup& g) { return g.join_at_s > 0; }),
                        present.devices.end());
  Plan plan = plan_with(present, model);
  const CostModel cost(present, model);
  plan.reason = cost.explain(plan);
  plan.approximations = cost.approximations(plan);
  plan.nodes = scenario.node_count();
  return plan;
}

}  // namespace rv
