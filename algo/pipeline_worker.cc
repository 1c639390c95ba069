#include "algo/pipeline_worker.h"

#include <algorithm>

#include <ATen/ATen.h>

#include "algo/registry.h"
#include "core/error.h"

namespace rv {

PipelineWorker::PipelineWorker(NodeEnv& env, const RunSpec& spec, int node,
                               const TrainingSpec& training, int64_t in_flight)
    : env_(env), spec_(spec), role_(spec.plan->role_of(node)), training_(training),
      batch_(spec.scenario->data.batch_size), in_flight_cap_(in_flight),
      averager_(make_averager(env, *spec.plan, *spec.model, node, allreduce_of(*spec.scenario))),
      average_optimizer_(training.average_optimizer_state),
      average_rows_(1 + (training.average_optimizer_state ? Optimizer::slots(training) : 0)) {
  RV_CHECK(role_.stage >= 0, "node " + std::to_string(node) + " has no stage in the plan");
  cost_ = stage_cost(*spec.model, role_.layer_begin, role_.layer_end, training_, batch_, 1);
  work_ = stage_work(*spec.model, role_.layer_begin, role_.layer_end, training_, batch_);
  if (numeric()) {
    RV_CHECK(spec.data != nullptr, "numeric mode needs a dataset");
    stage_ = std::make_unique<Stage>(*spec.model, role_.layer_begin, role_.layer_end, training_,
                                     spec.scenario->seed);
    // Clusters train on disjoint shards of the training set (a permutation of the seed cut in C
    // parts); each draws its own order from (seed, cluster).
    const int clusters = static_cast<int>(spec.plan->clusters.size());
    const uint64_t seed = spec.scenario->seed + 7919ULL * static_cast<uint64_t>(role_.cluster);
    if (clusters > 1)
      sampler_ = std::make_unique<Sampler>(shard(spec.data->train_size(), clusters, role_.cluster, spec.scenario->seed),
                                           batch_, seed);
    else
      sampler_ = std::make_unique<Sampler>(spec.data->train_size(), batch_, seed);
  }
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
  env_.compute.run(work, [&] {
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
    at::Tensor x = role_.first() ? spec_.data->inputs(sampler_->indices(mb), false) : in->payload.at(0);
    at::Tensor y = stage_->forward(mb, x);
    if (role_.last()) logits_[mb] = y;
    else out.payload.push_back(y.contiguous());
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
    RV_CHECK(it != forward_version_.end(), "backward of micro-batch " + std::to_string(mb) + " without its forward");
    forward_version = it->second;
    forward_version_.erase(it);
  }
  finish(e);
  env_.metrics.record(e);
  return version_ - forward_version;
}

std::optional<Message> PipelineWorker::backward(int64_t mb, const Message& grad, int64_t* staleness) {
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
    LossResult r = spec_.data->task().loss_and_grad(it->second, spec_.data->targets(sampler_->indices(mb), false));
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
    const at::Tensor flat = stage_->module().flat_state().contiguous();
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
  double loss_sum = 0;
  int64_t correct = 0, count = 0;
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
    eval_seen_ = eval_count_ = eval_correct_ = 0;
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
      r.accuracy = static_cast<double>(eval_correct_) / static_cast<double>(eval_count_);
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
  if (m) {
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
    if (!averager_->hold(*m)) return note_recv(std::move(m));
    poll_average();
  }
  return std::nullopt;
}

void PipelineWorker::poll_average() {
  if (averager_->active() && averager_->progress()) apply_overlapped();
}

void PipelineWorker::apply_overlapped() {
  if (numeric()) {
    at::Tensor merged = stage_->averaged_state(average_optimizer_) + (averager_->result() - snapshot_);
    // Adam's second moment may not go negative, whatever it learned meanwhile.
    if (average_optimizer_ && training_.optimizer == "adam") merged[2].clamp_min_(0);
    stage_->set_averaged_state(merged);
  }
  snapshot_ = at::Tensor();
  averager_->clear();
}

std::function<Message()> PipelineWorker::raw_recv() {
  return [this] { return env_.transport.recv(); };
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
  if (!averager_->participates()) return;
  at::Tensor state = numeric() ? stage_->averaged_state(average_optimizer_) : at::Tensor();
  at::Tensor mean = averager_->average(std::move(state), average_rows_, round, raw_recv(), other(defer));
  if (numeric()) stage_->set_averaged_state(mean);
}

void PipelineWorker::exchange_gradients(const std::function<void(Message)>& defer) {
  const int64_t round = averagings_++;
  if (!averager_->participates()) return;
  if (numeric()) {
    stage_->exchange_gradients(
        [&](const at::Tensor& flat) { return averager_->average(flat, 1, round, raw_recv(), other(defer)); });
  } else {
    averager_->average(at::Tensor(), 1, round, raw_recv(), other(defer));
  }
}

void PipelineWorker::record_memory() {
  const int64_t pending = numeric() ? stage_->pending() : static_cast<int64_t>(forward_version_.size());
  const Bytes now = stage_cost(*spec_.model, role_.layer_begin, role_.layer_end, training_, batch_,
                               std::max<int64_t>(pending, 1)).memory;
  if (now > peak_memory_) {
    peak_memory_ = now;
    Event e = event(EventKind::kMemory);
    e.bytes = now;
    env_.metrics.record(e);
  }
}

}  // namespace rv
