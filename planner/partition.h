// Cutting a model into a pipeline: for nodes in a given order, the contiguous stages that minimise
// the bottleneck (the largest per-micro-batch stage cost, transfers to the neighbours included)
// with every stage within its node's memory; and the node order that does best.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "planner/cost.h"

namespace rv {

struct Partition {
  std::vector<int> order;  // nodes in pipeline order
  std::vector<int>
      cuts;  // layer boundaries, size order.size() + 1: stage s holds [cuts[s], cuts[s+1])
  double bottleneck = 0;  // largest stage cost (s per micro-batch)
  double period = 0;      // CostModel::cluster_period of this pipeline
};

// The best cut for `order`, or nothing if no cut fits the nodes' memory. `cuttable[b]` says
// whether a stage may begin at layer b. Exact (dynamic programming over boundaries) when
// nodes x boundaries^2 is below `exact_limit`, else a bisection on the bottleneck with a greedy
// check (for pipelines of hundreds of stages).
std::optional<Partition> best_partition(const CostModel& cost, const std::vector<int>& order,
                                        const std::vector<char>& cuttable,
                                        double exact_limit = 2e7);

// Stages that hold no state to average (no parameters, no buffers: a flatten, a ReLU) are merged
// into a neighbouring stage, their node left idle, wherever that fits the neighbour's memory and
// does not lengthen the pipeline's period: a node that holds only a reshape adds a hop and a link
// and helps nothing. best_pipeline applies it (greedy and ga cut every cluster with it), and so
// does exhaustive to its optimum; manual and ravnest-ga keep their layouts (the user's; the
// reference's, which ravnest-ga exists to reproduce).
void merge_stateless_stages(const CostModel& cost, Partition& p);

// The best pipeline over `nodes`: every order for up to 4 nodes; else orders as given, by speed,
// memory and bandwidth (each both ways), the best improved by swapping neighbours (up to 10
// nodes). Nothing if none fits. Deterministic.
std::optional<Partition> best_pipeline(const CostModel& cost, const std::vector<int>& nodes,
                                       const std::vector<char>& cuttable);

// best_pipeline() for many clusters of one pool, remembered. Nodes of one device group are alike
// to the cost model (same speed, memory, links and compute profile), and best_pipeline() looks at
// a node only through them and at its place in the list (its place in id order, for 4 nodes or
// fewer, where it tries every order from the sorted one). So its answer for one list serves
// every list whose groups stand in the same places: the remembered pipeline, its nodes replaced
// place for place. Answers are exactly best_pipeline()'s; a pool of a few device groups has few
// distinct lists (the ga's clusters list their members in id order, and ids run group by group),
// which is what lets the planners scale to 100,000 nodes. Remembers at most kMaxEntries lists.
// Not thread-safe.
class PipelineMemo {
 public:
  static constexpr size_t kMaxEntries = 1 << 20;
  PipelineMemo(const CostModel& cost, const std::vector<char>& cuttable)
      : cost_(cost), cuttable_(cuttable) {}
  std::optional<Partition> best(const std::vector<int>& nodes);
  const std::vector<char>& cuttable() const { return cuttable_; }
  int64_t hits() const { return hits_; }
  int64_t misses() const { return misses_; }

 private:
  const CostModel& cost_;
  const std::vector<char>& cuttable_;
  // Key: the groups in their places; value: the pipeline with each node given by its place.
  std::unordered_map<std::string, std::optional<Partition>> memo_;
  int64_t hits_ = 0, misses_ = 0;
};

}  // namespace rv
