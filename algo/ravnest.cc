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
//
// Checkpoints (env.checkpoints set): every checkpoint.every updates, after that round's averaging,
// every node keeps its state (core/checkpoint/) and waits for all the others; a resumed run's
// nodes start from it.
//
// With churn (env.membership set: nodes leave and arrive), the same pipeline runs period by
// period (average_every micro-batches, then an averaging round), and recovers as algo/roster.h
// lays out: a cluster that loses a node drops its micro-batches in flight (kDrop) and sits out
// the rounds until it is whole again; the clusters still up average among themselves (rings
// re-formed, rings of a node that left during an averaging given up); after a round it sat out,
// each node of a whole cluster (its survivors and the spare or newcomer that took the lost stage)
// fetches its layers' state and optimizer state from a cluster that averaged, and the cluster
// trains again from the next period. Averaging is bulk-synchronous here.
#include <algorithm>
#include <deque>
#include <set>

#include "algo/algorithm.h"
#include "algo/pipeline_worker.h"
#include "algo/registry.h"
#include "core/error.h"

namespace rv {
namespace {

void check_kind(const Message& m, std::initializer_list<MsgKind> ok, const NodeRole& role) {
  for (auto k : ok)
    if (m.kind == k) return;
  throw unexpected_message(
      "node " + std::to_string(role.node) + " (stage " + std::to_string(role.stage) + ")", m);
}

}  // namespace

void run_ravnest_churn(NodeEnv& env, const RunSpec& spec, int node);

void run_ravnest(NodeEnv& env, const RunSpec& spec, int node) {
  if (env.membership != nullptr) return run_ravnest_churn(env, spec, node);
  run_periodic_pipeline(env, spec, node);
}

namespace {

// One stage of a cluster's periodic pipeline: what every role shares (when to average, to
// checkpoint and to evaluate; the averaging itself, overlapped or not), and one function per
// role.
class PeriodicStage {
 public:
  PeriodicStage(NodeEnv& env, const RunSpec& spec, int node, const NodeRole& role,
                const Algorithm& algorithm)
      : tr_(spec.scenario->training),
        role_(role),
        cap_(admitted_in_flight(algorithm, tr_, role.stages)),
        w_(env, spec, node, tr_, cap_),
        total_(tr_.steps),
        batch_(w_.batch()),
        every_average_(tr_.average_every),
        // Exchanges happen between clusters, and for an outer step (diloco) with one cluster too.
        exchanges_(spec.plan->clusters.size() > 1 || algorithm.hooks.outer_step != nullptr),
        overlapped_(tr_.averaging == Averaging::kOverlapped &&
                    algorithm.traits.overlapped_averaging),
        ck_(env.checkpoints),
        every_checkpoint_(ck_ != nullptr ? ck_->every() : 0) {
    // A resumed node starts from its checkpoint's state, at the instant the checkpoint was
    // complete.
    from_ = ck_ != nullptr ? ck_->resume(node) : nullptr;
    if (from_ != nullptr) w_.restore(*from_);
    start_ = from_ != nullptr ? from_->done : 0;
  }

  void run() {
    if (role_.first())
      run_first();
    else if (!role_.last())
      run_middle();
    else
      run_last();
    w_.stop_next();
  }

 private:
  bool eval_due(int64_t done) const {
    return tr_.eval_every > 0 && done % tr_.eval_every == 0 && done < total_;
  }
  bool average_due(int64_t done) const {
    return exchanges_ && (done % every_average_ == 0 || done == total_);
  }
  // Checkpoints: after the averaging of every `every`-th update (a multiple of average_every),
  // before that round's evaluation; the first stage drains its pipeline there with one cluster
  // too.
  bool checkpoint_due(int64_t done) const {
    return every_checkpoint_ > 0 && done % every_checkpoint_ == 0 && done < total_;
  }
  void checkpoint(int64_t done) { ck_->save(w_.checkpoint_state(done)); }
  // Overlapped: averagings run while training goes on; the last one (after the last update) is
  // bulk-synchronous, so that every cluster ends with the same model.
  void average(int64_t done, const std::function<void(Message)>& defer) {
    if (overlapped_ && done != total_)
      w_.start_overlapped_average(defer);
    else
      w_.average(defer);
  }

