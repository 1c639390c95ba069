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

Message MultiRingAverager::take(MsgKind kind, int ring, int64_t step, int64_t round,
                                const std::function<void(Message)>& defer) {
  const auto key = std::make_tuple(static_cast<int>(kind), ring, step, round);
  for (;;) {
    auto it = early_.find(key);
    if (it != early_.end()) {
      Message m = std::move(it->second);
      early_.erase(it);
      return m;
    }
    Message m = env_.transport.recv();
    if (!hold(m)) defer(std::move(m));
  }
}

bool MultiRingAverager::hold(Message& m) {
  if (m.kind != MsgKind::kReduce && m.kind != MsgKind::kGather) return false;
  early_.emplace(std::make_tuple(static_cast<int>(m.kind), static_cast<int>(m.aux), m.step, m.id), std::move(m));
  return true;
}

at::Tensor MultiRingAverager::average(const at::Tensor& state_in, int64_t round,
                                      const std::function<void(Message)>& defer) {
  if (rings_.empty()) return state_in;
  const bool numeric = env_.compute.numeric();
  at::Tensor state = numeric ? state_in.clone() : at::Tensor();
  Event span;
  span.kind = EventKind::kAverage;
  span.node = node_;
  span.cluster = role_.cluster;
  span.stage = role_.stage;
  span.start = env_.clock.now();
  span.step = round;
  auto note = [&](EventKind kind, int peer, Bytes bytes) {
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
  };
  auto send = [&](const MyRing& r, MsgKind kind, int64_t t, int seg) {
    Message m;
    m.kind = kind;
    m.id = round;
    m.step = t;
    m.aux = r.id;
    const int64_t a = r.seg_lo(seg), b = r.seg_lo(seg + 1);
    if (numeric) m.payload.push_back(state.slice(0, a, b).clone());
    m.bytes = kHeaderBytes + kFloatBytes * (b - a);
    note(EventKind::kSend, r.next, m.bytes);
    env_.transport.send(r.next, std::move(m));
  };
  auto receive = [&](const MyRing& r, MsgKind kind, int64_t t, int seg, bool add) {
    Message m = take(kind, r.id, t, round, defer);
    const int64_t a = r.seg_lo(seg), b = r.seg_lo(seg + 1);
    note(EventKind::kRecv, m.src, m.bytes);
    env_.compute.run(add ? static_cast<double>(b - a) : 0.0, [&] {
      RV_CHECK(!m.payload.empty() && m.payload[0].numel() == b - a,
               "averaging: a segment of the wrong size from node " + std::to_string(m.src));
      at::Tensor dst = state.slice(0, a, b);
      if (add) dst.add_(m.payload[0]);
      else dst.copy_(m.payload[0]);
    });
  };
  const int c = rings_.front().members;
  // Reduce-scatter: after round t, member i holds the sum of t + 2 contributions to segment
  // (i - t - 1) mod C; after C - 1 rounds, the whole sum of segment (i + 1) mod C.
  for (int t = 0; t < c - 1; ++t) {
    for (const auto& r : rings_) send(r, MsgKind::kReduce, t, ((r.member - t) % c + c) % c);
    for (const auto& r : rings_) receive(r, MsgKind::kReduce, t, ((r.member - t - 1) % c + c) % c, true);
  }
  // All-gather: pass the finished sums around the ring.
  for (int t = 0; t < c - 1; ++t) {
    for (const auto& r : rings_) send(r, MsgKind::kGather, t, ((r.member + 1 - t) % c + c) % c);
    for (const auto& r : rings_) receive(r, MsgKind::kGather, t, ((r.member - t) % c + c) % c, false);
  }
  int64_t elems = 0;
  for (const auto& r : rings_) elems += r.hi - r.lo;
  env_.compute.run(static_cast<double>(elems), [&] {
    for (const auto& r : rings_) state.slice(0, r.lo, r.hi).div_(static_cast<double>(c));
  });
  span.end = env_.clock.now();
  env_.metrics.record(span);
  return numeric ? state : state_in;
}

}  // namespace rv
