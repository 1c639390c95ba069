// The communication graph of a plan (Boost.Graph): one vertex per node of the pool, a directed
// edge for every flow the plan creates, with its bytes: activations and gradients between
// neighbouring stages (per micro-batch) and segments between ring neighbours (per averaging).
// The cost model reads link loads from it; `ravnest plan` can show the busiest links.
#pragma once

#include <boost/graph/adjacency_list.hpp>
#include <vector>

#include "core/plan.h"
#include "planner/cost.h"

namespace rv {

enum class FlowKind { kActivation, kGradient, kAveraging };

struct Flow {
  FlowKind kind = FlowKind::kActivation;
  double bytes = 0;  // per micro-batch (activation, gradient) or per averaging round (averaging)
};

using CommGraph = boost::adjacency_list<boost::vecS, boost::vecS, boost::bidirectionalS,
                                        boost::no_property, Flow>;

// The flows of `plan`'s pipelines and, when `rings` are given, of one averaging round.
CommGraph comm_graph(const CostModel& cost, const std::vector<ClusterPlan>& clusters,
                     const std::vector<Ring>& rings);

// Bytes each node sends (out) and receives (in) over flows of `kind`.
struct LinkLoad {
  std::vector<double> out, in;
};
LinkLoad link_load(const CommGraph& g, FlowKind kind);

}  // namespace rv
