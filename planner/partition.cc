#include "planner/partition.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

namespace rv {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// Cost of stage s of `order` holding [l, r): its own compute and links, and the flows to its
// successor (activations forward, gradients back) capped by their paths and held by their warm
// floors, as CostModel::cluster_period charges them.
double stage_cost_in(const CostModel& cost, const std::vector<int>& order, int s, int l, int r) {
  double t = cost.stage_time(order[s], l, r);
  const int k = static_cast<int>(order.size());
  if (s + 1 < k) {
    const double a = cost.boundary_bytes(r);
    const int u = order[s], v = order[s + 1];
    const int64_t together = cost.in_flight(k);
    t = std::max({t, cost.flow_time(u, v, a, together), cost.flow_time(v, u, a, together)});
  }
  return t;
}

// The largest stage cost of a cut pipeline.
double bottleneck_of(const CostModel& cost, const std::vector<int>& order,
                     const std::vector<int>& cuts) {
  double b = 0;
  for (int s = 0; s < static_cast<int>(order.size()); ++s)
    b = std::max(b, stage_cost_in(cost, order, s, cuts[s], cuts[s + 1]));
  return b;
}

std::vector<int> boundaries(const std::vector<char>& cuttable) {
  std::vector<int> p;
  for (int b = 0; b < static_cast<int>(cuttable.size()); ++b)
    if (cuttable[b]) p.push_back(b);
  return p;
}

std::optional<Partition> exact(const CostModel& cost, const std::vector<int>& order,
                               const std::vector<int>& pos) {
  const int k = static_cast<int>(order.size());
  const int n = static_cast<int>(pos.size());
  const int64_t f = cost.in_flight(k);
  // dp[s][j]: the best bottleneck of stages 0..s-1 covering [0, pos[j]).
  std::vector<std::vector<double>> dp(k + 1, std::vector<double>(n, kInf));
  std::vector<std::vector<int>> from(k + 1, std::vector<int>(n, -1));
  dp[0][0] = 0;
  for (int s = 0; s < k; ++s) {
    for (int i = s; i < n; ++i) {
      if (dp[s][i] == kInf) continue;
      // Leave at least one boundary step for each remaining stage.
      for (int j = i + 1; j <= n - (k - s); ++j) {
        if (!cost.fits(order[s], pos[i], pos[j], f)) break;  // memory only grows with the range
        const double c = std::max(dp[s][i], stage_cost_in(cost, order, s, pos[i], pos[j]));
        if (c < dp[s + 1][j]) {
          dp[s + 1][j] = c;
          from[s + 1][j] = i;
        }
      }
    }
  }
  if (dp[k][n - 1] == kInf) return std::nullopt;
  Partition p;
  p.order = order;
  p.bottleneck = dp[k][n - 1];
  p.cuts.assign(k + 1, 0);
  for (int s = k, j = n - 1; s > 0; --s) {
    p.cuts[s] = pos[j];
    j = from[s][j];
  }
  return p;
}

// Greedy check for a bound t: each stage takes the furthest boundary that keeps it within t and
// its memory, leaving one step for every remaining stage.
std::optional<std::vector<int>> greedy(const CostModel& cost, const std::vector<int>& order,
                                       const std::vector<int>& pos, double t) {
  const int k = static_cast<int>(order.size());
  const int n = static_cast<int>(pos.size());
  const int64_t f = cost.in_flight(k);
  std::vector<int> cuts{pos[0]};
  int i = 0;
  for (int s = 0; s < k; ++s) {
    int best = -1;
    const int last = s == k - 1 ? n - 1 : n - (k - s);
    for (int j = i + 1; j <= last; ++j) {
      if (!cost.fits(order[s], pos[i], pos[j], f)) break;
      if (stage_cost_in(cost, order, s, pos[i], pos[j]) <= t) best = j;
    }
    if (best < 0 || (s == k - 1 && best != n - 1)) return std::nullopt;
    cuts.push_back(pos[best]);
    i = best;
  }
  return cuts;
}

// The cut minimises the bottleneck; the period (mean-value analysis) also counts the round trip,
// which another cut of about the same bottleneck may shorten. Moves one cut at a time by one or
// two boundaries while that shortens the period (small pipelines only: each move is an analysis).
void polish(const CostModel& cost, const std::vector<int>& pos, Partition& p) {
  const int k = static_cast<int>(p.order.size());
  if (k < 2 || k > 16) return;
  const int64_t f = cost.in_flight(k);
  auto index_of = [&](int layer) {
    return static_cast<int>(std::lower_bound(pos.begin(), pos.end(), layer) - pos.begin());
  };
  for (int round = 0; round < 8; ++round) {
    bool improved = false;
    for (int c = 1; c < k; ++c)
      for (int step : {-2, -1, 1, 2}) {
        const int j = index_of(p.cuts[c]) + step;
        if (j <= index_of(p.cuts[c - 1]) || j >= index_of(p.cuts[c + 1])) continue;
        std::vector<int> cuts = p.cuts;
        cuts[c] = pos[j];
        if (!cost.fits(p.order[c - 1], cuts[c - 1], cuts[c], f) ||
            !cost.fits(p.order[c], cuts[c], cuts[c + 1], f))
          continue;
        const double period = cost.cluster_period(p.order, cuts);
        if (period < p.period * (1 - 1e-12)) {
          p.cuts = cuts;
          p.period = period;
          improved = true;
        }
      }
    if (!improved) break;
  }
  p.bottleneck = bottleneck_of(cost, p.order, p.cuts);
}

}  // namespace

