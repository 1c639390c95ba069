#include "emu/star_shaper.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace rv {
namespace {

// Bytes left below this count as through (float residue of rate * time).
constexpr double kDoneBytes = 1e-3;
// CM02's sharing penalty of a flow is its route's latency, or 1 (second) where that is zero.
double weight_of(Seconds route) { return 1.0 / (route > 0 ? route : 1.0); }

}  // namespace

StarNetwork::StarNetwork(std::vector<NodeLinks> links) : links_(std::move(links)) {
  for (const NodeLinks& l : links_)
    RV_CHECK(l.up > 0 && l.down > 0 && l.latency >= 0 && l.latency_factor > 0,
             "star network: links need positive rates");
}

void StarNetwork::send(int src, int dst, Bytes bytes, uint64_t token, Seconds now) {
  const int n = static_cast<int>(links_.size());
  RV_CHECK(src >= 0 && src < n && dst >= 0 && dst < n && src != dst, "star network: bad route");
  RV_CHECK(now >= now_, "star network: a send in the past");
  RV_CHECK(!flows_.count(token), "star network: a token in use");
  progress_to(now);
  Flow f;
  f.src = src;
  f.dst = dst;
  f.left = static_cast<double>(std::max<Bytes>(bytes, 1));
  f.starts = now + delay(src, dst);
  f.weight = weight_of(route(src, dst));
  flows_[token] = f;
  pending_[{src, dst}].push_back({token, false});
  solve();
}

// Weighted max-min fairness by progressive filling: raise a common level; a started flow's rate is
// level * weight; the link whose capacity the level fills first fixes its flows' rates; repeat
// with what the others leave.
void StarNetwork::solve() {
  const size_t n = links_.size();
  std::vector<double> cap(2 * n);  // [0, n): uplinks; [n, 2n): downlinks
  for (size_t i = 0; i < n; ++i) {
    cap[i] = links_[i].up;
    cap[n + i] = links_[i].down;
  }
  std::vector<Flow*> open;
  for (auto& [token, f] : flows_) {
    f.rate = 0;
    if (f.starts <= now_) open.push_back(&f);
  }
  while (!open.empty()) {
    std::vector<double> weight(2 * n, 0.0);
    for (const Flow* f : open) {
      weight[f->src] += f->weight;
      weight[n + f->dst] += f->weight;
    }
    double level = kNever;
    for (size_t l = 0; l < 2 * n; ++l)
      if (weight[l] > 0) level = std::min(level, std::max(0.0, cap[l]) / weight[l]);
    std::vector<char> full(2 * n, 0);
    for (size_t l = 0; l < 2 * n; ++l)
      full[l] = weight[l] > 0 && std::max(0.0, cap[l]) / weight[l] <= level * (1 + 1e-12);
    std::vector<Flow*> rest;
    for (Flow* f : open) {
      if (!full[f->src] && !full[n + f->dst]) {
        rest.push_back(f);
        continue;
      }
      f->rate = level * f->weight;
      cap[f->src] -= f->rate;
      cap[n + f->dst] -= f->rate;
    }
    open.swap(rest);
  }
}

void StarNetwork::progress_to(Seconds t) {
  for (auto& [token, f] : flows_)
    if (f.starts <= now_ && f.rate > 0) f.left -= f.rate * (t - now_);
  now_ = std::max(now_, t);
}

Seconds StarNetwork::next_event() const {
  Seconds t = kNever;
  for (const auto& [token, f] : flows_) {
    if (f.starts > now_)
      t = std::min(t, f.starts);
    else if (f.rate > 0)
      t = std::min(t, now_ + std::max(0.0, f.left) / f.rate);
  }
  return t;
}

std::vector<Delivery> StarNetwork::advance(Seconds now) {
  std::vector<Delivery> out;
  for (;;) {
    const Seconds t = next_event();
    if (t == kNever) break;
    // A flow due a rounding error after `now` (a clock set to a computed delivery time) is
    // through at `now` if what it has left is below kDoneBytes.
    progress_to(std::min(t, now));
    // What is through leaves the links; each pair delivers its messages in send order.
    std::vector<uint64_t> through;
    for (const auto& [token, f] : flows_)
      if (f.starts <= now_ && f.rate > 0 &&
          (f.left <= kDoneBytes || now_ + f.left / f.rate <= now_))
        through.push_back(token);
    if (through.empty() && t > now) break;
    for (uint64_t token : through) {
      const Flow f = flows_[token];
      flows_.erase(token);
      std::deque<Sent>& q = pending_[{f.src, f.dst}];
      for (Sent& m : q)
        if (m.token == token) m.through = true;
      while (!q.empty() && q.front().through) {
        out.push_back({q.front().token, f.src, f.dst, now_});
        q.pop_front();
      }
      if (q.empty()) pending_.erase({f.src, f.dst});
    }
    solve();
  }
  if (now != kNever) progress_to(now);
  return out;
}

std::map<uint64_t, double> StarNetwork::rates() const {
  std::map<uint64_t, double> r;
  for (const auto& [token, f] : flows_) r[token] = f.rate;
  return r;
}

}  // namespace rv
