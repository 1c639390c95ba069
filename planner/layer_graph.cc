#include "planner/layer_graph.h"

#include "core/error.h"

namespace rv {

LayerGraph::LayerGraph(const ModelDesc& model, const std::vector<std::pair<int, int>>& skips)
    : graph_(model.layer_count()) {
  const int n = model.layer_count();
  for (int i = 0; i + 1 < n; ++i) boost::add_edge(i, i + 1, graph_);
  for (const auto& [from, to] : skips) {
    RV_CHECK(0 <= from && from < to && to < n, "layer graph: a skip edge must go forward");
    boost::add_edge(from, to, graph_);
  }
  // Boundary b is cuttable when every edge crossing it is the single edge (b-1 -> b).
  std::vector<int> crossing(n + 1, 0);
  boost::graph_traits<Graph>::edge_iterator e, end;
  for (std::tie(e, end) = boost::edges(graph_); e != end; ++e) {
    const int u = static_cast<int>(boost::source(*e, graph_));
    const int v = static_cast<int>(boost::target(*e, graph_));
    for (int b = u + 1; b <= v; ++b) ++crossing[b];
  }
  cuttable_.assign(n + 1, 0);
  cuttable_[0] = cuttable_[n] = 1;
  for (int b = 1; b < n; ++b) cuttable_[b] = crossing[b] == 1;
}

}  // namespace rv