  // First stage: injects micro-batches while fewer than the cap are unfinished, backward first.
  // With several clusters, no micro-batch of the next averaging period starts before this one's
  // averaging: the pipeline drains. So it does before a checkpoint.
  void run_first() {
    int64_t injected = start_, completed = start_;
    std::deque<Message> bwd;
    auto may_inject = [&] {
      return (!exchanges_ || overlapped_ ||
              injected < (completed / every_average_ + 1) * every_average_) &&
             (every_checkpoint_ == 0 ||
              injected < (completed / every_checkpoint_ + 1) * every_checkpoint_);
    };
    if (from_ != nullptr && eval_due(start_))
      w_.inject_eval(start_, start_ * batch_);  // the checkpoint's evaluation
    while (completed < total_) {
      if (role_.last()) {  // a one-stage cluster: plain local training
        int64_t st = 0;
        w_.forward(injected, nullptr);
        w_.last_backward(injected, &st);
        w_.update(injected, st);
        ++injected;
        ++completed;
      } else if (!step_first(bwd, injected, completed, may_inject())) {
        continue;
      }
      if (average_due(completed))
        average(completed, [&](Message m) { bwd.push_back(std::move(m)); });
      if (checkpoint_due(completed)) {
        RV_CHECK(bwd.empty() && injected == completed, "a checkpoint with micro-batches in flight");
        checkpoint(completed);
      }
      if (eval_due(completed)) w_.inject_eval(completed, completed * batch_);
    }
    w_.inject_eval(completed, completed * batch_);
  }

  // One step of a first stage of several: a backward (true: a micro-batch completed), or else
  // a forward injected, or else a wait for a message (false).
  bool step_first(std::deque<Message>& bwd, int64_t& injected, int64_t& completed,
                  bool may_inject) {
    while (auto m = w_.try_recv()) bwd.push_back(std::move(*m));
    if (!bwd.empty()) {
      Message m = std::move(bwd.front());
      bwd.pop_front();
      check_kind(m, {MsgKind::kBackward}, role_);
      int64_t st = 0;
      w_.backward(m.id, m, &st);
      w_.update(m.id, st);
      ++completed;
      return true;
    }
    if (injected < total_ && injected - completed < cap_ && may_inject) {
      w_.send(role_.next, w_.forward(injected, nullptr));
      ++injected;
      return false;
    }
    bwd.push_back(w_.recv());
    return false;
  }

  // Middle stage: pops work as it arrives, backward before forward; sends activations on at once;
  // steps its optimizer right after each backward.
  void run_middle() {
    std::deque<Message> fwd, bwd;
    bool stopping = false;
    auto route = [&](Message m) {
      check_kind(m, {MsgKind::kForward, MsgKind::kEvalForward, MsgKind::kBackward, MsgKind::kStop},
                 role_);
      if (m.kind == MsgKind::kBackward)
        bwd.push_back(std::move(m));
      else if (m.kind == MsgKind::kStop)
        stopping = true;
      else
        fwd.push_back(std::move(m));
    };
    while (true) {
      while (auto m = w_.try_recv()) route(std::move(*m));
      if (!bwd.empty()) {
        Message m = std::move(bwd.front());
        bwd.pop_front();
        int64_t st = 0;
        auto g = w_.backward(m.id, m, &st);
        w_.send(role_.prev, std::move(*g));
        w_.update(m.id, st);
        if (average_due(w_.version())) average(w_.version(), route);
        if (checkpoint_due(w_.version())) {
          RV_CHECK(bwd.empty() && fwd.empty() && !stopping,
                   "a checkpoint with micro-batches in flight");
          checkpoint(w_.version());
        }
      } else if (!fwd.empty()) {
        Message m = std::move(fwd.front());
        fwd.pop_front();
        if (m.kind == MsgKind::kForward)
          w_.send(role_.next, w_.forward(m.id, &m));
        else
          w_.eval(m);
      } else if (stopping) {
        break;
      } else {
        route(w_.recv());
      }
    }
  }

