// PipeDream (arXiv 1806.03377): the 1F1B schedule with weight stashing, and PipeDream-2BW
// (arXiv 2006.09503: training.double_buffered_weights) as an option.
//
// Inside a cluster of p stages, stage s keeps at most p - s micro-batches unfinished: it warms up
// with p - s forwards, then strictly alternates one backward and one forward, waiting for the one
// that is due even when the other kind is ready (the first stage admits p, one per stage, as
// PipeDream's NOAM for a straight pipeline; the last stage runs each forward's backward at once).
// Ravnest's stages instead take whatever work is there, backward first (algo/ravnest.cc): where a
// middle stage waits for a backward with a forward ready, 1F1B has a bubble that ravnest fills,
// and 1F1B keeps fewer micro-batches (activations) on the later stages.
// Weight stashing: a backward uses the weights its forward used (the registry forces it). Each
// stage steps its optimizer after every backward; with double-buffered weights after every
// micro_batches backwards, the gradients accumulated, so that at most two weight versions are
// alive and a micro-batch's weights lag the newest by at most one.
// Across clusters: as ravnest's bulk-synchronous averaging, every average_every updates on
// drained pipelines (the first stage admits no micro-batch of the next period before its own
// averaging), each cluster on its own shard.
#include <algorithm>
#include <deque>

#include "algo/algorithm.h"
#include "algo/pipeline_worker.h"
#include "algo/registry.h"
#include "core/error.h"

namespace rv {

namespace {

const KeySpec& double_buffered_key() {
  static const KeySpec k = training_flag_key(
      "double_buffered_weights", false,
      "pipedream: PipeDream-2BW: micro_batches micro-batches accumulate into each update, and a "
      "stage keeps two weight versions (new micro-batches the newer, those in flight the one "
      "their forward used)");
  return k;
}

bool double_buffered(const TrainingSpec& training) {
  return std::get<bool>(stored_value(training, double_buffered_key()));
}

// 2BW: a step's micro-batches per update; else each backward updates.
int64_t micro_batches_per_update(const TrainingSpec& training) {
  return double_buffered(training) ? training.micro_batches : 1;
}

// 2BW: one older weight version at most.
void effective(TrainingSpec& training) {
  if (double_buffered(training)) training.weight_versions = 1;
}

// One PipeDream stage: 1F1B in micro-batch order, forwards while fewer than `limit_` are
// unfinished here, the update after every per_update backwards, the averaging that completes.
class PipeDreamStage {
 public:
  PipeDreamStage(NodeEnv& env, const RunSpec& spec, int node, const NodeRole& role,
                 const TrainingSpec& tr)
      : tr_(tr),
        role_(role),
        node_(node),
        per_update_(micro_batches_per_update(tr)),
        total_(tr.steps * per_update_),
        limit_(role.stages - role.stage),
        exchanges_(spec.plan->clusters.size() > 1),
        period_(exchanges_ ? tr.average_every * per_update_ : total_),
        w_(env, spec, node, tr, limit_),
        batch_(w_.batch()) {}

  void run() {
    for (;;) {
      while (!evals_.empty()) {
        w_.eval(evals_.front());
        evals_.pop_front();
      }
      // A forward is due while fewer than `limit` are unfinished here, unless it belongs to the
      // next averaging period and this stage still owes backwards of this one (they come first).
      const bool forward_due = forwards_ - backwards_ < limit_ && forwards_ < total_ &&
                               forwards_ / period_ <= backwards_ / period_;
      if (forward_due) {
        forward();
        continue;
      }
      if (forwards_ > backwards_) {  // the backward that is due (never on the last stage)
        backward();
        continue;
      }
      // Every micro-batch is done here: the first stage evaluates and stops the others, which
      // serve evaluations until its stop.
      if (role_.first() || stopping_) break;
      route(w_.recv());
    }
    if (role_.first()) w_.inject_eval(tr_.steps, total_ * batch_);
    w_.stop_next();
  }

