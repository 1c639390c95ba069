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

// The algorithms are one file each (algo/<name>.cc, defining its registry entry and run function),
// listed in algo/registry.cc.

// The schedule ravnest, diloco and local-sgd share (algo/ravnest.cc): each cluster's asynchronous
// pipeline, drained every average_every updates (and after the last) for an exchange of
// parameters with the other clusters, which the algorithm's hooks.outer_step, if any, turns into
// the next ones (algo/registry.h).
void run_periodic_pipeline(NodeEnv& env, const RunSpec& spec, int node);

}  // namespace rv
