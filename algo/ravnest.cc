// Ravnest inside one cluster: the zero-bubble asynchronous pipeline.
//
// First stage: injects micro-batches while fewer than max_in_flight are unfinished (the staleness
// bound T), does a backward (and its optimizer step) as soon as a gradient arrives, backward first.
// Middle stages: pop work as it arrives, backward before forward; send activations on at once;
// step the optimizer right after each backward. Last stage: forward, loss and backward at once.
// Every update records its staleness (updates of this stage between the micro-batch's forward and
// its backward).
// Across clusters (bulk-synchronous, as the reference does): every average_every updates, and
// after the last, the first stage drains its pipeline and every node averages its stage with the
// other clusters' by the parallel multi-ring all-reduce (algo/ring_averager.h); work for the
// next updates that arrives during the averaging waits in the queues.
#include <deque>

#include "algo/algorithm.h"
#include "algo/pipeline_worker.h"
#include "algo/registry.h"
#include "core/error.h"

namespace rv {
namespace {

void check_kind(const Message& m, std::initializer_list<MsgKind> ok, const NodeRole& role) {
  for (auto k : ok)
    if (m.kind == k) return;
  throw InputError("node " + std::to_string(role.node) + " (stage " + std::to_string(role.stage) +
                   ") got an unexpected '" + to_string(m.kind) + "' message from node " +
                   std::to_string(m.src));
}

}  // namespace

void run_ravnest(NodeEnv& env, const RunSpec& spec, int node) {
  const TrainingSpec& tr = spec.scenario->training;
  const NodeRole role = spec.plan->role_of(node);
  if (role.stage < 0) return;  // left idle by the plan
  const int64_t cap = in_flight(algorithm_of(*spec.scenario), tr, role.stages);
  PipelineWorker w(env, spec, node, tr, cap);
  const int64_t total = tr.steps;
  const int64_t B = w.batch();
  const int64_t E = tr.average_every;
  const bool clusters = spec.plan->clusters.size() > 1;
  auto eval_due = [&](int64_t done) { return tr.eval_every > 0 && done % tr.eval_every == 0 && done < total; };
  auto average_due = [&](int64_t done) { return clusters && (done % E == 0 || done == total); };
  const bool overlapped = tr.averaging == "overlapped";
  // Overlapped: averagings run while training goes on; the last one (after the last update) is
  // bulk-synchronous, so that every cluster ends with the same model.
  auto average = [&](int64_t done, const std::function<void(Message)>& defer) {
    if (overlapped && done != total) w.start_overlapped_average(defer);
    else w.average(defer);
  };

  if (role.first()) {
    int64_t injected = 0, completed = 0;
    std::deque<Message> bwd;
    // With several clusters, no micro-batch of the next averaging period starts before this one's
    // averaging: the pipeline drains.
    auto may_inject = [&] { return !clusters || overlapped || injected < (completed / E + 1) * E; };
    while (completed < total) {
      if (role.last()) {  // a one-stage cluster: plain local training
        int64_t st = 0;
        w.forward(injected, nullptr);
        w.last_backward(injected, &st);
        w.update(injected, st);
        ++injected;
        ++completed;
      } else {
        while (auto m = w.try_recv()) bwd.push_back(std::move(*m));
        if (!bwd.empty()) {
          Message m = std::move(bwd.front());
          bwd.pop_front();
          check_kind(m, {MsgKind::kBackward}, role);
          int64_t st = 0;
          w.backward(m.id, m, &st);
          w.update(m.id, st);
          ++completed;
        } else if (injected < total && injected - completed < cap && may_inject()) {
          w.send(role.next, w.forward(injected, nullptr));
          ++injected;
          continue;
        } else {
          bwd.push_back(w.recv());
          continue;
        }
      }
      if (average_due(completed)) average(completed, [&](Message m) { bwd.push_back(std::move(m)); });
      if (eval_due(completed)) w.inject_eval(completed, completed * B);
    }
    w.inject_eval(completed, completed * B);
    w.stop_next();
    return;
  }

  if (!role.last()) {
    std::deque<Message> fwd, bwd;
    bool stopping = false;
    auto route = [&](Message m) {
      check_kind(m, {MsgKind::kForward, MsgKind::kEvalForward, MsgKind::kBackward, MsgKind::kStop}, role);
      if (m.kind == MsgKind::kBackward) bwd.push_back(std::move(m));
      else if (m.kind == MsgKind::kStop) stopping = true;
      else fwd.push_back(std::move(m));
    };
    while (true) {
      while (auto m = w.try_recv()) route(std::move(*m));
      if (!bwd.empty()) {
        Message m = std::move(bwd.front());
        bwd.pop_front();
        int64_t st = 0;
        auto g = w.backward(m.id, m, &st);
        w.send(role.prev, std::move(*g));
        w.update(m.id, st);
        if (average_due(w.version())) average(w.version(), route);
      } else if (!fwd.empty()) {
        Message m = std::move(fwd.front());
        fwd.pop_front();
        if (m.kind == MsgKind::kForward) w.send(role.next, w.forward(m.id, &m));
        else w.eval(m);
      } else if (stopping) {
        break;
      } else {
        route(w.recv());
      }
    }
    w.stop_next();
    return;
  }

  // Last stage.
  std::deque<Message> later;  // pipeline messages that arrived during an averaging
  while (true) {
    Message m;
    if (!later.empty()) {
      m = std::move(later.front());
      later.pop_front();
    } else {
      m = w.recv();
    }
    check_kind(m, {MsgKind::kForward, MsgKind::kEvalForward, MsgKind::kStop}, role);
    if (m.kind == MsgKind::kStop) break;
    if (m.kind == MsgKind::kEvalForward) {
      w.eval(m);
      continue;
    }
    w.forward(m.id, &m);
    int64_t st = 0;
    auto g = w.last_backward(m.id, &st);
    w.send(role.prev, std::move(*g));
    w.update(m.id, st);
    if (average_due(w.version())) average(w.version(), [&](Message x) { later.push_back(std::move(x)); });
  }
  w.stop_next();
}

}  // namespace rv
