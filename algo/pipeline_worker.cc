#include "algo/pipeline_worker.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <iomanip>
#include <set>
#include <sstream>

#include "algo/registry.h"
#include "core/data/partition.h"
#include "core/error.h"

namespace rv {

PipelineWorker::PipelineWorker(NodeEnv& env, const RunSpec& spec, int node,
                               const TrainingSpec& training, int64_t in_flight,
                               const NodeRole* role)
    : env_(env),
      spec_(spec),
      role_(role != nullptr ? *role : spec.plan->role_of(node)),
      training_(training),
      batch_(spec.scenario->data.batch_size),
      in_flight_cap_(in_flight),
      averager_(make_averager(env, *spec.plan, *spec.model, node, allreduce_of(*spec.scenario),
                              ring_piece_bytes(spec.scenario->training))),
      average_rows_(averaged_rows(algorithm_of(*spec.scenario), training)) {
  RV_CHECK(role_.stage >= 0, "node " + std::to_string(node) + " has no stage in the plan");
  if (env.membership != nullptr)
    roster_ = std::make_unique<Roster>(*spec.plan, spec.scenario->initial_node_count());
  cost_ = stage_cost(*spec.model, role_.layer_begin, role_.layer_end, training_, batch_, 1);
  work_ = stage_work(*spec.model, role_.layer_begin, role_.layer_end, training_, batch_);
  if (numeric()) {
    RV_CHECK(spec.data != nullptr, "numeric mode needs a dataset");
    stage_ = std::make_unique<Stage>(*spec.model, role_.layer_begin, role_.layer_end, training_,
                                     spec.scenario->seed, env.compute.device());
    // Clusters train on disjoint parts of the training set (data.partition: by default a
    // permutation of the seed cut in C parts); each draws its own order from (seed, cluster).
    const int clusters = static_cast<int>(spec.plan->clusters.size());
    const uint64_t seed = spec.scenario->seed + 7919ULL * static_cast<uint64_t>(role_.cluster);
    if (clusters > 1)
      sampler_ = std::make_unique<Sampler>(partition_rows(*spec.data, spec.scenario->data, clusters,
                                                          role_.cluster, spec.scenario->seed),
                                           batch_, seed);
    else
      sampler_ = std::make_unique<Sampler>(spec.data->train_size(), batch_, seed);
  }
  // An outer step: the exchanges carry the parameters alone, and the outer step follows.
  const auto outer_step = algorithm_of(*spec.scenario).hooks.outer_step;
  outer_step_ = outer_step != nullptr;
  average_optimizer_ = average_rows_ > 1;
  if (outer_step_) {
    if (numeric()) {
      const OuterSgd sgd = outer_step(training);
      outer_ = std::make_unique<OuterOptimizer>(sgd.lr, sgd.momentum);
      outer_->set_anchor(stage_->averaged_state(false).reshape({-1}));
      outer_mask_ = stage_->parameter_mask();
    }
  }
}

InputError unexpected_message(const std::string& receiver, const Message& m) {
  return InputError(receiver + " got an unexpected '" + to_string(m.kind) + "' message from node " +
                    std::to_string(m.src));
}

Event PipelineWorker::event(EventKind kind) const {
  Event e;
  e.kind = kind;
  e.node = role_.node;
  e.cluster = role_.cluster;
  e.stage = role_.stage;
  e.step = version_;
  e.start = e.end = env_.clock.now();
  return e;
}

void PipelineWorker::finish(Event& e) const { e.end = env_.clock.now(); }

void PipelineWorker::compute(Event& e, const Work& work, const std::function<void()>& maths) {
  e.device = env_.compute.run(work, saved_activations_of(e), [&] {
    const Seconds cpu = env_.clock.thread_cpu_now();
    maths();
    e.cpu = env_.clock.thread_cpu_now() - cpu;
  });
}

Message PipelineWorker::forward(int64_t mb, const Message* in) {
  Message out;
  out.kind = MsgKind::kForward;
  out.id = mb;
  out.step = version_;
  out.bytes = kHeaderBytes + cost_.activation_out;
  Event e = event(EventKind::kForward);
  e.micro_batch = mb;
  compute(e, work_.forward, [&] {
    at::Tensor x =
        role_.first() ? spec_.data->inputs(sampler_->indices(mb), false) : in->payload.at(0);
    at::Tensor y = stage_->forward(mb, x);
    if (role_.last())
      logits_[mb] = y;
    else
      out.payload.push_back(y.contiguous());
  });
  if (!numeric()) forward_version_[mb] = version_;
  finish(e);
  env_.metrics.record(e);
  record_memory();
  return out;
}

Message PipelineWorker::backward_message(int64_t mb) const {
  Message out;
  out.kind = MsgKind::kBackward;
  out.id = mb;
  out.step = version_;
  out.bytes = kHeaderBytes + cost_.gradient_in;
  return out;
}

int64_t PipelineWorker::finish_backward(Event& e, int64_t mb, int64_t forward_version) {
  if (!numeric()) {  // timing mode: the version is kept here instead of in the Stage
    auto it = forward_version_.find(mb);
    RV_CHECK(it != forward_version_.end(),
             "backward of micro-batch " + std::to_string(mb) + " without its forward");
    forward_version = it->second;
    forward_version_.erase(it);
  }
  finish(e);
  env_.metrics.record(e);
  return version_ - forward_version;
}

std::optional<Message> PipelineWorker::backward(int64_t mb, const Message& grad,
                                                int64_t* staleness) {
  Message out = backward_message(mb);
  Event e = event(EventKind::kBackward);
  e.micro_batch = mb;
  int64_t fv = version_;
  compute(e, work_.backward, [&] {
    at::Tensor g = stage_->backward(mb, grad.payload.at(0), &fv);
    if (g.defined()) out.payload.push_back(g.contiguous());
  });
  *staleness = finish_backward(e, mb, fv);
  if (role_.first()) return std::nullopt;
  return out;
}

std::optional<Message> PipelineWorker::last_backward(int64_t mb, int64_t* staleness) {
  Message out = backward_message(mb);
  Event e = event(EventKind::kBackward);
  e.micro_batch = mb;
  double loss = kNaN;
  int64_t fv = version_;
  compute(e, work_.backward, [&] {
    auto it = logits_.find(mb);
    RV_CHECK(it != logits_.end(), "last backward without forward");
    LossResult r = spec_.data->task().loss_and_grad(
        it->second, spec_.data->targets(sampler_->indices(mb), false));
    logits_.erase(it);
    loss = r.loss;
    at::Tensor g = stage_->backward(mb, r.grad_input, &fv);
    if (g.defined()) out.payload.push_back(g.contiguous());
  });
  *staleness = finish_backward(e, mb, fv);
  ++trained_;
  if (numeric()) {
    Event l = event(EventKind::kLoss);
    l.micro_batch = mb;
    l.loss = loss;
    l.samples = trained_ * batch_;
    env_.metrics.record(l);
  }
  if (role_.first()) return std::nullopt;
  return out;
}

void PipelineWorker::update(int64_t mb, int64_t staleness) {
  Event e = event(EventKind::kUpdate);
  e.micro_batch = mb;
  e.staleness = staleness;
  compute(e, work_.update, [&] { stage_->update(); });
  ++version_;
  e.step = version_;
  finish(e);
  // After the span: the theory's estimate for a model with unknown constants (theory/estimate.h)
  // reads it; not charged to the device.
  if (numeric()) e.grad_norm2 = stage_->take_applied_norm2();
  env_.metrics.record(e);
  // A problem's block model: the parameters after every update, for the exact gradient norm after
  // the run (theory/measure.h); recorded, not computed, so no modeled time is charged.
  if (numeric() && spec_.model->record_params) {
    Event p = event(EventKind::kParams);
    p.step = version_;
    const at::Tensor flat = stage_->flat_state().contiguous();
    p.values.assign(flat.data_ptr<float>(), flat.data_ptr<float>() + flat.numel());
    env_.metrics.record(p);
  }
}

int64_t PipelineWorker::eval_batches() const {
  const int64_t n = spec_.scenario->training.eval_samples > 0
                        ? std::min(spec_.scenario->training.eval_samples, spec_.data->test_size())
                        : spec_.data->test_size();
  return (n + batch_ - 1) / batch_;
}

void PipelineWorker::inject_eval(int64_t step, int64_t samples) {
  if (!numeric()) return;  // no maths, nothing to score
  const int64_t batches = eval_batches();
  const int64_t n = std::min(spec_.data->test_size(), batches * batch_);
  for (int64_t j = 0; j < batches; ++j) {
    Message m;
    m.kind = MsgKind::kEvalForward;
    m.id = j;
    m.step = step;
    m.aux = batches;
    m.scalar = static_cast<double>(samples);
    std::vector<int64_t> rows;
    for (int64_t r = j * batch_; r < std::min(n, (j + 1) * batch_); ++r) rows.push_back(r);
    m.payload.push_back(spec_.data->inputs(rows, true));
    m.bytes = kHeaderBytes + cost_.activation_out;
    eval(m);
  }
}

void PipelineWorker::eval(const Message& in) {
  Event e = event(EventKind::kForward);
  e.micro_batch = -1 - in.id;  // evaluation batches are negative
  Message out = in;
  out.payload.clear();
  const Work eval_work =
      spec_.model->forward_work(role_.layer_begin, role_.layer_end, in.payload.at(0).size(0));
  double loss_sum = 0, correct = 0;
  int64_t count = 0;
  compute(e, eval_work, [&] {
    at::Tensor y = stage_->eval_forward(in.payload.at(0));
    if (role_.last()) {
      const int64_t start = in.id * batch_;
      std::vector<int64_t> rows;
      for (int64_t r = start; r < start + y.size(0); ++r) rows.push_back(r);
      const Score sc = spec_.data->task().score(y, spec_.data->targets(rows, true));
      loss_sum = sc.loss_sum;
      correct = sc.correct;
      count = y.size(0);
    } else {
      out.payload.push_back(y.contiguous());
    }
  });
  finish(e);
  env_.metrics.record(e);
  if (!role_.last()) {
    send(role_.next, std::move(out));
    return;
  }
  if (eval_step_ != in.step) {
    eval_step_ = in.step;
    eval_seen_ = eval_count_ = 0;
    eval_correct_ = 0;
    eval_loss_ = 0;
  }
  eval_loss_ += loss_sum;
  eval_correct_ += correct;
  eval_count_ += count;
  if (++eval_seen_ == in.aux) {
    Event r = event(EventKind::kEval);
    r.step = in.step;
    r.loss = eval_loss_ / static_cast<double>(eval_count_);
    if (spec_.data->task().has_accuracy())
      r.accuracy = eval_correct_ / static_cast<double>(eval_count_);
    r.samples = static_cast<int64_t>(in.scalar);
    env_.metrics.record(r);
  }
}

void PipelineWorker::send(int dst, Message m) {
  Event e = event(EventKind::kSend);
  e.bytes = m.bytes;
  e.peer = dst;
  e.micro_batch = m.id;
  env_.metrics.record(e);
  env_.transport.send(dst, std::move(m));
}

std::optional<Message> PipelineWorker::note_recv(std::optional<Message> m) {
  if (m && m->kind != MsgKind::kMember) {
    Event e = event(EventKind::kRecv);
    e.bytes = m->bytes;
    e.peer = m->src;
    e.micro_batch = m->id;
    env_.metrics.record(e);
  }
  return m;
}

std::optional<Message> PipelineWorker::try_recv() {
  poll_average();
  while (auto m = env_.transport.try_recv()) {
    if (averager_->hold(*m)) {
      poll_average();
      continue;
    }
    if (!intercept(*m)) return note_recv(std::move(m));
  }
  return std::nullopt;
}

void PipelineWorker::poll_average() {
  if (averager_->active() && averager_->progress()) apply_overlapped();
}

void PipelineWorker::apply_overlapped() {
  if (numeric()) {
    at::Tensor merged =
        stage_->averaged_state(average_optimizer_) + (averager_->result() - snapshot_);
    // Adam's second moment may not go negative, whatever it learned meanwhile.
    if (average_optimizer_ && adaptive_optimizer(training_)) merged[2].clamp_min_(0);
    stage_->set_averaged_state(merged);
  }
  snapshot_ = at::Tensor();
  averager_->clear();
}

std::function<Message()> PipelineWorker::raw_recv() {
  return [this] {
    for (;;) {
      Message m = env_.transport.recv();
      if (!intercept(m)) return m;
    }
  };
}

std::function<void(Message)> PipelineWorker::other(const std::function<void(Message)>& defer) {
  return [this, &defer](Message m) { defer(std::move(*note_recv(std::move(m)))); };
}

void PipelineWorker::start_overlapped_average(const std::function<void(Message)>& defer) {
  finish_overlapped_average(defer);
  const int64_t round = averagings_++;
  if (!averager_->participates()) return;
  snapshot_ = numeric() ? stage_->averaged_state(average_optimizer_) : at::Tensor();
  averager_->start(snapshot_, average_rows_, round);
  poll_average();  // messages for it may be here already
}

void PipelineWorker::finish_overlapped_average(const std::function<void(Message)>& defer) {
  if (!averager_->active()) return;
  averager_->wait(raw_recv(), other(defer));
  apply_overlapped();
}

Message PipelineWorker::recv() {
  if (auto m = try_recv()) return std::move(*m);
  Event w = event(EventKind::kWait);
  for (;;) {
    Message m = env_.transport.recv();
    if (averager_->hold(m)) {
      poll_average();
      continue;
    }
    if (intercept(m)) continue;
    poll_average();
    w.end = env_.clock.now();
    env_.metrics.record(w);
    return std::move(*note_recv(std::move(m)));
  }
}

void PipelineWorker::stop_next() {
  if (role_.next >= 0) {
    Message m;
    m.kind = MsgKind::kStop;
    m.bytes = kHeaderBytes;
    send(role_.next, std::move(m));
  }
  env_.transport.flush();
}

void PipelineWorker::average(const std::function<void(Message)>& defer) {
  finish_overlapped_average(defer);
  const int64_t round = averagings_++;
  if (outer_step_) return outer_average(round, defer);
  if (!averager_->participates()) return;
  at::Tensor state = numeric() ? stage_->averaged_state(average_optimizer_) : at::Tensor();
  at::Tensor mean =
      averager_->average(std::move(state), average_rows_, round, raw_recv(), other(defer));
  if (numeric()) stage_->set_averaged_state(mean);
}

void PipelineWorker::outer_average(int64_t round, const std::function<void(Message)>& defer) {
  const bool joins = averager_->participates();
  if (!numeric()) {
    if (joins) averager_->average(at::Tensor(), 1, round, raw_recv(), other(defer));
    return;
  }
  at::Tensor state = stage_->averaged_state(false);
  const at::Tensor mean =
      joins ? averager_->average(std::move(state), 1, round, raw_recv(), other(defer)) : state;
  stage_->set_averaged_state(outer_->step(mean.reshape({-1}), outer_mask_).unsqueeze(0));
}

void PipelineWorker::reduce_gradients(const std::function<at::Tensor(const at::Tensor&)>& reduce) {
  if (numeric())
    stage_->exchange_gradients(reduce);
  else
    reduce(at::Tensor());
}

void PipelineWorker::exchange_gradients(const std::function<void(Message)>& defer) {
  const int64_t round = averagings_++;
  if (!averager_->participates()) return;
  if (numeric()) {
    stage_->exchange_gradients([&](const at::Tensor& flat) {
      return averager_->average(flat, 1, round, raw_recv(), other(defer));
    });
  } else {
    averager_->average(at::Tensor(), 1, round, raw_recv(), other(defer));
  }
}

// ---- Churn ----

bool PipelineWorker::pipeline_kind(MsgKind k) const {
  return k == MsgKind::kForward || k == MsgKind::kBackward || k == MsgKind::kEvalForward ||
         k == MsgKind::kStop;
}

bool PipelineWorker::intercept(Message& m) {
  if (!roster_) return false;  // without churn every message is the algorithm's
  if (m.kind == MsgKind::kMember) {
    if (m.src < 0) on_member();  // a peer's is the algorithm's to refuse
    return false;
  }
  if (m.kind == MsgKind::kStateRequest) {
    if (m.id <= round_done_)
      serve(m);
    else
      requests_.push_back(std::move(m));
    return true;
  }
  if (!pipeline_kind(m.kind)) return false;
  // Only this stage's neighbours now send it pipeline messages: anything else was meant for a
  // pipeline that has since changed (a node that left, or this node's earlier life). The role this
  // node was given may predate the neighbour, though: a replacement that heard of a seal first may
  // send before this node's notice of it arrives (the real membership is polled). So a sender
  // that is not the neighbour is checked again against the membership as it stands now.
  auto from = [&](const NodeRole& r) { return m.kind == MsgKind::kBackward ? r.next : r.prev; };
  if (m.src != from(role_)) {
    on_member();
    if (m.src != from(roster_->role_of(role_.node))) return true;
  }
  // A micro-batch of a period this node has left behind, or of the period its cluster gave up
  // (down), is stale. One of a later period is kept: a neighbour that had less state to fetch
  // may start the period after a rebuild first.
  if (m.kind == MsgKind::kForward || m.kind == MsgKind::kBackward) {
    const int64_t period = m.id / std::max<int64_t>(1, training_.average_every);
    return period < period_ || (down_ && period <= period_);
  }
  return down_;
}

void PipelineWorker::on_member() {
  roster_->update(*env_.membership);
  const auto& events = roster_->events();
  for (; events_seen_ < events.size(); ++events_seen_) {
    const MemberEvent& e = events[events_seen_];
    if (e.join) continue;
    if (!recovers_ && spec_.plan->role_of(e.node).stage >= 0) {
      std::ostringstream os;
      os << training_.algorithm << " cannot go on without node " << e.node << ", which left at "
         << std::fixed << std::setprecision(3) << e.at
         << " s: only ravnest recovers from churn (its clusters average, so "
         << "another cluster holds the lost layers)";
      throw Error(os.str());
    }
    // A ring member of the averaging in progress that left since its round was sealed.
    if (averager_->active() && averaging_round_ >= 0 &&
        roster_->left_since(e.node, averaging_round_))
      averager_->drop(e.node);
  }
  if (recovers_ && !roster_->any_up())
    throw Error("every cluster has lost a node (the last at " + std::to_string(events.back().at) +
                " s): no cluster is left to hold the model's latest state");
}

void PipelineWorker::set_period(int64_t period, bool down) {
  period_ = period;
  down_ = down;
}

std::set<int64_t> PipelineWorker::abort_inflight() {
  std::set<int64_t> ids;
  if (numeric()) {
    for (int64_t mb : stage_->pending_ids()) ids.insert(mb);
    stage_->drop_pending();
  }
  for (const auto& [mb, v] : forward_version_) ids.insert(mb);
  for (const auto& [mb, t] : logits_) ids.insert(mb);
  logits_.clear();
  forward_version_.clear();
  return ids;
}

void PipelineWorker::serve(const Message& request) {
  const int64_t base = spec_.model->state_offset(role_.layer_begin);
  const int64_t end = spec_.model->state_offset(role_.layer_end);
  const int64_t lo = request.aux, hi = request.step;
  // A request may have been meant for this node's earlier life (it left, came back and holds
  // another stage now): one outside its stage is ignored.
  if (lo < base || hi > end || lo >= hi) return;
  const int64_t rows = 1 + Optimizer::slots(training_);
  Message out;
  out.kind = MsgKind::kState;
  out.id = request.id;
  out.aux = lo;
  out.step = hi;
  if (numeric())
    out.payload.push_back(stage_->averaged_state(true).narrow(1, lo - base, hi - lo).contiguous());
  out.bytes = kHeaderBytes + kFloatBytes * rows * (hi - lo);
  send(request.src, std::move(out));
}

void PipelineWorker::serve_pending() {
  for (auto it = requests_.begin(); it != requests_.end();) {
    if (it->id > round_done_) {
      ++it;
      continue;
    }
    serve(*it);
    it = requests_.erase(it);
  }
}

void PipelineWorker::average_round(int64_t round, const std::function<void(Message)>& defer) {
  averagings_ = round + 1;
  averaging_round_ = round;
  averager_->reconfigure(role_, roster_->assignment_at(round), roster_->view(round));
  if (averager_->participates()) {
    at::Tensor state = numeric() ? stage_->averaged_state(average_optimizer_) : at::Tensor();
    averager_->start(std::move(state), average_rows_, round);
    // Nodes of the round's view that are known to have left by now: their rings are given up.
    for (int c : roster_->view(round))
      for (int n : roster_->assignment_at(round)[static_cast<size_t>(c)])
        if (roster_->left_since(n, round)) averager_->drop(n);
    averager_->wait(raw_recv(), other(defer));
    if (numeric()) stage_->set_averaged_state(averager_->result());
    averager_->clear();
  }
  round_done_ = round;
  serve_pending();
}

void PipelineWorker::sit_out(int64_t round) {
  averagings_ = round + 1;
  Event e = event(EventKind::kOut);
  e.step = round;
  env_.metrics.record(e);
}

// One fetch of a stage's state after averaging `round`: the ranges of the flat state still
// missing, the pieces asked of each donor node, the clusters tried; the state as it arrives.
class PipelineWorker::StateFetch {
 public:
  StateFetch(PipelineWorker& w, int64_t round)
      : w_(w),
        model_(*w.spec_.model),
        round_(round),
        base_(model_.state_offset(w.role_.layer_begin)),
        end_(model_.state_offset(w.role_.layer_end)),
        rows_(1 + Optimizer::slots(w.training_)),
        at_(w.roster_->assignment_at(round)),  // a copy: on_member() extends the roster
        missing_{{base_, end_}} {
    span_ = w.event(EventKind::kTransfer);
    span_.step = round;
    if (w.numeric() && end_ > base_) state_ = at::zeros({rows_, end_ - base_}, at::kFloat);
  }

