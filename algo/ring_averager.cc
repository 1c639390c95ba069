#include "algo/ring_averager.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <utility>
#include <vector>

#include "core/error.h"
#include "core/model/cost_model.h"

namespace rv {

int64_t RingAverager::MyRing::seg_lo(int i) const { return lo + (hi - lo) * i / members; }

RingAverager::RingAverager(NodeEnv& env, const Plan& plan, const ModelDesc& model, int node,
                           RingTopology topology, int64_t piece_bytes)
    : plan_(plan),
      model_(model),
      env_(env),
      node_(node),
      role_(plan.role_of(node)),
      topology_(topology),
      piece_bytes_(piece_bytes) {
  RV_CHECK(piece_bytes >= 0, "averaging: a negative piece size");
  const NodeRole& role = role_;
  clusters_ = static_cast<int>(plan.clusters.size());
  keep_original_ = env.membership != nullptr;
  if (role.stage < 0 || clusters_ < 2) return;
  const int64_t base = model.state_offset(role.layer_begin);
  own_ = model.state_offset(role.layer_end) - base;
  whole_ = model.state_offset(model.layer_count());
  if (topology_ == RingTopology::kMulti) {
    std::vector<int> view(plan.clusters.size());
    for (size_t c = 0; c < view.size(); ++c) view[c] = static_cast<int>(c);
    form_rings(view, [&](int r, int c) {
      return plan.rings[static_cast<size_t>(r)].owners[static_cast<size_t>(c)];
    });
    return;
  }
  // Single ring: the first stages of the clusters, over the whole model.
  const ClusterPlan& mine = plan.clusters[role.cluster];
  leader_ = mine.stages.front().node;
  if (leader_ == node) {
    for (size_t s = 1; s < mine.stages.size(); ++s) {
      const StagePlan& sp = mine.stages[s];
      Member m{sp.node, model.state_offset(sp.layer_begin), model.state_offset(sp.layer_end)};
      if (m.hi > m.lo) members_.push_back(m);
    }
    if (whole_ > 0) {
      MyRing m;
      m.lo = 0;
      m.hi = whole_;
      m.member = role.cluster;
      m.members = clusters_;
      m.next = plan.clusters[(role.cluster + 1) % clusters_].stages.front().node;
      m.prev = plan.clusters[(role.cluster + clusters_ - 1) % clusters_].stages.front().node;
      rings_.push_back(m);
    }
    takes_part_ = !rings_.empty();
  } else {
    takes_part_ = own_ > 0;
  }
}

void RingAverager::reconfigure(const NodeRole& role, const Assignment& nodes,
                               const std::vector<int>& view) {
  if (topology_ != RingTopology::kMulti) Averager::reconfigure(role, nodes, view);
  RV_CHECK(phase_ == Phase::kIdle, "averaging: re-formed during an averaging");
  if (ring_stage_.empty()) {  // each ring's holder in each cluster, as a stage (the plan's)
    for (const Ring& ring : plan_.rings) {
      RV_CHECK(ring.owners.size() == plan_.clusters.size(), "a ring without one owner per cluster");
      std::vector<int> stages;
      for (size_t c = 0; c < ring.owners.size(); ++c) {
        const auto& st = plan_.clusters[c].stages;
        const auto it = std::find_if(st.begin(), st.end(),
                                     [&](const StagePlan& p) { return p.node == ring.owners[c]; });
        RV_CHECK(it != st.end(), "a ring's owner outside its cluster");
        stages.push_back(static_cast<int>(it - st.begin()));
      }
      ring_stage_.push_back(std::move(stages));
    }
  }
  role_ = role;
  form_rings(view, [&](int r, int c) {
    return nodes.at(static_cast<size_t>(c))
        .at(static_cast<size_t>(ring_stage_[static_cast<size_t>(r)][static_cast<size_t>(c)]));
  });
}

void RingAverager::form_rings(const std::vector<int>& view,
                              const std::function<int(int, int)>& holder) {
  rings_.clear();
  takes_part_ = false;
  clusters_ = static_cast<int>(view.size());
  if (role_.stage < 0) return;
  const int64_t base = model_.state_offset(role_.layer_begin);
  own_ = model_.state_offset(role_.layer_end) - base;
  const auto here = std::find(view.begin(), view.end(), role_.cluster);
  if (here == view.end() || clusters_ < 2) return;
  const int member = static_cast<int>(here - view.begin());
  for (int r = 0; r < static_cast<int>(plan_.rings.size()); ++r) {
    const Ring& ring = plan_.rings[r];
    if (holder(r, role_.cluster) != role_.node || ring.end <= ring.begin) continue;
    MyRing m;
    m.id = r;
    m.lo = ring.begin - base;
    m.hi = ring.end - base;
    m.member = member;
    m.members = clusters_;
    for (int c : view) m.nodes.push_back(holder(r, c));
    m.next = m.nodes[(member + 1) % clusters_];
    m.prev = m.nodes[(member + clusters_ - 1) % clusters_];
    rings_.push_back(m);
  }
  takes_part_ = !rings_.empty();
}

void RingAverager::drop(int node) {
  if (topology_ != RingTopology::kMulti) Averager::drop(node);
  if (phase_ != Phase::kRing) return;
  auto with = [&](const MyRing& r) {
    return std::find(r.nodes.begin(), r.nodes.end(), node) != r.nodes.end();
  };
  bool gave_up = false;
  for (Lane& l : lanes_) {
    if (l.done || !with(l)) continue;
    // Its part of the chunk goes back to this node's own values (it may hold a partial sum by now),
    // once no transport writes there.
    withdraw(l);
    if (state_.defined() && original_.defined())
      state_.narrow(1, l.lo, l.hi - l.lo).copy_(original_.narrow(1, l.lo, l.hi - l.lo));
    l.done = true;
    --lanes_left_;
    gave_up = true;
  }
  rings_.erase(std::remove_if(rings_.begin(), rings_.end(), with), rings_.end());
  if (gave_up && lanes_left_ == 0) finish();
}

bool RingAverager::hold(Message& m) {
  if (m.kind != MsgKind::kReduce && m.kind != MsgKind::kGather && m.kind != MsgKind::kCollect &&
      m.kind != MsgKind::kDistribute)
    return false;
  if (phase_ == Phase::kRing && m.id == round_ &&
      (m.kind == MsgKind::kReduce || m.kind == MsgKind::kGather)) {
    const auto lane = lane_of_.find(m.aux);
    if (lane != lane_of_.end()) ready_.push_back(lane->second);
  }
  early_.emplace(std::make_tuple(static_cast<int>(m.kind), m.aux, m.step, m.id), std::move(m));
  return true;
}

namespace {

int mod(int a, int c) { return ((a % c) + c) % c; }

// d[i] = (d[i] + s[i]) / c for i < n (the sum rounded, then the quotient), in one vectorised pass
// over memory: the rings' last addition is on their critical path, and add_() then div_() took
// twice as long as this one pass on this project's 2-core host (2 MB: 340 us against 170 us).
void add_then_divide(float* __restrict d, const float* __restrict s, int64_t n, float c) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) d[i] = (d[i] + s[i]) / c;
}

