#include "core/algo/multi_ring.h"

#include <ATen/ATen.h>

#include "core/cost_model.h"
#include "core/error.h"

namespace rv {

int64_t MultiRingAverager::MyRing::seg_lo(int i) const {
  return lo + (hi - lo) * i / members;
}

MultiRingAverager::MultiRingAverager(NodeEnv& env, const Plan& plan, const ModelDesc& model, int node)
    : env_(env), node_(node), role_(plan.role_of(node)) {
  const NodeRole& role = role_;
  if (role.stage < 0 || plan.clusters.size() < 2) return;
  const int64_t base = model.state_offset(role.layer_begin);
  for (int r = 0; r < static_cast<int>(plan.rings.size()); ++r) {
    const Ring& ring = plan.rings[r];
    const int c = static_cast<int>(ring.owners.size());
    RV_CHECK(c == static_cast<int>(plan.clusters.size()), "a ring without one owner per cluster");
    if (ring.owners[role.cluster] != node || ring.end <= ring.begin) continue;
    MyRing m;
    m.id = r;
    m.lo = ring.begin - base;
    m.hi = ring.end - base;
    m.member = role.cluster;
    m.members = c;
    m.next = ring.owners[(role.cluster + 1) % c];
    m.prev = ring.owners[(role.cluster + c - 1) % c];
    rings_.push_back(m);
  }
}

bool MultiRingAverager::hold(Message& m) {
  if (m.kind != MsgKind::kReduce && m.kind != MsgKind::kGather) return false;
  early_.emplace(std::make_tuple(static_cast<int>(m.kind), static_cast<int>(m.aux), m.step, m.id), std::move(m));
  return true;
}

namespace {

int mod(int a, int c) { return ((a % c) + c) % c; }

}  // namespace

void MultiRingAverager::start(const at::Tensor& state, int64_t round) {
  RV_CHECK(phase_ == Phase::kIdle || phase_ == Phase::kDone, "an averaging is already in progress");
  state_ = env_.compute.numeric() && state.defined() ? state.clone() : at::Tensor();
  round_ = round;
  t_ = 0;
  sent_ = false;
  span_ = Event();
  span_.kind = EventKind::kAverage;
  span_.node = node_;
  span_.cluster = role_.cluster;
  span_.stage = role_.stage;
  span_.step = round;
  span_.start = env_.clock.now();
  phase_ = rings_.empty() ? Phase::kDone : Phase::kReduce;
}

void MultiRingAverager::note(EventKind kind, int peer, Bytes bytes) {
  Event e;
  e.kind = kind;
  e.node = node_;
  e.cluster = role_.cluster;
  e.stage = role_.stage;
  e.peer = peer;
  e.bytes = bytes;
  e.start = e.end = env_.clock.now();
  e.micro_batch = -1;
  env_.metrics.record(e);
}

void MultiRingAverager::send_round() {
  const bool reduce = phase_ == Phase::kReduce;
  for (const auto& r : rings_) {
    const int c = r.members;
    // Reduce-scatter round t sends segment (i - t); all-gather round t sends segment (i + 1 - t).
    const int seg = reduce ? mod(r.member - t_, c) : mod(r.member + 1 - t_, c);
    Message m;
    m.kind = reduce ? MsgKind::kReduce : MsgKind::kGather;
    m.id = round_;
    m.step = t_;
    m.aux = r.id;
    const int64_t a = r.seg_lo(seg), b = r.seg_lo(seg + 1);
    if (state_.defined()) m.payload.push_back(state_.slice(0, a, b).clone());
    m.bytes = kHeaderBytes + kFloatBytes * (b - a);
    note(EventKind::kSend, r.next, m.bytes);
    env_.transport.send(r.next, std::move(m));
  }
  sent_ = true;
}

bool MultiRingAverager::progress() {
  for (;;) {
    if (phase_ == Phase::kIdle) return false;
    if (phase_ == Phase::kDone) return true;
    if (!sent_) send_round();
    const bool reduce = phase_ == Phase::kReduce;
    const int kind = static_cast<int>(reduce ? MsgKind::kReduce : MsgKind::kGather);
    for (const auto& r : rings_)
      if (!early_.count(std::make_tuple(kind, r.id, static_cast<int64_t>(t_), round_))) return false;
    // Every ring's segment of this round is here: reduce-scatter adds segment (i - t - 1), the
    // all-gather copies segment (i - t).
    for (const auto& r : rings_) {
      auto it = early_.find(std::make_tuple(kind, r.id, static_cast<int64_t>(t_), round_));
      Message m = std::move(it->second);
      early_.erase(it);
      const int seg = reduce ? mod(r.member - t_ - 1, r.members) : mod(r.member - t_, r.members);
      const int64_t a = r.seg_lo(seg), b = r.seg_lo(seg + 1);
      note(EventKind::kRecv, m.src, m.bytes);
      env_.compute.run(reduce ? static_cast<double>(b - a) : 0.0, [&] {
        RV_CHECK(!m.payload.empty() && m.payload[0].numel() == b - a,
                 "averaging: a segment of the wrong size from node " + std::to_string(m.src));
        at::Tensor dst = state_.slice(0, a, b);
        if (reduce) dst.add_(m.payload[0]);
        else dst.copy_(m.payload[0]);
      });
    }
    sent_ = false;
    const int c = rings_.front().members;
    if (++t_ < c - 1) continue;
    t_ = 0;
    if (reduce) {
      phase_ = Phase::kGather;
      continue;
    }
    int64_t elems = 0;
    for (const auto& r : rings_) elems += r.hi - r.lo;
    env_.compute.run(static_cast<double>(elems), [&] {
      for (const auto& r : rings_) state_.slice(0, r.lo, r.hi).div_(static_cast<double>(c));
    });
    span_.end = env_.clock.now();
    env_.metrics.record(span_);
    phase_ = Phase::kDone;
    return true;
  }
}

at::Tensor MultiRingAverager::average(const at::Tensor& state_in, int64_t round,
                                      const std::function<void(Message)>& defer) {
  if (rings_.empty()) return state_in;
  start(state_in, round);
  while (!progress()) {
    Message m = env_.transport.recv();
    if (!hold(m)) defer(std::move(m));
  }
  phase_ = Phase::kIdle;
  return env_.compute.numeric() ? state_ : state_in;
}

}  // namespace rv