  bool empty() const { return end_ <= base_; }
  bool done() const { return missing_.empty() && asked_.empty(); }
  bool must_ask() const { return asked_.empty(); }

  // Asks the next cluster of the view for what is missing: from the one after this node's on
  // (so that clusters rebuilt after the same round ask different donors), the first whose nodes
  // for the missing pieces are all still there.
  void ask_next_donor() {
    const int clusters = static_cast<int>(w_.spec_.plan->clusters.size());
    const int own = w_.role_.cluster;
    std::vector<int> order = w_.roster_->view(round_);
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
      return (a - own + clusters) % clusters < (b - own + clusters) % clusters;
    });
    std::vector<Piece> pieces;
    int donor = -1;
    for (int c : order) {
      if (tried_.count(c) || c == own) continue;
      pieces = pieces_of(c);
      if (std::none_of(pieces.begin(), pieces.end(),
                       [&](const Piece& p) { return w_.roster_->left_since(p.node, round_); })) {
        donor = c;
        break;
      }
    }
    if (donor < 0)
      throw Error("cluster " + std::to_string(own) + " cannot be rebuilt after averaging " +
                  std::to_string(round_) +
                  ": no cluster of that averaging still has every node holding the layers of " +
                  "node " + std::to_string(w_.role_.node) + "'s stage");
    tried_.insert(donor);
    for (const Piece& p : pieces) {
      Message q;
      q.kind = MsgKind::kStateRequest;
      q.id = round_;
      q.aux = p.lo;
      q.step = p.hi;
      q.bytes = kHeaderBytes;
      w_.send(p.node, std::move(q));
      asked_[p.node].emplace_back(p.lo, p.hi);
    }
    missing_.clear();
  }

  // A piece of state this fetch asked for: kept; false for any other message.
  bool take_state(Message& m) {
    if (m.kind != MsgKind::kState || m.id != round_ || !asked_.count(m.src)) return false;
    auto& pieces = asked_[m.src];
    auto it = std::find(pieces.begin(), pieces.end(), std::make_pair(m.aux, m.step));
    if (it == pieces.end())
      throw InputError("node " + std::to_string(m.src) + " sent state it was not asked for");
    w_.note_recv(m);
    if (w_.numeric()) {
      RV_CHECK(m.payload.size() == 1 && m.payload[0].dim() == 2 && m.payload[0].size(0) == rows_ &&
                   m.payload[0].size(1) == m.step - m.aux,
               "a state of the wrong size from node " + std::to_string(m.src));
      state_.narrow(1, m.aux - base_, m.step - m.aux).copy_(m.payload[0]);
    }
    span_.bytes += m.bytes;
    pieces.erase(it);
    if (pieces.empty()) asked_.erase(m.src);
    return true;
  }

  // Pieces asked of a node that has left are asked of the next cluster.
  void ask_again_what_left() {
    for (auto it = asked_.begin(); it != asked_.end();) {
      if (!w_.roster_->left_since(it->first, round_)) {
        ++it;
        continue;
      }
      missing_.insert(missing_.end(), it->second.begin(), it->second.end());
      it = asked_.erase(it);
    }
  }

  void finish() {
    if (w_.numeric()) w_.stage_->set_averaged_state(state_);
    w_.finish(span_);
    w_.env_.metrics.record(span_);
  }

 private:
  struct Piece {
    int node;
    int64_t lo, hi;
  };

  // What cluster `c` would be asked: the missing state cut at its stages, each by its node.
  std::vector<Piece> pieces_of(int c) const {
    std::vector<Piece> out;
    for (size_t st = 0; st < at_[static_cast<size_t>(c)].size(); ++st) {
      const StagePlan& sp = w_.spec_.plan->clusters[static_cast<size_t>(c)].stages[st];
      const int64_t a = model_.state_offset(sp.layer_begin), b = model_.state_offset(sp.layer_end);
      for (const auto& [lo, hi] : missing_)
        if (std::max(a, lo) < std::min(b, hi))
          out.push_back({at_[static_cast<size_t>(c)][st], std::max(a, lo), std::min(b, hi)});
    }
    return out;
  }

  PipelineWorker& w_;
  const ModelDesc& model_;
  const int64_t round_, base_, end_, rows_;
  const Assignment at_;
  Event span_;
  at::Tensor state_;
  std::vector<std::pair<int64_t, int64_t>> missing_;
  std::map<int, std::vector<std::pair<int64_t, int64_t>>> asked_;  // node -> pieces asked of it
  std::set<int> tried_;
};

