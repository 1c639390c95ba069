// GPipe: the synchronous pipeline baseline. Each step, the first stage sends m micro-batches
// forward; every stage runs all m forwards, then all m backwards (the last stage in reverse order),
// accumulating gradients; one optimizer step per stage after its m-th backward (the flush).
// Across clusters (each on its own shard): before every step's update, each stage's gradients are
// all-reduced (mean) with the other clusters' over the same multi-ring rings, so every cluster
// takes the same synchronous step.
#include <deque>
#include <vector>

#include "algo/algorithm.h"
#include "algo/pipeline_worker.h"
#include "algo/registry.h"
#include "core/error.h"

namespace rv {

namespace {

// One GPipe stage: the first stage's steps (m forwards in, m backwards out, the flush), the
// others serving what arrives.
class GpipeStage {
 public:
  GpipeStage(NodeEnv& env, const RunSpec& spec, int node, const NodeRole& role,
             const TrainingSpec& tr)
      : tr_(tr),
        role_(role),
        node_(node),
        m_(tr.micro_batches),
        w_(env, spec, node, tr, m_),
        batch_(w_.batch()) {}

  void run() {
    if (role_.first())
      run_first();
    else
      serve();
    w_.stop_next();
  }

 private:
  [[noreturn]] void unexpected(const Message& msg) const {
    throw unexpected_message(
        "node " + std::to_string(node_) + " (gpipe stage " + std::to_string(role_.stage) + ")",
        msg);
  }
  // Messages of the next step that arrive while this stage exchanges gradients wait in later_.
  std::function<void(Message)> defer() {
    return [this](Message x) { later_.push_back(std::move(x)); };
  }
  Message next_message() {
    if (later_.empty()) return w_.recv();
    Message x = std::move(later_.front());
    later_.pop_front();
    return x;
  }

  // The last stage: all m forwards are in; backward them in reverse order, then update.
  void last_flush() {
    for (auto it = pending_.rbegin(); it != pending_.rend(); ++it) {
      int64_t st = 0;
      auto g = w_.last_backward(*it, &st);
      if (g) w_.send(role_.prev, std::move(*g));
    }
    w_.exchange_gradients(defer());
    w_.update(pending_.back(), 0);
    pending_.clear();
  }

  // The first stage: each step's m forwards, its backwards (or, alone in its cluster, the flush),
  // the gradients' exchange and the update; evaluations between steps and after the last.
  void run_first() {
    for (int64_t step = 0; step < tr_.steps; ++step) {
      for (int64_t j = 0; j < m_; ++j) {
        const int64_t mb = step * m_ + j;
        Message out = w_.forward(mb, nullptr);
        if (role_.last())
          pending_.push_back(mb);
        else
          w_.send(role_.next, std::move(out));
      }
      if (role_.last()) {
        last_flush();
      } else {
        for (int64_t j = 0; j < m_; ++j) {
          Message g = next_message();
          if (g.kind != MsgKind::kBackward) unexpected(g);
          int64_t st = 0;
          w_.backward(g.id, g, &st);
        }
        w_.exchange_gradients(defer());
        w_.update(step * m_ + m_ - 1, 0);
      }
      const int64_t done = step + 1;
      if (tr_.eval_every > 0 && done % tr_.eval_every == 0 && done < tr_.steps)
        w_.inject_eval(done, done * m_ * batch_);
    }
    w_.inject_eval(tr_.steps, tr_.steps * m_ * batch_);
  }

  // A later stage: forwards on (the last stage's flush after its m-th), backwards back with the
  // update after the m-th, evaluations, until the stop.
  void serve() {
    int64_t backwards = 0;
    while (true) {
      Message msg = next_message();
      if (msg.kind == MsgKind::kStop) break;
      if (msg.kind == MsgKind::kEvalForward) {
        w_.eval(msg);
      } else if (msg.kind == MsgKind::kForward) {
        Message out = w_.forward(msg.id, &msg);
        if (role_.last()) {
          pending_.push_back(msg.id);
          if (static_cast<int64_t>(pending_.size()) == m_) last_flush();
        } else {
          w_.send(role_.next, std::move(out));
        }
      } else if (msg.kind == MsgKind::kBackward && !role_.last()) {
        int64_t st = 0;
        auto g = w_.backward(msg.id, msg, &st);
        w_.send(role_.prev, std::move(*g));
        if (++backwards == m_) {
          w_.exchange_gradients(defer());
          w_.update(msg.id, 0);
          backwards = 0;
        }
      } else {
        unexpected(msg);
      }
    }
  }

  const TrainingSpec& tr_;
  const NodeRole role_;
  const int node_;
  const int64_t m_;
  PipelineWorker w_;
  const int64_t batch_;
  std::deque<Message> later_;
  std::vector<int64_t> pending_;
};

}  // namespace

void run_gpipe(NodeEnv& env, const RunSpec& spec, int node) {
  // No update between a forward and its backward: the registry has the graph kept (stashing on).
  const TrainingSpec tr = effective_training(*spec.scenario);
  const NodeRole role = spec.plan->role_of(node);
  if (role.stage < 0) return;
  GpipeStage(env, spec, node, role, tr).run();
}

Algorithm gpipe_algorithm() {
  return {.name = "gpipe",
          .summary =
              "synchronous pipelines (micro-batches, then a flush); gradients all-reduced "
              "every step",
          .run = &run_gpipe,
          .traits = {.in_flight = InFlightRule::kMicroBatches,
                     .schedule = Schedule::kFlush,
                     .exchange = Exchange::kGradients,
                     .forces_weight_stashing = true}};
}

}  // namespace rv