// dst = (dst + src) / c for float32 [rows, n] tensors, row by row (each row of a state's slice
// and of a received segment is contiguous; anything else takes add_() then div_()).
void add_then_divide(const at::Tensor& dst, const at::Tensor& src, int c) {
  for (int64_t r = 0; r < dst.size(0); ++r) {
    const at::Tensor d = dst.select(0, r), s = src.select(0, r);
    if (d.scalar_type() != at::kFloat || s.scalar_type() != at::kFloat || d.stride(0) != 1 ||
        s.stride(0) != 1) {
      d.add_(s).div_(static_cast<double>(c));
      continue;
    }
    add_then_divide(d.data_ptr<float>(), s.data_ptr<float>(), d.numel(), static_cast<float>(c));
  }
}

}  // namespace

void RingAverager::start(at::Tensor state, int64_t rows, int64_t round) {
  RV_CHECK(phase_ == Phase::kIdle, "an averaging is already in progress");
  RV_CHECK(rows >= 1, "averaging: rows must be at least 1");
  rows_ = rows;
  round_ = round;
  state_ = at::Tensor();
  was_1d_ = false;
  if (env_.compute.numeric() && state.defined()) {
    was_1d_ = state.dim() == 1;
    state_ = take_over(std::move(state));
    RV_CHECK(state_.dim() == 2 && state_.size(0) == rows && state_.size(1) == own_,
             "averaging: a state of the wrong shape on node " + std::to_string(node_));
  }
  // Messages of earlier averagings that were given up (churn) will never be taken.
  for (auto it = early_.begin(); it != early_.end();)
    it = std::get<3>(it->first) < round ? early_.erase(it) : std::next(it);
  if (keep_original_ && state_.defined()) original_ = state_.clone();
  // The same on every node (algo/ring_averager.h): the channel is the run's, rows, churn and
  // whether averagings block too.
  direct_ =
      env_.direct != nullptr && blocking() && !keep_original_ && state_.defined() && rows_ == 1;
  direct_round_ = -1;
  direct_lane_ = 0;
  span_ = event_now(env_, role_, EventKind::kAverage);
  span_.step = round;
  lanes_.clear();
  lane_of_.clear();
  ready_.clear();
  lanes_left_ = 0;
  if (!takes_part_) {
    phase_ = Phase::kDone;
    return;
  }
  make_lanes();
  if (topology_ == RingTopology::kMulti) {
    phase_ = Phase::kRing;
    return;
  }
  phase_ = Phase::kCollect;
  if (leader_ != node_) {  // a member: its state to the leader, then wait for the mean
    send(leader_, MsgKind::kCollect, 0, node_, 0, own_);
    return;
  }
  if (state_.defined()) {  // the leader: the whole model's state, its own stage first
    at::Tensor whole = at::zeros({rows_, whole_}, at::kFloat);
    whole.narrow(1, 0, own_).copy_(state_);
    state_ = whole;
  }
}

