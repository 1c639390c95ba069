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

void run_pipedream(NodeEnv& env, const RunSpec& spec, int node) {
  const TrainingSpec tr = effective_training(*spec.scenario);
  const NodeRole role = spec.plan->role_of(node);
  if (role.stage < 0) return;
  const Algorithm& algorithm = algorithm_of(*spec.scenario);
  const int64_t per_update = micro_batches_per_update(algorithm, tr);
  const int64_t total = tr.steps * per_update;     // micro-batches, ids 0 .. total - 1
  const int64_t limit = role.stages - role.stage;  // unfinished micro-batches kept here
  const bool exchanges = spec.plan->clusters.size() > 1;
  // Micro-batches per averaging period: none of the next starts before the period's averaging.
  const int64_t period = exchanges ? tr.average_every * per_update : total;
  PipelineWorker w(env, spec, node, tr, limit);
  const int64_t B = w.batch();
  auto unexpected = [&](const Message& m) {
    throw unexpected_message(
        "node " + std::to_string(node) + " (pipedream stage " + std::to_string(role.stage) + ")",
        m);
  };

  std::deque<Message> fwd, bwd, evals;
  bool stopping = false;
  auto route = [&](Message m) {
    switch (m.kind) {
      case MsgKind::kForward:
        fwd.push_back(std::move(m));
        return;
      case MsgKind::kBackward:
        bwd.push_back(std::move(m));
        return;
      case MsgKind::kEvalForward:
        evals.push_back(std::move(m));
        return;
      case MsgKind::kStop:
        stopping = true;
        return;
      default:
        unexpected(m);
    }
  };
  int64_t forwards = 0, backwards = 0;  // done here, in micro-batch order
  int64_t stalest = 0;                  // of the micro-batches the next update applies
  // After the backward of micro-batch `mb`: the update (every per_update backwards, recording the
  // largest staleness among them), the averaging it completes, and the first stage's evaluation.
  auto after_backward = [&](int64_t mb, int64_t staleness) {
    ++backwards;
    stalest = std::max(stalest, staleness);
    if (backwards % per_update != 0) return;
    w.update(mb, stalest);
    stalest = 0;
    const int64_t v = w.version();
    if (exchanges && (v % tr.average_every == 0 || v == tr.steps)) w.average(route);
    if (role.first() && tr.eval_every > 0 && v % tr.eval_every == 0 && v < tr.steps)
      w.inject_eval(v, v * per_update * B);
  };
  auto take = [&](std::deque<Message>& q, int64_t id) {
    Message m = std::move(q.front());
    q.pop_front();
    if (m.id != id)
      throw InputError("node " + std::to_string(node) + " (pipedream stage " +
                       std::to_string(role.stage) + ") got '" + to_string(m.kind) +
                       "' of micro-batch " + std::to_string(m.id) + " where " + std::to_string(id) +
                       " was due");
    return m;
  };

  for (;;) {
    while (!evals.empty()) {
      w.eval(evals.front());
      evals.pop_front();
    }
    // A forward is due while fewer than `limit` are unfinished here, unless it belongs to the next
    // averaging period and this stage still owes backwards of this one (they come first).
    const bool forward_due =
        forwards - backwards < limit && forwards < total && forwards / period <= backwards / period;
    if (forward_due) {
      Message in;
      if (!role.first()) {
        if (fwd.empty()) {
          route(w.recv());
          continue;
        }
        in = take(fwd, forwards);
      }
      const int64_t mb = forwards++;
      Message out = w.forward(mb, role.first() ? nullptr : &in);
      if (role.last()) {
        int64_t st = 0;
        auto g = w.last_backward(mb, &st);
        if (g) w.send(role.prev, std::move(*g));
        after_backward(mb, st);
      } else {
        w.send(role.next, std::move(out));
      }
      continue;
    }
    if (forwards > backwards) {  // the backward that is due (never on the last stage)
      if (bwd.empty()) {
        route(w.recv());
        continue;
      }
      Message g = take(bwd, backwards);
      int64_t st = 0;
      auto back = w.backward(g.id, g, &st);
      if (back) w.send(role.prev, std::move(*back));
      after_backward(g.id, st);
      continue;
    }
    // Every micro-batch is done here: the first stage evaluates and stops the others, which
    // serve evaluations until its stop.
    if (role.first() || stopping) break;
    route(w.recv());
  }
  if (role.first()) w.inject_eval(tr.steps, total * B);
  w.stop_next();
}

}  // namespace rv