void PipelineWorker::fetch_state(int64_t round, const std::function<void(Message)>& defer) {
  StateFetch fetch(*this, round);
  if (fetch.empty()) return;
  while (!fetch.done()) {
    if (fetch.must_ask()) fetch.ask_next_donor();
    Message m = env_.transport.recv();
    if (averager_->hold(m)) continue;
    if (fetch.take_state(m)) continue;
    if (m.kind == MsgKind::kMember && m.src < 0) {
      on_member();
      fetch.ask_again_what_left();
      defer(std::move(m));
      continue;
    }
    if (intercept(m)) continue;
    defer(std::move(*note_recv(std::move(m))));
  }
  fetch.finish();
}

NodeState PipelineWorker::checkpoint_state(int64_t done) const {
  RV_CHECK(forward_version_.empty() && logits_.empty() && (!stage_ || stage_->pending() == 0) &&
               !averager_->active(),
           "node " + std::to_string(role_.node) +
               ": a checkpoint with micro-batches or an averaging in flight");
  NodeState s;
  s.node = role_.node;
  s.cluster = role_.cluster;
  s.stage = role_.stage;
  s.done = done;
  s.time = env_.clock.now();
  s.version = version_;
  s.trained = trained_;
  s.averagings = averagings_;
  s.peak_memory = peak_memory_;
  if (stage_) {
    s.stage_version = stage_->version();
    s.optimizer_steps = stage_->optimizer_steps();
    s.state = stage_->averaged_state(true);
  }
  return s;
}