void RingAverager::note(EventKind kind, int peer, Bytes bytes) {
  Event e = event_now(env_, role_, kind);
  e.peer = peer;
  e.bytes = bytes;
  env_.metrics.record(e);
}

void RingAverager::send(int dst, MsgKind kind, int64_t step, int64_t aux, int64_t lo, int64_t hi) {
  Message m;
  m.kind = kind;
  m.id = round_;
  m.step = step;
  m.aux = aux;
  // A slice of the state, as it is: a ring writes each slice again only after the peer it went to
  // has taken it (each write waits for a message that follows from that), and the result is
  // read-only. A slice of several rows is not contiguous, and goes as a copy.
  if (state_.defined()) {
    m.payload.push_back(state_.narrow(1, lo, hi - lo).contiguous());
    m.payload_frozen = true;
  }
  m.bytes = kHeaderBytes + kFloatBytes * rows_ * (hi - lo);
  note(EventKind::kSend, dst, m.bytes);
  env_.transport.send(dst, std::move(m));
}

void RingAverager::make_lanes() {
  for (const MyRing& r : rings_) {
    const int64_t pieces = ring_pieces((r.hi - r.lo) / r.members, rows_, piece_bytes_);
    RV_CHECK(r.id < (int64_t{1} << 46), "averaging: a ring id too large to name its pieces");
    for (int64_t j = 0; j < pieces; ++j) {
      Lane l;
      static_cast<MyRing&>(l) = r;
      l.lo = r.lo + (r.hi - r.lo) * j / pieces;
      l.hi = r.lo + (r.hi - r.lo) * (j + 1) / pieces;
      l.aux = static_cast<int64_t>(r.id) * kMaxRingPieces + j;
      lanes_.push_back(std::move(l));
    }
  }
  // Every lane begins (its first segment out; messages that came before the start are in early_).
  for (size_t i = 0; i < lanes_.size(); ++i) {
    lane_of_[lanes_[i].aux] = i;
    ready_.push_back(i);
  }
  lanes_left_ = lanes_.size();
}

int RingAverager::send_seg(const Lane& l) {
  // Reduce-scatter round t sends segment (i - t); all-gather round t sends segment (i + 1 - t).
  return l.gather ? mod(l.member + 1 - l.t, l.members) : mod(l.member - l.t, l.members);
}