std::optional<Partition> best_partition(const CostModel& cost, const std::vector<int>& order,
                                        const std::vector<char>& cuttable, double exact_limit) {
  const std::vector<int> pos = boundaries(cuttable);
  const int k = static_cast<int>(order.size());
  if (k == 0 || k > static_cast<int>(pos.size()) - 1) return std::nullopt;
  std::optional<Partition> p;
  if (static_cast<double>(k) * pos.size() * pos.size() <= exact_limit) {
    p = exact(cost, order, pos);
  } else {
    // Bisection on the bottleneck between 0 and the cost of the whole model on the slowest node.
    double hi = 0;
    for (int s = 0; s < k; ++s) hi = std::max(hi, stage_cost_in(cost, order, s, 0, cost.layers()));
    hi = hi * 2 + 1;
    std::optional<std::vector<int>> best = greedy(cost, order, pos, hi);
    if (!best) return std::nullopt;
    double lo = 0;
    for (int it = 0; it < 60 && hi - lo > 1e-9 * hi; ++it) {
      const double mid = 0.5 * (lo + hi);
      if (auto c = greedy(cost, order, pos, mid)) {
        hi = mid;
        best = c;
      } else {
        lo = mid;
      }
    }
    p = Partition{order, *best, 0, 0};  // polish() sets the bottleneck of its final cuts
  }
  if (!p) return p;
  p->period = cost.cluster_period(p->order, p->cuts);
  polish(cost, pos, *p);
  return p;
}

void merge_stateless_stages(const CostModel& cost, Partition& p) {
  const ModelDesc& model = cost.model();
  if (p.period <= 0) p.period = cost.cluster_period(p.order, p.cuts);
  for (bool merged = true; merged && p.order.size() > 1;) {
    merged = false;
    for (size_t s = 0; s < p.order.size() && !merged; ++s) {
      if (model.state_offset(p.cuts[s + 1]) != model.state_offset(p.cuts[s])) continue;
      // Into the stage before or the one after, whichever gives the shorter period.
      std::optional<Partition> best;
      for (const bool into_next : {false, true}) {
        if (into_next ? s + 1 >= p.order.size() : s == 0) continue;
        Partition q = p;
        q.order.erase(q.order.begin() + static_cast<std::ptrdiff_t>(s));
        q.cuts.erase(q.cuts.begin() + static_cast<std::ptrdiff_t>(into_next ? s + 1 : s));
        const int k = static_cast<int>(q.order.size());
        const int64_t f = cost.in_flight(k);
        bool fits = true;  // fewer stages keep fewer micro-batches in flight: every stage checked
        for (int u = 0; u < k && fits; ++u)
          fits = cost.fits(q.order[u], q.cuts[u], q.cuts[u + 1], f);
        if (!fits) continue;
        q.period = cost.cluster_period(q.order, q.cuts);
        if (q.period > p.period * (1 + 1e-12) || (best && q.period >= best->period)) continue;
        q.bottleneck = bottleneck_of(cost, q.order, q.cuts);
        best = q;
      }
      if (best) {
        p = *best;
        merged = true;
      }
    }
  }
}