  // Last stage: forward, loss and backward at once.
  void run_last() {
    std::deque<Message> later;  // pipeline messages that arrived during an averaging
    while (true) {
      Message m;
      if (!later.empty()) {
        m = std::move(later.front());
        later.pop_front();
      } else {
        m = w_.recv();
      }
      check_kind(m, {MsgKind::kForward, MsgKind::kEvalForward, MsgKind::kStop}, role_);
      if (m.kind == MsgKind::kStop) break;
      if (m.kind == MsgKind::kEvalForward) {
        w_.eval(m);
        continue;
      }
      w_.forward(m.id, &m);
      int64_t st = 0;
      auto g = w_.last_backward(m.id, &st);
      w_.send(role_.prev, std::move(*g));
      w_.update(m.id, st);
      if (average_due(w_.version()))
        average(w_.version(), [&](Message x) { later.push_back(std::move(x)); });
      if (checkpoint_due(w_.version())) {
        RV_CHECK(later.empty(), "a checkpoint with micro-batches in flight");
        checkpoint(w_.version());
      }
    }
  }

  const TrainingSpec& tr_;
  const NodeRole role_;
  const int64_t cap_;
  PipelineWorker w_;
  const int64_t total_, batch_, every_average_;
  const bool exchanges_, overlapped_;
  Checkpoints* const ck_;
  const int64_t every_checkpoint_;
  const NodeState* from_ = nullptr;
  int64_t start_ = 0;
};

}  // namespace

void run_periodic_pipeline(NodeEnv& env, const RunSpec& spec, int node) {
  const NodeRole role = spec.plan->role_of(node);
  if (role.stage < 0) return;  // left idle by the plan
  PeriodicStage(env, spec, node, role, algorithm_of(*spec.scenario)).run();
}

}  // namespace rv

namespace rv {
namespace {

// One node of ravnest under churn (see the top of this file).
class ChurnNode {
 public:
  ChurnNode(NodeEnv& env, const RunSpec& spec, int node)
      : env_(env),
        spec_(spec),
        tr_(spec.scenario->training),
        node_(node),
        E_(std::max<int64_t>(1, tr_.average_every)),
        rounds_((tr_.steps + E_ - 1) / E_) {}

  void run() {
    int64_t round = 0;
    NodeRole role;
    if (!take_stage(&role, &round)) return;
    const int64_t cap = admitted_in_flight(algorithm_of(*spec_.scenario), tr_, role.stages);
    w_ = std::make_unique<PipelineWorker>(env_, spec_, node_, tr_, cap, &role);
    w_->recovering(true);
    w_->refresh();
    const Roster& roster = *w_->roster();
    bool trained_last = false;
    for (; round < rounds_; ++round) {
      w_->refresh();
      w_->set_role(roster.role_of(node_));
      const int cluster = w_->role().cluster;
      const bool up = trains(round);
      w_->set_period(round, !up);
      bool complete = up && train(round);
      if (!complete) give_up(round);
      // The round's membership: a node that finished its period seals it, others wait for it.
      if (complete) env_.membership->seal(round);
      w_->refresh();
      while (roster.sealed_rounds() <= round) route(w_->recv());
      if (roster.in_view(cluster, round)) {
        w_->average_round(round, defer());
      } else {
        w_->sit_out(round);
        complete = false;
        if (roster.rebuilt_after(cluster, round) && round + 1 < rounds_) {
          w_->set_role(roster.role_of(node_));
          // Neighbours that fetch less (a stage without state fetches nothing) may start the
          // next period meanwhile: its messages are kept, not dropped as a cluster down's are.
          w_->set_period(round + 1, false);
          w_->fetch_state(round, defer());
        }
      }
      trained_last = complete;
      const int64_t done = std::min(tr_.steps, (round + 1) * E_);
      if (complete && w_->role().first() && eval_due(done))
        w_->inject_eval(done, done * w_->batch());
    }
    finish(trained_last);
  }

 private:
  bool eval_due(int64_t done) const {
    return tr_.eval_every > 0 && done % tr_.eval_every == 0 && done < tr_.steps;
  }

