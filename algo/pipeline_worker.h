// PipelineWorker: what every pipeline algorithm does on one stage, in numeric or timing mode:
// compute a forward or backward (charging the cost model's flops and recording a span), build and
// send messages, wait for messages (recording idle time), evaluate, report memory.
// The scheduling policy (when to do what) stays in the algorithm files.
#pragma once

#include <deque>
#include <memory>
#include <optional>
#include <set>

#include "algo/algorithm.h"
#include "algo/averager.h"
#include "algo/outer_optimizer.h"
#include "core/checkpoint/checkpoint.h"
#include "core/model/cost_model.h"
#include "core/model/stage.h"

namespace rv {

// The error for message `m`, which the node `receiver` names ("node 3 (gpipe stage 1)") did not
// expect: its peer broke the algorithm's protocol.
InputError unexpected_message(const std::string& receiver, const Message& m);

class PipelineWorker {
 public:
  // `training` may differ from the scenario's (gpipe keeps graphs: weight stashing semantics).
  // `role`: the stage this node holds when it is not the plan's (churn: a spare that took one).
  PipelineWorker(NodeEnv& env, const RunSpec& spec, int node, const TrainingSpec& training,
                 int64_t in_flight, const NodeRole* role = nullptr);

  const NodeRole& role() const { return role_; }
  bool numeric() const { return env_.compute.numeric(); }
  int64_t version() const { return version_; }
  int64_t batch() const { return batch_; }

  // First stage: reads micro-batch `mb` from the data; others: takes it from `in`. Returns the
  // message for the next stage (the last stage keeps its logits for last_backward()).
  Message forward(int64_t mb, const Message* in);
  // Backward of micro-batch `mb`; returns the message for the previous stage (unsent), or nothing
  // on a first stage. Sets `staleness` to updates applied since this micro-batch's forward.
  std::optional<Message> backward(int64_t mb, const Message& grad, int64_t* staleness);
  // Last stage: the loss of micro-batch `mb` (after forward()) and its backward. Records the loss.
  std::optional<Message> last_backward(int64_t mb, int64_t* staleness);
  // Applies the accumulated gradients; records the update with its staleness.
  void update(int64_t mb, int64_t staleness);

  // Evaluation round after `step` updates and `samples` training samples: the first stage injects
  // every evaluation batch (or scores it alone if it is also the last stage).
  void inject_eval(int64_t step, int64_t samples);
  // A kEvalForward message: forwarded on, or scored by the last stage.
  void eval(const Message& in);

  void send(int dst, Message m);
  // Blocks for the next message, recording the wait as idle time.
  Message recv();
  // Averaging messages that arrive early are kept for the averaging, never returned.
  std::optional<Message> try_recv();
  void stop_next();  // sends kStop to the next stage (if any) and flushes

  void record_memory();

  // Cross-cluster averaging (bulk-synchronous: the caller has drained its pipeline). Messages of
  // the pipeline that arrive meanwhile go to `defer`. No-op with one cluster.
  void average(const std::function<void(Message)>& defer);
  // Overlapped averaging: starts averaging a snapshot of this stage and returns at once; the
  // averaging advances as its messages arrive (in recv/try_recv), and when it is done the
  // difference (mean - snapshot) is added to the stage, whatever it learned meanwhile. If one is
  // still running, it is finished first (blocking).
  void start_overlapped_average(const std::function<void(Message)>& defer);
  // Blocks until the overlapped averaging in progress (if any) is done and applied.
  void finish_overlapped_average(const std::function<void(Message)>& defer);
  // Data parallelism: replaces this node's accumulated gradients (and buffers) by their mean over
  // the clusters (the same rings; every cluster is one node holding the whole model).
  void exchange_gradients(const std::function<void(Message)>& defer);
  // Replaces this node's accumulated gradients (and buffers) by what `reduce` makes of them, laid
  // out as the flat state (in timing mode `reduce` gets an undefined tensor and its result is
  // ignored): an algorithm's own all-reduce (a weighted one, a butterfly).
  void reduce_gradients(const std::function<at::Tensor(const at::Tensor&)>& reduce);
  bool averages() const { return averager_->participates() || spec_.plan->clusters.size() > 1; }

  // ---- Checkpoints (env.checkpoints set): this worker's state after `done` updates of its
  // cluster, with nothing in flight (pipelines drained, averaging done), and back.
  NodeState checkpoint_state(int64_t done) const;
  void restore(const NodeState& s);

