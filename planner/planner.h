// Planner: pure functions from a device pool and a model profile to a Plan. No I/O, no clocks:
// the same scenario and seed give the same plan.
//
// Methods (scenario key planner.method):
//   manual      clusters and stages written in the scenario ([[planner.cluster]] nodes and
//               stage_layers); without them one cluster of every node, layers cut so that stage
//               memory follows each node's RAM (or as planner.stage_layers says).
//   greedy      nodes dealt by speed into C clusters in snake order, for the best C; each cluster's
//               pipeline cut by best_pipeline(). Fast.
//   ga          ours: a genetic algorithm over node-to-cluster assignments (nodes may be left idle)
//               maximising the predicted global throughput (the slowest cluster gates the
//               bulk-synchronous averaging), every cluster's pipeline order and cut optimised.
//   ravnest-ga  the Ravnest reference's algorithm, as documented (fitness on RAM and RAM/bandwidth,
//               at most 5 clusters, equal split by parameter count, config order), for comparison.
//   exhaustive  the true optimum of what ga searches, for pools of at most 12 nodes.
// planner.clusters fixes the number of clusters (greedy, ga, exhaustive) or leaves it to the
// planner ("auto"). Every plan is annotated with the cost model's predictions (planner/cost.h).
// An infeasible pool is a ScenarioError that says what is missing.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "core/model/model.h"
#include "core/plan.h"
#include "core/scenario/scenario.h"
#include "planner/cost.h"
#include "planner/partition.h"

namespace rv {

Plan make_plan(const Scenario& scenario, const ModelDesc& model);

Plan plan_manual(const Scenario& scenario, const ModelDesc& model);
Plan plan_greedy(const Scenario& scenario, const ModelDesc& model);
Plan plan_ga(const Scenario& scenario, const ModelDesc& model);
Plan plan_ravnest_ga(const Scenario& scenario, const ModelDesc& model);
Plan plan_exhaustive(const Scenario& scenario, const ModelDesc& model);

// ---- Shared by the methods ----

// Throws ScenarioError if no plan can exist: the pool's RAM is below the model's, or a node
// cannot hold even the smallest layer.
void check_pool(const Scenario& scenario, const ModelDesc& model, const CostModel& cost);

// "1.5 GiB": bytes for messages.
std::string format_gib(double bytes);
// What a refusal for want of RAM adds when weight stashing is on (its older weight copies are
// often what does not fit), else "".
std::string stashing_hint(const CostModel& cost);

// Every node of the pool, fastest first (ties in pool order).
std::vector<int> nodes_by_speed(const CostModel& cost);

// A Plan from pipelines (one per cluster), annotated with the predictions.
Plan assemble_plan(const std::string& method, const CostModel& cost,
                   const std::vector<Partition>& clusters);

// Predicted samples per second of these pipelines as clusters (rings and averaging included).
double score_clusters(const CostModel& cost, const std::vector<Partition>& clusters);
// The same, of pipelines held elsewhere (a search's cache).
double score_clusters(const CostModel& cost, const std::vector<const Partition*>& clusters);

// Numbers of clusters worth trying for a pool of `nodes` when the scenario says "auto" (or the
// one it fixes): 1, 2, 3, 4, 6, 8, 12, ... up to `most`.
std::vector<int> cluster_counts(const Scenario& scenario, int nodes, int most);

// The best plan of dealing `nodes` (best first) into `c` clusters in snake order; nothing if a
// cluster cannot hold the model. Each cluster's pipeline comes from `memo` (the same answers as
// best_pipeline(), remembered across calls).
std::optional<std::vector<Partition>> snake_clusters(PipelineMemo& memo,
                                                     const std::vector<int>& nodes, int c);

}  // namespace rv
