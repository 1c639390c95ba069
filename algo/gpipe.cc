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

void run_gpipe(NodeEnv& env, const RunSpec& spec, int node) {
  // No update between a forward and its backward: the registry has the graph kept (stashing on).
  const TrainingSpec tr = effective_training(*spec.scenario);
  const NodeRole role = spec.plan->role_of(node);
  if (role.stage < 0) return;
  const int64_t m = tr.micro_batches;
  PipelineWorker w(env, spec, node, tr, m);
  const int64_t B = w.batch();
  auto unexpected = [&](const Message& msg) {
    throw unexpected_message(
        "node " + std::to_string(node) + " (gpipe stage " + std::to_string(role.stage) + ")", msg);
  };
  // Messages of the next step that arrive while this stage exchanges gradients.
  std::deque<Message> later;
  auto defer = [&](Message x) { later.push_back(std::move(x)); };
  auto next_message = [&] {
    if (later.empty()) return w.recv();
    Message x = std::move(later.front());
    later.pop_front();
    return x;
  };
  // The last stage: all m forwards are in; backward them in reverse order, then update.
  std::vector<int64_t> pending;
  auto last_flush = [&] {
    for (auto it = pending.rbegin(); it != pending.rend(); ++it) {
      int64_t st = 0;
      auto g = w.last_backward(*it, &st);
      if (g) w.send(role.prev, std::move(*g));
    }
    w.exchange_gradients(defer);
    w.update(pending.back(), 0);
    pending.clear();
  };

  if (role.first()) {
    for (int64_t step = 0; step < tr.steps; ++step) {
      for (int64_t j = 0; j < m; ++j) {
        const int64_t mb = step * m + j;
        Message out = w.forward(mb, nullptr);
        if (role.last())
          pending.push_back(mb);
        else
          w.send(role.next, std::move(out));
      }
      if (role.last()) {
        last_flush();
      } else {
        for (int64_t j = 0; j < m; ++j) {
          Message g = next_message();
          if (g.kind != MsgKind::kBackward) unexpected(g);
          int64_t st = 0;
          w.backward(g.id, g, &st);
        }
        w.exchange_gradients(defer);
        w.update(step * m + m - 1, 0);
      }
      const int64_t done = step + 1;
      if (tr.eval_every > 0 && done % tr.eval_every == 0 && done < tr.steps)
        w.inject_eval(done, done * m * B);
    }
    w.inject_eval(tr.steps, tr.steps * m * B);
    w.stop_next();
    return;
  }

  int64_t backwards = 0;
  while (true) {
    Message msg = next_message();
    if (msg.kind == MsgKind::kStop) break;
    if (msg.kind == MsgKind::kEvalForward) {
      w.eval(msg);
    } else if (msg.kind == MsgKind::kForward) {
      Message out = w.forward(msg.id, &msg);
      if (role.last()) {
        pending.push_back(msg.id);
        if (static_cast<int64_t>(pending.size()) == m) last_flush();
      } else {
        w.send(role.next, std::move(out));
      }
    } else if (msg.kind == MsgKind::kBackward && !role.last()) {
      int64_t st = 0;
      auto g = w.backward(msg.id, msg, &st);
      w.send(role.prev, std::move(*g));
      if (++backwards == m) {
        w.exchange_gradients(defer);
        w.update(msg.id, 0);
        backwards = 0;
      }
    } else {
      unexpected(msg);
    }
  }
  w.stop_next();
}

}  // namespace rv