void PipelineWorker::restore(const NodeState& s) {
  const std::string who = "checkpoint of node " + std::to_string(s.node);
  if (s.node != role_.node || s.cluster != role_.cluster || s.stage != role_.stage)
    throw InputError(who + ": it held stage " + std::to_string(s.stage) + " of cluster " +
                     std::to_string(s.cluster) + ", the plan gives node " +
                     std::to_string(role_.node) + " stage " + std::to_string(role_.stage) +
                     " of cluster " + std::to_string(role_.cluster));
  if (numeric() != s.state.defined())
    throw InputError(who + ": " +
                     (numeric() ? "a timing-mode checkpoint cannot resume a numeric run"
                                : "a numeric checkpoint cannot resume a timing-mode run"));
  if (stage_) {
    const int64_t rows = 1 + Optimizer::slots(training_);
    const int64_t n =
        spec_.model->state_offset(role_.layer_end) - spec_.model->state_offset(role_.layer_begin);
    if (s.state.dim() != 2 || s.state.size(0) != rows || s.state.size(1) != n)
      throw InputError(who + ": its state does not fit the stage (" + std::to_string(rows) + " x " +
                       std::to_string(n) + " expected)");
    stage_->restore(s.state, s.stage_version, s.optimizer_steps);
  }
  version_ = s.version;
  trained_ = s.trained;
  averagings_ = s.averagings;
  peak_memory_ = s.peak_memory;
}

void PipelineWorker::record_memory() {
  const int64_t pending =
      numeric() ? stage_->pending() : static_cast<int64_t>(forward_version_.size());
  const Bytes now = stage_cost(*spec_.model, role_.layer_begin, role_.layer_end, training_, batch_,
                               std::max<int64_t>(pending, 1))
                        .memory;
  if (now > peak_memory_) {
    peak_memory_ = now;
    Event e = event(EventKind::kMemory);
    e.bytes = now;
    env_.metrics.record(e);
  }
}

}  // namespace rv