 private:
  void route(Message m) {
    switch (m.kind) {
      case MsgKind::kForward:
        fwd_.push_back(std::move(m));
        return;
      case MsgKind::kBackward:
        bwd_.push_back(std::move(m));
        return;
      case MsgKind::kEvalForward:
        evals_.push_back(std::move(m));
        return;
      case MsgKind::kStop:
        stopping_ = true;
        return;
      default:
        throw unexpected_message("node " + std::to_string(node_) + " (pipedream stage " +
                                     std::to_string(role_.stage) + ")",
                                 m);
    }
  }

  // The due forward (and on the last stage its backward), or a wait for its input.
  void forward() {
    Message in;
    if (!role_.first()) {
      if (fwd_.empty()) {
        route(w_.recv());
        return;
      }
      in = take(fwd_, forwards_);
    }
    const int64_t mb = forwards_++;
    Message out = w_.forward(mb, role_.first() ? nullptr : &in);
    if (role_.last()) {
      int64_t st = 0;
      auto g = w_.last_backward(mb, &st);
      if (g) w_.send(role_.prev, std::move(*g));
      after_backward(mb, st);
    } else {
      w_.send(role_.next, std::move(out));
    }
  }

  // The due backward, or a wait for its gradient.
  void backward() {
    if (bwd_.empty()) {
      route(w_.recv());
      return;
    }
    Message g = take(bwd_, backwards_);
    int64_t st = 0;
    auto back = w_.backward(g.id, g, &st);
    if (back) w_.send(role_.prev, std::move(*back));
    after_backward(g.id, st);
  }

  // After the backward of micro-batch `mb`: the update (every per_update backwards, recording the
  // largest staleness among them), the averaging it completes, and the first stage's evaluation.
  void after_backward(int64_t mb, int64_t staleness) {
    ++backwards_;
    stalest_ = std::max(stalest_, staleness);
    if (backwards_ % per_update_ != 0) return;
    w_.update(mb, stalest_);
    stalest_ = 0;
    const int64_t v = w_.version();
    if (exchanges_ && (v % tr_.average_every == 0 || v == tr_.steps))
      w_.average([this](Message m) { route(std::move(m)); });
    if (role_.first() && tr_.eval_every > 0 && v % tr_.eval_every == 0 && v < tr_.steps)
      w_.inject_eval(v, v * per_update_ * batch_);
  }

  // The front of `q`, which must be micro-batch `id`'s.
  Message take(std::deque<Message>& q, int64_t id) {
    Message m = std::move(q.front());
    q.pop_front();
    if (m.id != id)
      throw InputError("node " + std::to_string(node_) + " (pipedream stage " +
                       std::to_string(role_.stage) + ") got '" + to_string(m.kind) +
                       "' of micro-batch " + std::to_string(m.id) + " where " + std::to_string(id) +
                       " was due");
    return m;
  }

  const TrainingSpec& tr_;
  const NodeRole role_;
  const int node_;
  const int64_t per_update_;
  const int64_t total_;  // micro-batches, ids 0 .. total - 1
  const int64_t limit_;  // unfinished micro-batches kept here
  const bool exchanges_;
  // Micro-batches per averaging period: none of the next starts before the period's averaging.
  const int64_t period_;
  PipelineWorker w_;
  const int64_t batch_;
  std::deque<Message> fwd_, bwd_, evals_;
  bool stopping_ = false;
  int64_t forwards_ = 0, backwards_ = 0;  // done here, in micro-batch order
  int64_t stalest_ = 0;                   // of the micro-batches the next update applies
};

}  // namespace

void run_pipedream(NodeEnv& env, const RunSpec& spec, int node) {
  const TrainingSpec tr = effective_training(*spec.scenario);
  const NodeRole role = spec.plan->role_of(node);
  if (role.stage < 0) return;
  PipeDreamStage(env, spec, node, role, tr).run();
}

Algorithm pipedream_algorithm() {
  return {.name = "pipedream",
          .summary =
              "PipeDream: 1F1B pipelines (stages - s warm-up forwards on stage s, then one "
              "backward, one forward) with weight stashing, or 2BW "
              "(double_buffered_weights); clusters averaged as ravnest's",
          .run = &run_pipedream,
          .traits = {.in_flight = InFlightRule::kStages, .forces_weight_stashing = true},
          .hooks = {.micro_batches_per_update = &micro_batches_per_update, .effective = &effective},
          .keys = {double_buffered_key()}};
}

}  // namespace rv
