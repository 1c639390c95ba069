// Checkpoints in the simulator, and resuming from them with byte-identical outputs.
//
// At a checkpoint every training node writes its NodeState and blocks; a daemon actor (the
// barrier) waits for the last of them, then, at that same simulated instant T:
//   1. retires the network's connections (SimNetwork::quiesce: nothing may be in flight), so that
//      the simulation after T starts from the state a resumed one starts from;
//   2. writes the event log (events.state) and complete.json (core/checkpoint/checkpoint.h);
//   3. releases the nodes in node order.
// A resumed simulation restores the log, starts every training node blocked in resume(), and the
// barrier sleeps until T and releases them in node order: from T on, both simulations make the
// same SimGrid calls in the same order, so they compute the same times and the same numbers.
//
// Must be used from SimGrid actors of one engine.
#pragma once

#include <exception>
#include <optional>
#include <simgrid/s4u/Semaphore.hpp>
#include <string>
#include <vector>

#include "core/checkpoint/checkpoint.h"
#include "core/env.h"
#include "sim/sim_network.h"

namespace rv {

struct SimCheckpointOptions {
  int64_t every = 0;                     // checkpoint.every; 0: none
  std::string dir;                       // where they go
  std::optional<CheckpointInfo> resume;  // resume from this checkpoint (read from its folder)
  int64_t stop_after = 0;  // > 0: the run stops once this many checkpoints are complete
};

class SimCheckpoints : public Checkpoints {
 public:
  // `trainers`: the nodes that train (ascending), which every checkpoint waits for. With
  // options.resume, the log is restored from the checkpoint's events.state.
  SimCheckpoints(SimCheckpointOptions options, std::vector<int> trainers, EventLog& log,
                 SimNetwork& network);
  // Starts the barrier actor on `host`; call from the engine's setup, before Engine::run.
  void start(simgrid::s4u::Host* host);

  int64_t every() const override { return options_.every; }
  const NodeState* resume(int node) override;
  void save(const NodeState& state) override;
  // What stopped the barrier (a checkpoint that could not be written, messages in flight), if
  // anything; it then killed every actor.
  std::exception_ptr error() const { return error_; }

 private:
  void barrier();  // the daemon's body
  size_t index_of(int node) const;

  SimCheckpointOptions options_;
  std::vector<int> trainers_;
  EventLog& log_;
  SimNetwork& network_;
  std::vector<simgrid::s4u::SemaphorePtr> release_;  // per trainer, in trainers_ order
  simgrid::s4u::SemaphorePtr all_;                   // released by the last node to arrive
  size_t arrived_ = 0;
  int64_t done_ = -1;      // the update count of the checkpoint being taken
  int64_t completed_ = 0;  // checkpoints completed by this run
  bool stop_ = false;
  std::vector<NodeState> restored_;  // resume: per trainer, its state
  std::exception_ptr error_;
};

}  // namespace rv