int RingAverager::recv_seg(const Lane& l) {
  // The reduce-scatter adds into segment (i - t - 1), the all-gather writes segment (i - t).
  return l.gather ? mod(l.member - l.t, l.members) : mod(l.member - l.t - 1, l.members);
}

void RingAverager::add_segment(const Lane& l, int64_t a, int64_t b,
                               const std::function<at::Tensor()>& received) {
  Work add;
  add.add_elementwise(static_cast<double>((b - a) * rows_), 2);
  const bool last_add = l.t == l.members - 2;  // the sum is whole: the mean follows
  env_.compute.run(add, {}, [&] {
    const at::Tensor dst = state_.narrow(1, a, b - a), src = received();
    if (last_add) {
      add_then_divide(dst, src, l.members);
    } else {
      dst.add_(src);
    }
  });
}

void RingAverager::next_round(Lane& l) {
  if (++l.t < l.members - 1) return;
  l.t = 0;
  if (l.gather) {
    l.offers = 0;  // every round's offer was taken or withdrawn
    l.done = true;
    --lanes_left_;
  } else {
    divide_reduced(l);
    l.gather = true;
  }
}

void RingAverager::send_lane(Lane& l) {
  const int seg = send_seg(l);
  send(l.next, l.gather ? MsgKind::kGather : MsgKind::kReduce, l.t, l.aux, l.seg_lo(seg),
       l.seg_lo(seg + 1));
  l.sent = true;
  if (!l.gather) offer(l, l.t);
}

MessageMatch RingAverager::gather_match(const Lane& l, int t) const {
  return MessageMatch{MsgKind::kGather, round_, t, l.aux};
}

void RingAverager::offer(Lane& l, int t) {
  // Segment (i - t), just sent by reduce-scatter round t, comes back as the mean in all-gather
  // round t. Nothing here reads or writes it until then: later reduce-scatter rounds add into other
  // segments, the all-gather writes each segment only in its own round, and the mean comes only
  // after the next node has taken this round's send (it holds this node's share), so no send still
  // reads it when it arrives. A slice of several rows is not contiguous: it arrives elsewhere and
  // is copied.
  if (!state_.defined() || rows_ != 1) return;
  const int seg = mod(l.member - t, l.members);
  const int64_t a = l.seg_lo(seg), b = l.seg_lo(seg + 1);
  env_.transport.offer(l.prev, gather_match(l, t), state_.narrow(1, a, b - a));
  l.offers = t + 1;
}

void RingAverager::withdraw(Lane& l, int t) {
  if (t < l.offered_from() || t >= l.offers) return;
  env_.transport.withdraw(l.prev, gather_match(l, t));
}

void RingAverager::withdraw(Lane& l) {
  for (int t = l.offered_from(); t < l.offers; ++t)
    env_.transport.withdraw(l.prev, gather_match(l, t));
  l.offers = l.offered_from();
}

std::optional<Message> RingAverager::take(MsgKind kind, int64_t aux, int64_t step) {
  auto it = early_.find(std::make_tuple(static_cast<int>(kind), aux, step, round_));
  if (it == early_.end()) return std::nullopt;
  Message m = std::move(it->second);
  early_.erase(it);
  note(EventKind::kRecv, m.src, m.bytes);
  return m;
}

bool RingAverager::collect() {
  auto here = [&](MsgKind kind, int64_t aux) {
    return early_.count(std::make_tuple(static_cast<int>(kind), aux, int64_t{0}, round_)) > 0;
  };
  auto check = [&](const Message& m, int64_t n) {
    RV_CHECK(!state_.defined() || (m.payload.size() == 1 && m.payload[0].dim() == 2 &&
                                   m.payload[0].size(0) == rows_ && m.payload[0].size(1) == n),
             "averaging: a state of the wrong size from node " + std::to_string(m.src));
  };
  if (leader_ != node_) {
    std::optional<Message> m = take(MsgKind::kDistribute, node_, 0);
    if (!m) return false;
    check(*m, own_);
    if (state_.defined()) state_ = m->payload[0];
    span_.end = env_.clock.now();
    env_.metrics.record(span_);
    phase_ = Phase::kDone;
    return true;
  }
  for (const auto& m : members_)
    if (!here(MsgKind::kCollect, m.node)) return false;
  for (const auto& mb : members_) {
    Message m = std::move(*take(MsgKind::kCollect, mb.node, 0));  // here (above)
    check(m, mb.hi - mb.lo);
    if (state_.defined()) state_.narrow(1, mb.lo, mb.hi - mb.lo).copy_(m.payload[0]);
  }
  phase_ = Phase::kRing;
  return true;
}