  // This node's stage and the round it starts in. A node of the plan that never left starts its
  // stage at round 0; a spare, a node that arrives later or one that comes back (the roster has it
  // as a spare: it lost its state) waits until the roster gives it a stage, and starts at the
  // round whose seal counts that. False if the run ends first.
  bool take_stage(NodeRole* role, int64_t* round) {
    Roster roster(*spec_.plan, spec_.scenario->initial_node_count());
    auto takeover = [&] {
      const auto& t = roster.takeovers();
      return std::find_if(t.rbegin(), t.rend(), [&](const Takeover& x) { return x.node == node_; });
    };
    roster.update(*env_.membership);
    *role = roster.role_of(node_);
    if (role->stage >= 0 && takeover() == roster.takeovers().rend()) {
      *round = 0;
      return true;
    }
    for (;;) {
      *role = roster.role_of(node_);
      if (role->stage >= 0) break;
      if (roster.sealed_rounds() >= rounds_) return false;
      (void)env_.transport.recv();  // a notice (nothing else is sent to a spare)
      roster.update(*env_.membership);
    }
    const auto it = takeover();
    RV_CHECK(it != roster.takeovers().rend(), "a spare with a stage but no takeover");
    Event e;
    e.kind = EventKind::kAssign;
    e.node = node_;
    e.cluster = it->cluster;
    e.stage = it->stage;
    e.peer = it->replaced;
    e.start = e.end = env_.clock.now();
    env_.metrics.record(e);
    *round = roster.round_counting(it->event);
    return *round < rounds_;
  }

  std::function<void(Message)> defer() {
    return [this](Message m) { route(std::move(m)); };
  }

  // Files a message for the pipeline; a notice only wakes the node (the roster is up to date).
  void route(Message m) {
    switch (m.kind) {
      case MsgKind::kMember:
      case MsgKind::kState:
        return;  // a late answer to a request asked again of another node
      case MsgKind::kBackward:
        bwd_.push_back(std::move(m));
        return;
      case MsgKind::kForward:
      case MsgKind::kEvalForward:
        fwd_.push_back(std::move(m));
        return;
      case MsgKind::kStop:
        stopping_ = true;
        return;
      default:
        throw unexpected_message(
            "node " + std::to_string(node_) + " (stage " + std::to_string(w_->role().stage) + ")",
            m);
    }
  }

  bool down() const { return w_->roster()->down(w_->role().cluster); }

  // Whether this node's cluster trains period `round`: it is not down, and if the round is
  // sealed already, it is in the round's view. (A cluster that went down and was rebuilt after
  // `round` while this node was busy, averaging, is up again by then, but sits `round` out.)
  bool trains(int64_t round) const {
    const Roster& r = *w_->roster();
    const int c = w_->role().cluster;
    return !r.down(c) && (r.sealed_rounds() <= round || r.in_view(c, round));
  }

  // Trains period `round` (micro-batches [round E, min(steps, (round + 1) E))). False if this
  // node's cluster went down meanwhile.
  bool train(int64_t round) {
    const NodeRole& role = w_->role();
    const int64_t lo = round * E_, hi = std::min(tr_.steps, lo + E_);
    const int64_t cap = admitted_in_flight(algorithm_of(*spec_.scenario), tr_, role.stages);
    if (role.first()) {
      injected_ = completed_ = lo;
      while (completed_ < hi) {
        if (role.last()) {  // a one-stage cluster
          int64_t st = 0;
          w_->forward(injected_, nullptr);
          w_->last_backward(injected_, &st);
          w_->update(injected_, st);
          ++injected_;
          ++completed_;
          while (auto m = w_->try_recv()) route(std::move(*m));
          if (!trains(round)) return false;
        } else {
          while (auto m = w_->try_recv()) route(std::move(*m));
          if (!trains(round)) return false;
          if (!bwd_.empty()) {
            Message m = std::move(bwd_.front());
            bwd_.pop_front();
            int64_t st = 0;
            w_->backward(m.id, m, &st);
            w_->update(m.id, st);
            ++completed_;
          } else if (injected_ < hi && injected_ - completed_ < cap) {
            w_->send(role.next, w_->forward(injected_, nullptr));
            ++injected_;
            continue;
          } else {
            route(w_->recv());
            continue;
          }
        }
        if (completed_ < hi && eval_due(completed_))
          w_->inject_eval(completed_, completed_ * w_->batch());
      }
      return true;
    }
    for (;;) {
      while (auto m = w_->try_recv()) route(std::move(*m));
      if (!trains(round)) return false;
      if (!role.last() && !bwd_.empty()) {
        Message m = std::move(bwd_.front());
        bwd_.pop_front();
        int64_t st = 0;
        auto g = w_->backward(m.id, m, &st);
        w_->send(role.prev, std::move(*g));
        w_->update(m.id, st);
        if (m.id == hi - 1) return true;
      } else if (!fwd_.empty()) {
        Message m = std::move(fwd_.front());
        fwd_.pop_front();
        if (m.kind == MsgKind::kEvalForward) {
          w_->eval(m);
        } else if (!role.last()) {
          w_->send(role.next, w_->forward(m.id, &m));
        } else {
          w_->forward(m.id, &m);
          int64_t st = 0;
          auto g = w_->last_backward(m.id, &st);
          w_->send(role.prev, std::move(*g));
          w_->update(m.id, st);
          if (m.id == hi - 1) return true;
        }
      } else {
        route(w_->recv());
      }
    }
  }

