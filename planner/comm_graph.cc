#include "planner/comm_graph.h"

#include "core/model/cost_model.h"

namespace rv {

CommGraph comm_graph(const CostModel& cost, const std::vector<ClusterPlan>& clusters,
                     const std::vector<Ring>& rings) {
  CommGraph g(cost.nodes());
  for (const auto& c : clusters)
    for (size_t s = 0; s + 1 < c.stages.size(); ++s) {
      const int a = c.stages[s].node, b = c.stages[s + 1].node;
      const double bytes = cost.boundary_bytes(c.stages[s].layer_end);
      boost::add_edge(a, b, Flow{FlowKind::kActivation, bytes}, g);
      boost::add_edge(b, a, Flow{FlowKind::kGradient, bytes}, g);
    }
  const int members = static_cast<int>(clusters.size());
  if (members > 1)
    for (const Ring& r : rings) {
      // Each round, every owner sends 1/C of its ring's chunk to the next owner.
      const double piece = static_cast<double>(kFloatBytes * (r.end - r.begin)) / members;
      for (int i = 0; i < members; ++i)
        boost::add_edge(r.owners[i], r.owners[(i + 1) % members], Flow{FlowKind::kAveraging, piece},
                        g);
    }
  return g;
}

LinkLoad link_load(const CommGraph& g, FlowKind kind) {
  const size_t n = boost::num_vertices(g);
  LinkLoad load{std::vector<double>(n, 0.0), std::vector<double>(n, 0.0)};
  boost::graph_traits<CommGraph>::edge_iterator e, end;
  for (std::tie(e, end) = boost::edges(g); e != end; ++e) {
    const Flow& f = g[*e];
    if (f.kind != kind) continue;
    load.out[boost::source(*e, g)] += f.bytes;
    load.in[boost::target(*e, g)] += f.bytes;
  }
  return load;
}

}  // namespace rv