void RingAverager::divide_reduced(const Lane& l) {
  // After the reduce-scatter, segment (i + 1) of the lane holds the sum over the clusters here:
  // the mean is made once, by its owner, and the all-gather hands it on.
  const int seg = mod(l.member + 1, l.members);
  const int64_t lo = l.seg_lo(seg), hi = l.seg_lo(seg + 1);
  Work divide;
  divide.add_elementwise(static_cast<double>((hi - lo) * rows_));
  env_.compute.run(divide, {},
                   [] {});  // done by the last addition (add_then_divide), in the same pass
}

void RingAverager::finish() {
  if (topology_ == RingTopology::kSingle) {
    for (const auto& mb : members_) send(mb.node, MsgKind::kDistribute, 0, mb.node, mb.lo, mb.hi);
    if (state_.defined()) state_ = state_.narrow(1, 0, own_);
  }
  span_.end = env_.clock.now();
  env_.metrics.record(span_);
  phase_ = Phase::kDone;
}

bool RingAverager::progress() {
  for (;;) {
    if (phase_ == Phase::kIdle) return false;
    if (phase_ == Phase::kDone) return true;
    if (phase_ == Phase::kCollect) {
      if (!collect()) return false;
      continue;
    }
    if (direct_) return progress_direct();
    // Each lane at its own pace: its round's segment out, then, once the previous member's is
    // here, the reduce-scatter adds segment (i - t - 1), the all-gather copies segment (i - t).
    // Only lanes that may move are looked at (ready_), in turn.
    while (!ready_.empty()) {
      const size_t i = ready_.front();
      ready_.pop_front();
      Lane& l = lanes_[i];
      if (l.done) continue;
      if (!l.sent) send_lane(l);
      const MsgKind kind = l.gather ? MsgKind::kGather : MsgKind::kReduce;
      std::optional<Message> got = take(kind, l.aux, l.t);
      if (!got) continue;
      Message m = std::move(*got);
      const int seg = recv_seg(l);
      const int64_t a = l.seg_lo(seg), b = l.seg_lo(seg + 1);
      auto payload = [&] {
        RV_CHECK(m.payload.size() == 1 && m.payload[0].dim() == 2 &&
                     m.payload[0].size(0) == rows_ && m.payload[0].size(1) == b - a,
                 "averaging: a segment of the wrong size from node " + std::to_string(m.src));
        return m.payload[0];
      };
      if (!l.gather) {
        add_segment(l, a, b, payload);
      } else {
        env_.compute.run(Work{}, {}, [&] {  // the all-gather's copy is not charged
          const at::Tensor dst = state_.narrow(1, a, b - a), got = payload();
          if (got.data_ptr() != dst.data_ptr()) {  // not received in place
            withdraw(l, l.t);
            dst.copy_(got);
          }
        });
      }
      l.sent = false;
      ready_.push_back(i);  // its next segment out, and its next message may be here already
      next_round(l);
    }
    if (lanes_left_ == 0) {
      finish();
      return true;
    }
    return false;
  }
}

namespace {

// The direct channel's tags of the ring exchanges: between two nodes, in one direction, under one
// tag, the rounds meet in the order both post them (DirectChannel), which the one order makes the
// same. The all-gather's receives are posted ahead of the reduce-scatter's later rounds, so the
// two phases go under tags of their own.
constexpr int64_t kReduceTag = 0;
constexpr int64_t kGatherTag = 1;

}  // namespace

