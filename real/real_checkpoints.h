// Checkpoints of a real run: each rank that trains writes its NodeState, with its own events so
// far, into the checkpoint folder on its machine (core/checkpoint/checkpoint.h), then waits for
// the others at a c10d barrier over the training ranks (a process group of their own); the lowest
// of them then marks the checkpoint complete. A resumed rank reads its state from the round folder
// it is given, puts its events back in its log, and its clock goes on from the checkpoint's time.
//
// Threading: like every NodeEnv part, used from the rank's own thread.
#pragma once

#include <c10/util/intrusive_ptr.h>

#include <optional>
#include <string>
#include <vector>

#include "core/checkpoint/checkpoint.h"
#include "core/env.h"
#include "real/gloo_transport.h"

namespace rv {

class RealCheckpoints : public Checkpoints {
 public:
  // `dir`: where this run's checkpoints go; `trainers`: the ranks that train (ascending);
  // `log`: this rank's events; `clock`: its clock; `resume`: this rank's state to resume from;
  // `stop_after` > 0: every training rank throws StoppedAtCheckpoint once that many are complete.
  RealCheckpoints(int64_t every, std::string dir, std::vector<int> trainers, int rank,
                  GlooTransport& transport, const EventLog& log, const Clock& clock,
                  std::optional<NodeState> resume, int64_t stop_after);
  ~RealCheckpoints() override;  // where c10d's group is a complete type

  int64_t every() const override { return every_; }
  const NodeState* resume(int node) override;
  void save(const NodeState& state) override;

 private:
  void barrier();

  int64_t every_;
  std::string dir_;
  std::vector<int> trainers_;
  int rank_;
  GlooTransport& transport_;
  const EventLog& log_;
  const Clock& clock_;
  std::optional<NodeState> resume_;
  int64_t stop_after_;
  int64_t completed_ = 0;
  c10::intrusive_ptr<c10d::ProcessGroupGloo> group_;  // the training ranks, made at the first save
};

}  // namespace rv
