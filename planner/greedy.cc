// greedy: sort the nodes by speed, deal them into C clusters in snake order (balancing each
// cluster's total speed), cut each cluster's pipeline with best_pipeline(), keep the best C.
#include <algorithm>
#include <numeric>

#include "core/error.h"
#include "planner/layer_graph.h"
#include "planner/planner.h"

namespace rv {

Plan plan_greedy(const Scenario& scenario, const ModelDesc& model) {
  CostModel cost(scenario, model);
  check_pool(scenario, model, cost);
  LayerGraph graph(model);
  const std::vector<int> nodes = nodes_by_speed(cost);
  std::optional<std::vector<Partition>> best;
  double best_score = -1;
  PipelineMemo memo(cost, graph.cuttable());
  for (int c : cluster_counts(scenario, cost.nodes(), cost.nodes())) {
    auto clusters = snake_clusters(memo, nodes, c);
    if (!clusters) continue;
    const double s = score_clusters(cost, *clusters);
    if (s > best_score) {
      best_score = s;
      best = clusters;
    }
  }
  if (!best)
    throw PlanRefused(scenario.source, "planner.clusters",
                      "greedy: no number of clusters gives every cluster enough RAM for the model" +
                          stashing_hint(cost));
  return assemble_plan("greedy", cost, *best);
}

}  // namespace rv