void RingAverager::post_direct(Lane& l) {
  // The segment this round receives: its place is posted first, so that the previous member's
  // send finds it. An empty segment moves nothing (on both ends alike); its message's bytes are
  // recorded all the same, as the message it replaces.
  const int rseg = recv_seg(l);
  const int64_t ra = l.seg_lo(rseg), rb = l.seg_lo(rseg + 1);
  const int sseg = send_seg(l);
  const int64_t sa = l.seg_lo(sseg), sb = l.seg_lo(sseg + 1);
  if (l.gather) {  // posted with the reduce-scatter round that sent the same segment on (below)
    l.rx = std::move(l.gather_rx.front());
    l.gather_rx.pop_front();
  } else {
    if (rb > ra) l.rx = env_.direct->recv(l.prev, kReduceTag, l.scratch.narrow(0, 0, rb - ra));
    // All-gather round t brings back the mean of segment (i - t), which this round sends on: its
    // receive is posted now, so that the previous member's send finds it waiting and goes at once.
    // Nothing writes the segment before (the mean follows from the next member having taken this
    // round's send, and later reduce-scatter rounds touch other segments: offer()).
    l.gather_rx.push_back(
        sb > sa ? env_.direct->recv(l.prev, kGatherTag, state_.narrow(1, sa, sb - sa).view({-1}))
                : nullptr);
  }
  note(EventKind::kSend, l.next, kHeaderBytes + kFloatBytes * (sb - sa));
  if (sb > sa)
    l.tx.push_back(env_.direct->send(l.next, l.gather ? kGatherTag : kReduceTag,
                                     state_.narrow(1, sa, sb - sa).view({-1})));
}

int RingAverager::direct_rounds() const { return 2 * (lanes_.front().members - 1); }

bool RingAverager::progress_direct() {
  if (direct_round_ <
      0) {  // the rings begin: the reduce-scatter's memory, every lane's first round
    int64_t total = 0;
    for (const Lane& l : lanes_) total += (l.hi - l.lo + l.members - 1) / l.members;
    if (!scratch_.defined() || scratch_.numel() < total)
      scratch_ = at::empty({std::max<int64_t>(total, 1)}, at::kFloat);
    int64_t at = 0;
    for (Lane& l : lanes_) {
      const int64_t n = (l.hi - l.lo + l.members - 1) / l.members;
      l.scratch = scratch_.narrow(0, at, n);
      at += n;
    }
    direct_round_ = 0;
    direct_lane_ = 0;
    for (Lane& l : lanes_) post_direct(l);
  }
  while (direct_round_ < direct_rounds()) {
    Lane& l = lanes_[direct_lane_];
    if (l.rx && !l.rx->done()) return false;
    l.rx.reset();
    const int seg = recv_seg(l);
    const int64_t a = l.seg_lo(seg), b = l.seg_lo(seg + 1);
    note(EventKind::kRecv, l.prev, kHeaderBytes + kFloatBytes * (b - a));
    // The reduce-scatter's addition (the all-gather's segment is in place).
    if (!l.gather)
      add_segment(l, a, b, [&] { return l.scratch.narrow(0, 0, b - a).view({1, -1}); });
    next_round(l);
    if (!l.done) post_direct(l);
    if (++direct_lane_ == lanes_.size()) {
      direct_lane_ = 0;
      ++direct_round_;
    }
  }
  // Every lane is done once its sends have left: the peers have them (nothing is dropped unsent).
  for (Lane& l : lanes_) {
    while (!l.tx.empty() && l.tx.back()->done()) l.tx.pop_back();
    if (!l.tx.empty()) return false;
  }
  finish();
  return true;
}

void RingAverager::wait(const std::function<Message()>& recv,
                        const std::function<void(Message)>& other) {
  while (!progress()) {
    if (phase_ == Phase::kRing && direct_ && direct_round_ >= 0) {  // what the one order waits for
      if (direct_round_ < direct_rounds()) {
        lanes_[direct_lane_].rx->wait();
      } else {
        for (Lane& l : lanes_)
          if (!l.tx.empty()) {
            l.tx.back()->wait();
            break;
          }
      }
      continue;
    }
    Message m = recv();
    if (!hold(m)) other(std::move(m));
  }
}

at::Tensor RingAverager::result() const {
  if (!state_.defined()) return state_;
  return was_1d_ ? state_.squeeze(0) : state_;
}

void RingAverager::clear() {
  for (Lane& l : lanes_) withdraw(l);  // an averaging given up
  phase_ = Phase::kIdle;
  state_ = at::Tensor();
  original_ = at::Tensor();
}

}  // namespace rv
