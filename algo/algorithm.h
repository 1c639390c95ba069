// Entry point of the algorithm layer: one node's whole run, as straight-line blocking code
// against NodeEnv. Executors call run_node() once per node (a SimGrid actor, a thread, a process).
#pragma once

#include "core/data/dataset.h"
#include "core/env.h"
#include "core/model/model.h"
#include "core/plan.h"
#include "core/scenario/scenario.h"

namespace rv {

// Everything a node needs besides its environment. `data` is null in the simulator's timing mode.
// All pointers outlive the run; the objects are shared read-only between nodes of one process.
struct RunSpec {
  const Scenario* scenario = nullptr;
  const Plan* plan = nullptr;
  const ModelDesc* model = nullptr;
  const Dataset* data = nullptr;
};

// Runs node `node` to completion with the algorithm the scenario names (algo/registry.h).
// Throws rv::PeerError when a peer fails.
void run_node(NodeEnv& env, const RunSpec& spec, int node);

// The algorithms (one file each), registered in algo/registry.cc.
void run_ravnest(NodeEnv& env, const RunSpec& spec, int node);
void run_gpipe(NodeEnv& env, const RunSpec& spec, int node);
void run_sync_dp(NodeEnv& env, const RunSpec& spec, int node);
void run_diloco(NodeEnv& env, const RunSpec& spec, int node);
void run_local_sgd(NodeEnv& env, const RunSpec& spec, int node);
void run_pipedream(NodeEnv& env, const RunSpec& spec, int node);
void run_dedloc(NodeEnv& env, const RunSpec& spec, int node);

// The schedule ravnest, diloco and local-sgd share (algo/ravnest.cc): each cluster's asynchronous
// pipeline, drained every average_every updates (and after the last) for an exchange of
// parameters with the other clusters, which the algorithm's OuterStep turns into the next ones.
void run_periodic_pipeline(NodeEnv& env, const RunSpec& spec, int node);

}  // namespace rv
