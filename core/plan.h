// Plan: who does what. Clusters of nodes; in each cluster an ordered pipeline of stages, each a
// contiguous range of the model's layers on one node. Produced by planner/, read by algorithms.
#pragma once

#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "core/units.h"

namespace rv {

struct StagePlan {
  int node = -1;        // rank in the device pool
  int layer_begin = 0;  // layers [layer_begin, layer_end)
  int layer_end = 0;
  Bytes memory = 0;  // modeled peak memory of this stage on its node
  // Predicted seconds one micro-batch holds this stage's busiest resource: the larger of its
  // compute (forward + backward + update) and its own uplink's and downlink's transfer time
  // (CostModel::stage_time), so a link-bound stage shows its link time here.
  Seconds predicted_time = 0;
  Seconds predicted_compute =
      0;  // of which compute: forward + backward + update of one micro-batch
};

struct ClusterPlan {
  std::vector<StagePlan>
      stages;             // pipeline order: stages[0] reads the data, the last computes the loss
  Seconds period = 0;     // predicted seconds per micro-batch in steady state
  double throughput = 0;  // predicted samples per second (batch / period)
};

// One ring of cross-cluster averaging: a chunk of the flat parameter space and, in each cluster,
// the node that holds it (owners[c] is cluster c's node).
struct Ring {
  // Indices [begin, end) of the flat model state: each layer's parameters, then its buffers
  // (BatchNorm statistics), layer after layer (ModelDesc::state_offset).
  int64_t begin = 0, end = 0;
  std::vector<int> owners;
};

// Where a node sits in the plan; stage == -1 for a node the plan leaves idle.
struct NodeRole {
  int node = -1;
  int cluster = -1;
  int stage = -1;
  int stages = 0;  // stages in its cluster
  int prev = -1;   // rank of the previous stage's node, -1 for the first
  int next = -1;   // rank of the next stage's node, -1 for the last
  int layer_begin = 0, layer_end = 0;
  bool first() const { return stage == 0; }
  bool last() const { return stage == stages - 1; }
};

struct Plan {
  std::string method;
  int nodes = 0;  // size of the device pool
  std::vector<ClusterPlan> clusters;
  std::vector<Ring> rings;     // empty with one cluster
  Seconds averaging_time = 0;  // predicted seconds of one cross-cluster averaging
  double throughput = 0;       // predicted samples per second of the whole plan (training: the
                               // steady state's, core/output/steady_state.h, without evaluations)
  // An evaluation of B batches is predicted to hold training up for
  // evaluation_fill_time + (B - 1) x evaluation_batch_time seconds: its first batch through every
  // stage and link of the slowest cluster, then one batch per its slowest stage's time
  // (CostModel::evaluation_times). B is the test set's in batches, known when the data is.
  Seconds evaluation_batch_time = 0;
  Seconds evaluation_fill_time = 0;
  std::string reason;  // one line: the bottleneck and what bounds it (CostModel::explain)
  // What the prediction takes from an approximation, one line each (CostModel::approximations);
  // empty where it uses none.
  std::vector<std::string> approximations;
  // A search's use of its budget (planner/search_budget.h); 0 evaluations: no search.
  int64_t search_evaluations = 0;
  int64_t search_budget = 0;
  bool search_timed_out = false;  // ended by planner.time_limit_s: the plan depends on the machine

  NodeRole role_of(int node) const;
  // Predicted seconds of one evaluation of `batches` batches (0 for none).
  Seconds evaluation_time(int64_t batches) const;
  // Predicted samples per second of a stretch that trains `samples` samples and runs
  // `evaluations` evaluations of `batches` batches each: throughput with their pauses added.
  double rate_with_evaluations(double samples, int64_t evaluations, int64_t batches) const;
};

nlohmann::json to_json(const Plan& plan);
Plan plan_from_json(const nlohmann::json& j);

}  // namespace rv
