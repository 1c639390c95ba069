#include "emu/star_shaper.h"

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "core/error.h"

namespace rv {
namespace {

// Bytes left below this count as through (float residue of rate * time).
constexpr double kDoneBytes = 1e-3;
// CM02's sharing penalty of a flow is its route's latency, or 1 (second) where that is zero.
double weight_of(Seconds route) { return 1.0 / (route > 0 ? route : 1.0); }

}  // namespace

StarNetwork::StarNetwork(NetworkLinks links) : links_(std::move(links)) {
  for (const NodeLinks& l : links_.nodes)
    RV_CHECK(l.up > 0 && l.down > 0 && l.latency >= 0 && l.latency_factor > 0,
             "star network: links need positive rates");
  RV_CHECK(links_.region.size() == links_.nodes.size() &&
               links_.between.size() == static_cast<size_t>(links_.regions) * links_.regions,
           "star network: a region per node and a link per pair of regions");
  for (int k = 0; k < static_cast<int>(links_.between.size()); ++k)
    RV_CHECK(k % (links_.regions + 1) == 0 || links_.between[static_cast<size_t>(k)].bandwidth > 0,
             "star network: region links need positive rates");
}

void StarNetwork::send(int src, int dst, Bytes bytes, uint64_t token, Seconds now) {
  const int n = links_.size();
  RV_CHECK(src >= 0 && src < n && dst >= 0 && dst < n && src != dst, "star network: bad route");
  RV_CHECK(now >= now_, "star network: a send in the past");
  RV_CHECK(tokens_.insert(token).second, "star network: a token in use");
  progress_to(now);
  Pair& p = pairs_[{src, dst}];
  if (p.queue.empty()) {
    p.src = src;
    p.dst = dst;
    p.inter = links_.inter(src, dst);
    p.weight = weight_of(route(src, dst));
    p.cap = links_.rate_cap(src, dst);
  }
  Flow f;
  f.token = token;
  f.left = static_cast<double>(std::max<Bytes>(bytes, 1));
  f.starts = now + delay(src, dst);
  auto pacing = pacing_.find({src, dst});
  if (pacing == pacing_.end())
    pacing = pacing_.emplace(std::pair{src, dst}, links_.pacing(src, dst)).first;
  f.floor = pacing->second.hand_over(now, static_cast<double>(bytes));
  p.queue.push_back(f);
  solve();
}

// Weighted max-min fairness by progressive filling: raise a common level; a flowing message's rate
// is level * its pair's weight; the link whose capacity the level fills first, or the flow whose
// cap (TCP's window over its round trip) it reaches first, fixes those flows' rates; repeat with
// what the others leave. (SimGrid's solver treats a flow's rate bound the same way.)
void StarNetwork::solve() {
  const size_t n = links_.nodes.size();
  // [0, n): uplinks; [n, 2n): downlinks; [2n, 2n + regions^2): the links between regions.
  std::vector<double> cap(2 * n + links_.between.size());
  for (size_t i = 0; i < n; ++i) {
    cap[i] = links_.nodes[i].up;
    cap[n + i] = links_.nodes[i].down;
  }
  for (size_t k = 0; k < links_.between.size(); ++k) cap[2 * n + k] = links_.between[k].bandwidth;
  const size_t total = cap.size();
  // The links a pair's flow crosses: its sender's uplink, the region link (if any), its
  // receiver's downlink.
  auto region_link = [n](const Pair* p) {
    return p->inter < 0 ? SIZE_MAX : 2 * n + static_cast<size_t>(p->inter);
  };
  std::vector<Pair*> open;
  for (auto& [key, p] : pairs_) {
    for (Flow& f : p.queue) f.rate = 0;
    if (p.flowing(now_)) open.push_back(&p);
  }
  while (!open.empty()) {
    std::vector<double> weight(total, 0.0);
    for (const Pair* p : open) {
      weight[p->src] += p->weight;
      weight[n + p->dst] += p->weight;
      if (p->inter >= 0) weight[region_link(p)] += p->weight;
    }
    double level = kNever;
    for (size_t l = 0; l < total; ++l)
      if (weight[l] > 0) level = std::min(level, std::max(0.0, cap[l]) / weight[l]);
    for (const Pair* p : open) level = std::min(level, p->cap / p->weight);
    std::vector<char> full(total, 0);
    for (size_t l = 0; l < total; ++l)
      full[l] = weight[l] > 0 && std::max(0.0, cap[l]) / weight[l] <= level * (1 + 1e-12);
    std::vector<Pair*> rest;
    for (Pair* p : open) {
      const bool capped = p->cap / p->weight <= level * (1 + 1e-12);
      if (!capped && !full[p->src] && !full[n + p->dst] &&
          (p->inter < 0 || !full[region_link(p)])) {
        rest.push_back(p);
        continue;
      }
      Flow& f = p->queue.front();
      f.rate = std::min(level * p->weight, p->cap);
      cap[p->src] -= f.rate;
      cap[n + p->dst] -= f.rate;
      if (p->inter >= 0) cap[region_link(p)] -= f.rate;
    }
    open.swap(rest);
  }
}

void StarNetwork::progress_to(Seconds t) {
  for (auto& [key, p] : pairs_)
    if (p.flowing(now_) && p.queue.front().rate > 0)
      p.queue.front().left -= p.queue.front().rate * (t - now_);
  now_ = std::max(now_, t);
}

Seconds StarNetwork::next_event() const {
  Seconds t = kNever;
  for (const auto& [key, p] : pairs_) {
    if (p.queue.empty()) continue;
    const Flow& f = p.queue.front();
    if (f.starts > now_)
      t = std::min(t, f.starts);
    else if (f.rate > 0)
      t = std::min(t, now_ + std::max(0.0, f.left) / f.rate);
  }
  for (const auto& [key, held] : held_) t = std::min(t, std::max(now_, held.front().floor));
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
    // A message through is delivered; the next of its pair starts its bytes now (or when its own
    // latency has passed, if later).
    bool any = false;
    // Held messages whose floor has come, each connection's in order.
    for (auto it = held_.begin(); it != held_.end();) {
      std::deque<Flow>& held = it->second;
      while (!held.empty() && held.front().floor <= now_) {
        deliver(held.front(), it->first.first, it->first.second, out);
        held.pop_front();
        any = true;
      }
      it = held.empty() ? held_.erase(it) : std::next(it);
    }
    for (auto it = pairs_.begin(); it != pairs_.end();) {
      Pair& p = it->second;
      const Flow& f = p.queue.front();
      if (p.flowing(now_) && f.rate > 0 &&
          (f.left <= kDoneBytes || now_ + f.left / f.rate <= now_)) {
        // Through: delivered, or held by its floor behind any held before it.
        const auto held = held_.find({p.src, p.dst});
        if (held == held_.end() && f.floor <= now_)
          deliver(f, p.src, p.dst, out);
        else {
          held_[{p.src, p.dst}].push_back(f);
          ++held_messages_;
        }
        p.queue.pop_front();
        if (!p.queue.empty()) p.queue.front().starts = std::max(p.queue.front().starts, now_);
        any = true;
      }
      it = p.queue.empty() ? pairs_.erase(it) : std::next(it);
    }
    if (!any && t > now) break;
    solve();
  }
  if (now != kNever) progress_to(now);
  return out;
}

void StarNetwork::deliver(const Flow& f, int src, int dst, std::vector<Delivery>& out) {
  out.push_back({f.token, src, dst, now_});
  tokens_.erase(f.token);
  pacing_.at({src, dst}).arrived(now_);
}

std::map<uint64_t, double> StarNetwork::rates() const {
  std::map<uint64_t, double> r;
  for (const auto& [key, p] : pairs_)
    for (const Flow& f : p.queue) r[f.token] = f.rate;
  return r;
}

}  // namespace rv
