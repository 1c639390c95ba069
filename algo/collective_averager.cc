#include "algo/collective_averager.h"

#include <ATen/ATen.h>

#include <algorithm>

#include "core/error.h"
#include "core/model/cost_model.h"

namespace rv {

CollectiveAverager::CollectiveAverager(NodeEnv& env, const Plan& plan, const ModelDesc& model,
                                       int node)
    : env_(env), node_(node), role_(plan.role_of(node)) {
  clusters_ = static_cast<int>(plan.clusters.size());
  if (role_.stage < 0 || clusters_ < 2) return;
  const int64_t base = model.state_offset(role_.layer_begin);
  own_ = model.state_offset(role_.layer_end) - base;
  for (const Ring& ring : plan.rings) {
    RV_CHECK(static_cast<int>(ring.owners.size()) == clusters_,
             "a ring without one owner per cluster");
    if (ring.owners[role_.cluster] != node || ring.end <= ring.begin) continue;
    Chunk c;
    c.group = ring.owners;
    std::sort(c.group.begin(), c.group.end());
    c.lo = ring.begin - base;
    c.hi = ring.end - base;
    c.next = ring.owners[(role_.cluster + 1) % clusters_];
    chunks_.push_back(std::move(c));
  }
  if (chunks_.empty()) return;
  if (env.collectives == nullptr)
    throw InputError(
        "training.allreduce = \"gloo\" (c10d's own all-reduce) needs the real executor "
        "(ravnest real or ravnest node)");
  for (const auto& c : chunks_) env.collectives->join(c.group);
}

void CollectiveAverager::start(at::Tensor state, int64_t rows, int64_t round) {
  RV_CHECK(!active_, "an averaging is already in progress");
  RV_CHECK(env_.compute.numeric() && state.defined(),
           "the executor's all-reduce needs numeric mode");
  was_1d_ = state.dim() == 1;
  state_ = take_over(std::move(state));
  RV_CHECK(state_.dim() == 2 && state_.size(0) == rows && state_.size(1) == own_,
           "averaging: a state of the wrong shape on node " + std::to_string(node_));
  active_ = true;
  done_ = false;
  span_ = event_now(env_, role_, EventKind::kAverage);
  span_.step = round;
  for (auto& c : chunks_) {
    c.buffer = state_.narrow(1, c.lo, c.hi - c.lo).contiguous().clone();
    c.work = env_.collectives->allreduce_sum(c.group, c.buffer);
  }
}

bool CollectiveAverager::progress() {
  if (!active_) return false;
  if (done_) return true;
  for (auto& c : chunks_)
    if (!c.work->done()) return false;
  finish();
  return true;
}

void CollectiveAverager::wait(const std::function<Message()>&,
                              const std::function<void(Message)>&) {
  if (!active_ || done_) return;
  for (auto& c : chunks_) c.work->wait();
  finish();
}

void CollectiveAverager::finish() {
  for (auto& c : chunks_) {
    const int64_t n = c.hi - c.lo;
    state_.narrow(1, c.lo, n).copy_(c.buffer.div_(static_cast<double>(clusters_)));
    // What a ring all-reduce of this chunk moves each way (Gloo does not report its traffic).
    const Bytes bytes = kFloatBytes * state_.size(0) * n * 2 * (clusters_ - 1) / clusters_;
    for (EventKind k : {EventKind::kSend, EventKind::kRecv}) {
      Event e = event_now(env_, role_, k);
      e.step = span_.step;
      e.peer = c.next;
      e.bytes = bytes;
      env_.metrics.record(e);
    }
    c.buffer = at::Tensor();
    c.work.reset();
  }
  span_.end = env_.clock.now();
  env_.metrics.record(span_);
  done_ = true;
}

at::Tensor CollectiveAverager::result() const {
  if (!state_.defined()) return state_;
  return was_1d_ ? state_.squeeze(0) : state_;
}

void CollectiveAverager::clear() {
  active_ = done_ = false;
  state_ = at::Tensor();
}

}  // namespace rv