  // The cluster went down during `round`: what was in flight is dropped, and messages of the
  // period are ignored from now on. Each node records the micro-batches it held (forwarded, not
  // yet backward; waiting in its queues; on a first stage, injected and not completed), so that a
  // micro-batch is counted whichever of its nodes survived (the summary counts each id once).
  void give_up(int64_t round) {
    const NodeRole& role = w_->role();
    std::set<int64_t> ids = w_->abort_inflight();
    if (role.first())
      for (int64_t mb = completed_; mb < injected_; ++mb) ids.insert(mb);
    // Queued messages of this period or earlier go; those of later periods (a rebuilt neighbour
    // that started first) stay.
    auto stale = [&](const Message& m) {
      return !(m.kind == MsgKind::kForward || m.kind == MsgKind::kBackward) || m.id / E_ <= round;
    };
    for (auto* q : {&fwd_, &bwd_}) {
      for (const Message& m : *q)
        if (stale(m) && (m.kind == MsgKind::kForward || m.kind == MsgKind::kBackward))
          ids.insert(m.id);
      q->erase(std::remove_if(q->begin(), q->end(), stale), q->end());
    }
    for (int64_t mb : ids) {
      Event e;
      e.kind = EventKind::kDrop;
      e.node = node_;
      e.cluster = role.cluster;
      e.stage = role.stage;
      e.step = w_->version();
      e.micro_batch = mb;
      e.samples = w_->batch();
      e.start = e.end = env_.clock.now();
      env_.metrics.record(e);
    }
    injected_ = completed_ = (round + 1) * E_;
    w_->set_period(round, true);
  }

  // After the last round: a cluster that trained it evaluates and stops its pipeline.
  void finish(bool trained_last) {
    const NodeRole& role = w_->role();
    if (!trained_last || down()) return;
    if (role.first()) {
      w_->inject_eval(tr_.steps, tr_.steps * w_->batch());
      w_->stop_next();
      return;
    }
    for (;;) {
      if (!fwd_.empty()) {
        Message m = std::move(fwd_.front());
        fwd_.pop_front();
        if (m.kind == MsgKind::kEvalForward) w_->eval(m);
        continue;
      }
      if (stopping_) break;
      route(w_->recv());
      if (down()) return;
    }
    w_->stop_next();
  }

  NodeEnv& env_;
  const RunSpec& spec_;
  const TrainingSpec& tr_;
  const int node_;
  const int64_t E_, rounds_;
  std::unique_ptr<PipelineWorker> w_;
  std::deque<Message> fwd_, bwd_;
  bool stopping_ = false;
  int64_t injected_ = 0, completed_ = 0;
};

}  // namespace

void run_ravnest_churn(NodeEnv& env, const RunSpec& spec, int node) {
  ChurnNode(env, spec, node).run();
}

Algorithm ravnest_algorithm() {
  return {
      .name = "ravnest",
      .summary =
          "zero-bubble asynchronous pipelines, clusters averaged by parallel multi-ring "
          "all-reduce",
      .run = &run_ravnest,
      .traits = {.overlapped_averaging = true, .recovers_from_churn = true, .checkpoints = true}};
}

}  // namespace rv
