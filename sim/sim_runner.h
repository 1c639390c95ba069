// `ravnest sim`: runs every node of a scenario as a SimGrid actor on the scenario's platform.
// One simulation per process (SimGrid allows one Engine per process).
#pragma once

#include <functional>
#include <vector>

#include "algo/algorithm.h"
#include "core/output/metrics.h"
#include "sim/engine_options.h"
#include "sim/sim_checkpoint.h"

namespace rv {

struct SimResult {
  std::vector<Event> events;  // every node's events (with output.metrics = "summary", folded)
  Seconds simulated_time = 0;
  Seconds event_loop_wall_s =
      0;  // wall time of SimGrid's event loop alone (not the setup before it)
};

// One node's body inside the simulation (an algorithm, or a test's own code).
using NodeBody = std::function<void(NodeEnv& env, int node)>;

// Runs `body` for each of `nodes` as an actor on the scenario's platform (network model, hosts and
// links from the scenario), until every actor is done. The building block of run_simulation().
// Nodes i with fold[i] != 0 keep their send, recv and wait events as totals (EventLog::fold).
// `engine` (SimGrid's --cfg and --log) applies after the scenario's settings (engine_options.h).
// With checkpoints.every > 0, the run takes checkpoints (sim/sim_checkpoint.h) of `nodes`; with
// checkpoints.resume, it resumes from one: the observer first sees the events recorded before it.
SimResult simulate(const Scenario& scenario, const std::vector<int>& nodes, bool numeric,
                   const NodeBody& body, Metrics* observer = nullptr, std::vector<char> fold = {},
                   const EngineOptions& engine = {}, const SimCheckpointOptions& checkpoints = {});

// Runs the simulation. `spec.data` must be set in numeric mode and may be null in timing mode.
// `observer`, if given, sees every event as it is recorded (progress display).
// Throws the first node's error, or rv::Error if the nodes deadlock.
// Throws StoppedAtCheckpoint where checkpoints.stop_after asked the run to stop.
SimResult run_simulation(const RunSpec& spec, Metrics* observer = nullptr,
                         const EngineOptions& engine = {},
                         const SimCheckpointOptions& checkpoints = {});

}  // namespace rv