std::optional<Partition> best_pipeline(const CostModel& cost, const std::vector<int>& nodes,
                                       const std::vector<char>& cuttable) {
  std::vector<std::vector<int>> orders{nodes};
  auto by = [&](auto key) {
    std::vector<int> o = nodes;
    std::stable_sort(o.begin(), o.end(), [&](int a, int b) { return key(a) > key(b); });
    orders.push_back(o);
    std::reverse(o.begin(), o.end());
    orders.push_back(o);
  };
  by([&](int n) { return cost.node(n).speed; });
  by([&](int n) { return cost.node(n).ram; });
  by([&](int n) { return std::min(cost.node(n).up, cost.node(n).down); });
  std::optional<Partition> best;
  auto consider = [&](const std::vector<int>& o) {
    auto p = best_partition(cost, o, cuttable);
    if (p && (!best || p->period < best->period)) best = p;
    return p;
  };
  if (nodes.size() <= 4) {
    // Few enough for every order (at most 24).
    std::vector<int> o = nodes;
    std::sort(o.begin(), o.end());
    do consider(o);
    while (std::next_permutation(o.begin(), o.end()));
    if (best) merge_stateless_stages(cost, *best);
    return best;
  }
  for (const auto& o : orders) consider(o);
  // Neighbour swaps on small clusters, while they help.
  if (best && nodes.size() <= 10) {
    for (int pass = 0; pass < 3; ++pass) {
      bool improved = false;
      for (size_t i = 0; i + 1 < best->order.size(); ++i) {
        std::vector<int> o = best->order;
        std::swap(o[i], o[i + 1]);
        const double before = best->period;
        consider(o);
        improved |= best->period < before;
      }
      if (!improved) break;
    }
  }
  if (best) merge_stateless_stages(cost, *best);
  return best;
}

}  // namespace rv

namespace rv {

std::optional<Partition> PipelineMemo::best(const std::vector<int>& nodes) {
  // The list best_pipeline() reads places from: up to 4 nodes, id order; else the order given.
  std::vector<int> ref = nodes;
  if (ref.size() <= 4) std::sort(ref.begin(), ref.end());
  std::string key(ref.size() * sizeof(int32_t) + 1, '\0');
  key[0] = nodes.size() <= 4 ? 'S' : 'G';
  for (size_t i = 0; i < ref.size(); ++i) {
    const int32_t g = cost_.node(ref[i]).group;
    std::memcpy(key.data() + 1 + i * sizeof g, &g, sizeof g);
  }
  auto it = memo_.find(key);
  if (it == memo_.end()) {
    ++misses_;
    std::optional<Partition> p = best_pipeline(cost_, nodes, cuttable_);
    if (p) {
      for (int& n : p->order)
        n = static_cast<int>(std::find(ref.begin(), ref.end(), n) - ref.begin());
    }
    if (memo_.size() >= kMaxEntries) memo_.clear();
    it = memo_.emplace(std::move(key), std::move(p)).first;
  } else {
    ++hits_;
  }
  std::optional<Partition> out = it->second;
  if (out) {
    for (int& n : out->order) n = ref[static_cast<size_t>(n)];
  }
  return out;
}

}  // namespace rv