  // ---- Churn (env.membership set). Every kMember message that reaches this worker updates the
  // roster first (and gives up the rings of an averaging in progress that a departed node was in);
  // it is then handed on like any message, so that a blocked algorithm wakes up. An algorithm
  // that cannot recover (recovering(false), the default) throws rv::Error at the first departure
  // of a node that holds a stage.
  void recovering(bool on) { recovers_ = on; }
  // Catches the roster up with the membership, as a kMember message does.
  void refresh() { on_member(); }
  Roster* roster() { return roster_.get(); }
  // Pipeline messages (kForward, kBackward) of micro-batches before period `period` (of
  // average_every micro-batches each) are dropped on arrival; with `down`, those of `period` too,
  // and every eval and stop message (those of later periods are kept).
  void set_period(int64_t period, bool down);
  void set_role(const NodeRole& role) { role_ = role; }
  // Forgets the micro-batches in flight (their graphs, their logits); returns their ids.
  std::set<int64_t> abort_inflight();
  // Averaging `round` among the roster's view of it (this node's cluster is in it): rings re-form
  // around the membership, and those of departed nodes are given up. Then answers the state
  // requests for rounds up to `round`.
  void average_round(int64_t round, const std::function<void(Message)>& defer);
  // This node's cluster sits out `round`: answers requests for earlier rounds and records kOut.
  void sit_out(int64_t round);
  // After `round`, fetches this stage's state (parameters and optimizer state) from the nodes that
  // hold its layers in a cluster of the round's view, trying the next cluster where one of them
  // leaves first. Pipeline messages that arrive meanwhile go to `defer`. Throws rv::Error when no
  // cluster of the view can supply them.
  void fetch_state(int64_t round, const std::function<void(Message)>& defer);

 private:
  // fetch_state's bookkeeping: the pieces of state missing, asked and received
  // (pipeline_worker.cc).
  class StateFetch;
  friend class StateFetch;
  Event event(EventKind kind) const;
  // Ends a span begun by event() (its end).
  void finish(Event& e) const;
  // Runs `maths` as `work` (env.compute.run) for span `e`, and sets e.cpu to the CPU seconds the
  // maths took on this thread: the host's own work, without the wait that emulates a slower device.
  void compute(Event& e, const Work& work, const std::function<void()>& maths);
  Message backward_message(int64_t mb) const;  // the (unsent, empty) gradient message
  // Records the backward span `e` and returns its staleness (updates since its forward).
  int64_t finish_backward(Event& e, int64_t mb, int64_t forward_version);
  std::optional<Message> note_recv(std::optional<Message> m);
  // Churn: whatever this worker handles itself (state requests, stale pipeline messages); true if
  // `m` is consumed. Runs on_member() for a kMember.
  bool intercept(Message& m);
  void on_member();
  void serve(const Message& request);
  void serve_pending();
  bool pipeline_kind(MsgKind k) const;
  int64_t eval_batches() const;

  NodeEnv& env_;
  RunSpec spec_;
  NodeRole role_;
  TrainingSpec training_;
  int64_t batch_;
  int64_t in_flight_cap_;
  StageCost cost_;
  StageWork work_;                // the same stage's kernels, as the compute model charges them
  std::unique_ptr<Stage> stage_;  // numeric mode only
  std::unique_ptr<Sampler> sampler_;
  int64_t version_ = 0;
  std::map<int64_t, int64_t> forward_version_;  // timing mode bookkeeping (numeric: in Stage)
  std::map<int64_t, at::Tensor> logits_;        // last stage: logits awaiting last_backward()
  int64_t trained_ = 0;                         // micro-batches whose loss this node computed
  // Last stage: evaluation round being scored.
  int64_t eval_step_ = -1, eval_seen_ = 0, eval_count_ = 0;
  double eval_correct_ = 0;
  double eval_loss_ = 0;
  Bytes peak_memory_ = 0;
  std::unique_ptr<Averager> averager_;
  std::unique_ptr<Roster> roster_;  // churn only
  bool recovers_ = false;
  size_t events_seen_ = 0;  // membership events handled by on_member()
  int64_t period_ = 0;
  bool down_ = false;
  int64_t round_done_ = -1;       // the last round averaged: its state can be served
  int64_t averaging_round_ = -1;  // the round of the last averaging begun
  std::deque<Message> requests_;  // state requests for later rounds
  bool average_optimizer_ =
      false;              // averagings carry the optimizer's state too (average_rows_ > 1)
  int64_t average_rows_;  // rows of an averaged tensor (Stage::averaged_state)
  int64_t averagings_ = 0;
  at::Tensor snapshot_;  // overlapped averaging: the state it started from
  // An outer step (the algorithm's hooks.outer_step) after each exchange of parameters.
  bool outer_step_ = false;
  std::unique_ptr<OuterOptimizer> outer_;  // numeric mode
  at::Tensor outer_mask_;                  // 1 at the stage's parameters, 0 at its buffers
  void outer_average(int64_t round, const std::function<void(Message)>& defer);
  void poll_average();      // advances an overlapped averaging; applies it when done
  void apply_overlapped();  // adds (mean - snapshot) to the stage (and optimizer state)
  // For Averager::wait: the transport's next message; other messages go to `defer`, recorded.
  std::function<Message()> raw_recv();
  std::function<void(Message)> other(const std::function<void(Message)>& defer);
};

}  // namespace rv
