// The model's layer graph (Boost.Graph): one vertex per layer, an edge for every tensor that flows
// from one layer to a later one. A pipeline may cut between layers b-1 and b only where a single
// tensor crosses: the output of layer b-1 into layer b. Chains can be cut anywhere; a residual
// block (an edge that skips layers) cannot be cut inside.
#pragma once

#include <boost/graph/adjacency_list.hpp>
#include <utility>
#include <vector>

#include "core/model/model.h"

namespace rv {

class LayerGraph {
 public:
  using Graph = boost::adjacency_list<boost::vecS, boost::vecS, boost::bidirectionalS>;

  // The chain of `model`'s layers, plus any extra edges (from, to) with from < to (skips).
  explicit LayerGraph(const ModelDesc& model, const std::vector<std::pair<int, int>>& skips = {});

  int layers() const { return static_cast<int>(boost::num_vertices(graph_)); }
  // cuttable()[b] for b in [0, layers]: whether a stage may begin at layer b (0 and layers()
  // always).
  const std::vector<char>& cuttable() const { return cuttable_; }
  const Graph& graph() const { return graph_; }

 private:
  Graph graph_;
  std::vector<char> cuttable_;
};

}  // namespace rv
