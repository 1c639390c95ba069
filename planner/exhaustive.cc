// exhaustive: the optimum of the search space that ga explores, for pools of at most 12 nodes.
//
// Search space: every way to split the pool into clusters (set partitions; nodes may stay idle;
// exactly planner.clusters clusters when the scenario fixes it), every node of a cluster a stage,
// every order of a cluster's nodes and every contiguous cut of the layers at cuttable boundaries,
// each stage within its node's memory (CostModel::fits, in-flight count of the cluster's size).
// Objective: score_clusters(), the predicted samples per second that ga maximises.
//
// 1. Pipelines of every subset of the pool: a dynamic programme over states (nodes used, last
//    node u, boundary j reached). A cluster's period (CostModel::cluster_period) is not its
//    bottleneck alone: it is the largest of the bottleneck b (largest stage cost with the flows to
//    the successor, as partition.cc's stage_cost_in) and a term set by the micro-batches in
//    flight, which grows with a sum T along the pipeline:
//      gpipe    period = (T + (m - 1) b) / m, T the round trip (compute, latencies, flows);
//      ravnest  mean-value analysis of the closed network of every node's compute, uplink and
//               downlink with max_in_flight micro-batches, T = total service demand + delay. Its
//               recursion never gives a station less than its demand, so the period is at least
//               max(b, T / in_flight) (a lower bound, tight far from the knee), but it also
//               depends on how the demand is spread over the stations.
//    The score also depends on each pipeline through the averaging: every node sends and
//    receives 4 * (its state) / C bytes a round, so a cluster's share s = max over its stages of
//    4 * state / (bw * min(up, down)) sets the round, and its owners' latencies set the hops.
//    b and s are maxima and T a sum, all growing along a path: every state keeps the Pareto front
//    of (b, T, s), since a partial pipeline worse in all three never completes to a better one.
//    Every complete pipeline on a final front is rebuilt and timed by cluster_period(); those
//    that no other beats in period, share and owners' latencies and link times (at every state
//    position) are the subset's candidates. For gpipe, minimising the period alone is exact (a
//    nondecreasing function of (b, T), summed in cluster_period's own order and checked); for
//    ravnest, the queueing term is not captured by (b, T), which makes the candidates a (tested)
//    heuristic there, with min max(b, T / in_flight) a proven lower bound. When the in-flight count
//    depends on the number of stages (max_in_flight = 0) so does memory: the programme runs once
//    per cluster size k, over subsets of at most k nodes.
// 2. Set partitions: restricted-growth enumeration (the lowest undecided node either starts a
//    cluster, chosen among the subsets whose lowest node it is, or stays idle), for every number
//    of clusters C, every combination of the clusters' candidates (and, per cluster,
//    best_pipeline()'s pipeline: what ga decodes the same members to). Bound (PartitionSearch):
//    score <= C * batch / (largest period + lower bound of the averaging / average_every), from
//    bounds valid for any pipeline of a subset; a branch that cannot beat the incumbent is cut,
//    and each lowest node's subsets are scanned by period so the scan stops at the first too
//    slow. The incumbent starts as greedy's plan. Only what passes the bound is scored.
//
// So the result is never below any plan ga (or greedy) can reach: their spaces are contained and
// the bound only cuts what cannot win. Against brute force over every partition, order and cut
// (tests/test_planner_methods.cc: 800 random pools of 5 nodes and 8 layers, x 3 settings: in
// flight = stages, fixed, and gpipe) it found the optimum every time. What it does not search:
// the order of the clusters in the rings (clusters are listed by lowest node, as ga lists them),
// and, for ravnest, a pipeline off the (b, T, s) front whose queueing would make it faster.
// The programme mirrors how cost.cc composes a period and an averaging time; if those change, the
// result stays a valid, scored plan but may lose optimality (the brute-force test will say).
//
// Complexity, N nodes, B cut points (cuttable boundaries, both ends included), F the size of a
// Pareto front (a few entries in practice):
//   pipelines   O(sum_k sum_{p<k} C(N,p) p (N-p) B^2 F^2) time with per-size runs (one run,
//               O(2^N N^2 B^2 F^2), when the in-flight count is fixed); O(2^N N B F) memory.
//               Models too deep for this (about 70 cut points at 12 nodes) are refused.
//   partitions  at most Bell(N+1) leaves (the idle block) times the candidate combinations; in
//               practice the bound leaves a few hundred to score.
// 12 nodes and a 13-layer model: about 1 s on one core. Deterministic: no randomness, fixed
// iteration orders, ties keep the first found.
#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <optional>
#include <vector>

#include "core/error.h"
#include "core/model/cost_model.h"
#include "planner/layer_graph.h"
#include "planner/planner.h"

namespace rv {
namespace {

constexpr int kMaxNodes = 12;
constexpr double kInf = std::numeric_limits<double>::infinity();
// Refuse models so deep that the pipeline programme would run for hours (transitions estimated).
constexpr double kMaxTransitions = 2e9;

int popcount(uint32_t m) { return __builtin_popcount(m); }

// A partial pipeline: its bottleneck b, additive part t and largest averaging share s so far
// (all three only grow along a path), and where it came from.
struct Entry {
  double b;
  double t;
  double s;
  int32_t prev_state;  // -1 for a first stage
  int32_t prev_entry;
};

bool dominates(const Entry& x, const Entry& e) { return x.b <= e.b && x.t <= e.t && x.s <= e.s; }

// A complete pipeline and what the averaging sees of it: per stage that holds state (parameters
// or buffers), the state range it owns and its node.
struct Candidate {
  Partition p;
  double share = 0;  // max over owners of 4 * state / (bw * min(up, down)): C x the averaging round
  double low = kInf, high = 0;                  // least and largest latency of its owners
  std::vector<std::pair<int64_t, int>> owners;  // (state end, node) by state, owners only
  CostModel::Fill fill;  // how it fills after a drain (CostModel::drained_time)
};

class Shares {
 public:
  Shares(const CostModel& cost, double bandwidth_factor) : cost_(cost), bw_(bandwidth_factor) {}
  double link(int v) const { return std::min(cost_.node(v).up, cost_.node(v).down); }
  int64_t state(int l, int r) const {
    const ModelDesc& m = cost_.model();
    return m.state_offset(r) - m.state_offset(l);
  }
  // 4 * state / (bw * link): what this stage's node sends and receives per averaging round, x C.
  double share(int v, int l, int r) const {
    const int64_t st = state(l, r);
    return st > 0 ? 4.0 * static_cast<double>(st) / (bw_ * link(v)) : 0.0;
  }
  Candidate candidate(Partition p) const {
    Candidate c;
    for (size_t s = 0; s < p.order.size(); ++s) {
      if (state(p.cuts[s], p.cuts[s + 1]) <= 0) continue;
      const int v = p.order[s];
      c.share = std::max(c.share, share(v, p.cuts[s], p.cuts[s + 1]));
      c.low = std::min(c.low, cost_.node(v).latency);
      c.high = std::max(c.high, cost_.node(v).latency);
      c.owners.push_back({cost_.model().state_offset(p.cuts[s + 1]), v});
    }
    if (c.owners.empty()) c.low = 0;
    c.fill = cost_.fill(p.order, p.cuts);
    c.p = std::move(p);
    return c;
  }

 private:
  const CostModel& cost_;
  double bw_;
};

// Whether every state position is owned in `a` by a node of latency at most its owner's in `b`,
// and that sends and receives its share of each averaging round no slower (its state over its
// uplink, and over its downlink): then a's ring hops are never longer nor slower than b's,
// whatever the other clusters (the round's chain of hops, CostModel::averaging_time).
bool latencies_dominate(const CostModel& cost, const Candidate& a, const Candidate& b) {
  const ModelDesc& m = cost.model();
  // Seconds per byte of averaged state for the owner k of `c`: its state over its link `rate`.
  auto per_link = [&](const Candidate& c, size_t k, double PoolNode::*rate) {
    const int64_t begin = k == 0 ? m.state_offset(c.p.cuts.front()) : c.owners[k - 1].first;
    return static_cast<double>(c.owners[k].first - begin) / (cost.node(c.owners[k].second).*rate);
  };
  size_t i = 0, j = 0;
  while (i < a.owners.size() && j < b.owners.size()) {
    if (cost.node(a.owners[i].second).latency > cost.node(b.owners[j].second).latency) return false;
    if (per_link(a, i, &PoolNode::up) > per_link(b, j, &PoolNode::up) ||
        per_link(a, i, &PoolNode::down) > per_link(b, j, &PoolNode::down))
      return false;
    if (a.owners[i].first < b.owners[j].first)
      ++i;
    else if (b.owners[j].first < a.owners[i].first)
      ++j;
    else
      ++i, ++j;
  }
  return true;
}

// Where pipelines drain before each exchange, a's micro-batches between two exchanges must also
// take no longer than b's for every exchange length: a round trip and bottleneck no longer, as
// many in flight.
bool candidate_dominates(const CostModel& cost, const Candidate& a, const Candidate& b) {
  const bool fills = !cost.drains(2) || (a.fill.round_trip <= b.fill.round_trip &&
                                         a.fill.bottleneck <= b.fill.bottleneck &&
                                         a.fill.in_flight == b.fill.in_flight);
  return a.p.period <= b.p.period && a.share <= b.share && fills && latencies_dominate(cost, a, b);
}

// Pipelines of every subset of the pool (step 1 of the file comment).
class SubsetPipelines {
 public:
  SubsetPipelines(const Scenario& scenario, const CostModel& cost,
                  const std::vector<char>& cuttable)
      : cost_(cost), nodes_(cost.nodes()), shares_(cost, net_factors(scenario.network).bandwidth) {
    for (int b = 0; b < static_cast<int>(cuttable.size()); ++b)
      if (cuttable[b]) pos_.push_back(b);
    n_ = static_cast<int>(pos_.size());
    kmax_ = std::min(nodes_, n_ - 1);
    // The training settings CostModel charges (effective_training: stashing forced where the
    // algorithm keeps its graphs).
    training_ = cost.training();
    flush_ = cost.algorithm().traits.schedule == Schedule::kFlush;
    bandwidth_factor_ = net_factors(scenario.network).bandwidth;
    tables();
  }

  // Estimated number of DP transitions (per-size runs when the in-flight count varies).
  double transitions() const {
    double t = 0;
    const bool ps = per_size();
    for (int k = ps ? 1 : kmax_; k <= kmax_; ++k)
      for (int p = 1; p < k; ++p) t += binom(nodes_, p) * p * (nodes_ - p) * 0.5 * n_ * n_;
    return t;
  }

  // Candidates of every subset (see the file comment), fastest first; empty where no order and
  // cut fit the nodes' memory.
  std::vector<std::vector<Candidate>> run() {
    candidates_.assign(size_t{1} << nodes_, {});
    lower_.assign(candidates_.size(), kInf);
    fronts_.assign((size_t{1} << nodes_) * nodes_ * n_, {});
    if (kmax_ >= 1) {
      if (per_size()) {
        for (int k = 1; k <= kmax_; ++k) {
          hops(cost_.in_flight(k));
          pass(k, k);
        }
      } else {
        hops(cost_.in_flight(1));
        pass(1, kmax_);
      }
    }
    fronts_.clear();
    fronts_.shrink_to_fit();
    for (auto& list : candidates_)
      std::stable_sort(list.begin(), list.end(), [](const Candidate& a, const Candidate& b) {
        return a.p.period < b.p.period;
      });
    return std::move(candidates_);
  }
  // lower_bounds()[mask]: no pipeline of `mask` has a smaller period.
  const std::vector<double>& lower_bounds() const { return lower_; }

 private:
  static double binom(int n, int k) {
    double r = 1;
    for (int i = 1; i <= k; ++i) r = r * (n - k + i) / i;
    return r;
  }

  bool per_size() const {
    for (int k = 2; k <= kmax_; ++k)
      if (cost_.in_flight(k) != cost_.in_flight(1)) return true;
    return false;
  }

  int at(int v, int i, int j) const { return (v * n_ + i) * n_ + j; }
  int pair(int u, int v, int j) const { return (u * nodes_ + v) * n_ + j; }
  int state(uint32_t mask, int u, int j) const {
    return (static_cast<int>(mask) * nodes_ + u) * n_ + j;
  }

  // Per stage: its cost, its additive part T (GPipe: the round trip exactly as cluster_period()
  // sums it; otherwise: the mean-value analysis' service demand of its compute, uplink and
  // downlink), its averaging share. (Per hop, hops().)
  void tables() {
    const double bw = bandwidth_factor_;
    stage_.assign(static_cast<size_t>(nodes_) * n_ * n_, kInf);
    add_.assign(stage_.size(), kInf);
    share_.assign(stage_.size(), 0.0);
    for (int v = 0; v < nodes_; ++v)
      for (int i = 0; i < n_; ++i)
        for (int j = i + 1; j < n_; ++j) {
          stage_[at(v, i, j)] = cost_.stage_time(v, pos_[i], pos_[j]);
          share_[at(v, i, j)] = shares_.share(v, pos_[i], pos_[j]);
          const PoolNode& p = cost_.node(v);
          if (flush_) {
            add_[at(v, i, j)] = cost_.pass_time(v, pos_[i], pos_[j]);
          } else {
            const double bytes = cost_.boundary_bytes(pos_[i]) + cost_.boundary_bytes(pos_[j]);
            add_[at(v, i, j)] = cost_.compute_time(v, pos_[i], pos_[j]) + bytes / (p.up * bw) +
                                bytes / (p.down * bw);
          }
        }
  }

  // Per hop, with `together` micro-batches in flight (their messages share the warm floor,
  // CostModel::warm_floor): the flows' bottleneck and additive parts, as cluster_period() charges
  // them.
  void hops(int64_t together) {
    const double bw = bandwidth_factor_;
    flow_.assign(static_cast<size_t>(nodes_) * nodes_ * n_, 0.0);
    hop1_.assign(flow_.size(), 0.0);
    hop2_.assign(flow_.size(), 0.0);
    for (int u = 0; u < nodes_; ++u)
      for (int v = 0; v < nodes_; ++v) {
        if (u == v) continue;
        for (int j = 1; j + 1 < n_; ++j) {
          const double a = cost_.boundary_bytes(pos_[j]);
          const double fwd = cost_.flow_time(u, v, a, together);
          const double bwd = cost_.flow_time(v, u, a, together);
          flow_[pair(u, v, j)] = std::max(fwd, bwd);
          if (flush_) {
            hop1_[pair(u, v, j)] = cost_.path_latency(u, v) + fwd;
            hop2_[pair(u, v, j)] = cost_.path_latency(v, u) + bwd;
          } else {
            const double lf = a / (std::min(cost_.node(u).up, cost_.node(v).down) * bw);
            const double lb = a / (std::min(cost_.node(v).up, cost_.node(u).down) * bw);
            hop1_[pair(u, v, j)] = cost_.path_latency(u, v) + (fwd - lf);
            hop2_[pair(u, v, j)] = cost_.path_latency(v, u) + (bwd - lb);
          }
        }
      }
  }

  // GPipe: exactly cluster_period(); otherwise a lower bound of it (see the file comment).
  double value(double b, double t, int k) const {
    if (flush_) {
      const double m = static_cast<double>(training_.micro_batches);
      return (t + (m - 1) * b) / m;
    }
    return std::max(b, t / static_cast<double>(cost_.in_flight(k)));
  }

  // Adds `e` to the Pareto front of `sid` unless an entry there is at least as good in all.
  void insert(int sid, const Entry& e) {
    std::vector<Entry>& f = fronts_[sid];
    for (const Entry& x : f)
      if (dominates(x, e)) return;
    f.erase(std::remove_if(f.begin(), f.end(), [&](const Entry& x) { return dominates(e, x); }),
            f.end());
    f.push_back(e);
  }

  // Pipelines of kmin..kmax stages (one in-flight count for all of them).
  void pass(int kmin, int kmax) {
    const int64_t f = cost_.in_flight(kmax);
    std::vector<char> fit(stage_.size(), 0);
    for (int v = 0; v < nodes_; ++v)
      for (int i = 0; i < n_; ++i)
        for (int j = i + 1; j < n_; ++j) fit[at(v, i, j)] = cost_.fits(v, pos_[i], pos_[j], f);
    for (auto& fr : fronts_) fr.clear();
    const int last = n_ - 1;
    // Boundaries a pipeline of p1 stages may have reached: room must remain for kmin - p1 more
    // stages, and a pipeline that can grow no more must have reached the end.
    auto range = [&](int p1, int from) {
      const int hi = last - std::max(0, kmin - p1);
      const int lo = p1 == kmax ? last : from + 1;
      return std::make_pair(lo, hi);
    };
    {
      auto [lo, hi] = range(1, 0);
      for (int v = 0; v < nodes_; ++v)
        for (int j = lo; j <= hi; ++j)
          if (fit[at(v, 0, j)])
            insert(state(1u << v, v, j),
                   {stage_[at(v, 0, j)], add_[at(v, 0, j)], share_[at(v, 0, j)], -1, -1});
    }
    const uint32_t full = (1u << nodes_) - 1;
    for (uint32_t mask = 1; mask <= full; ++mask) {
      const int p = popcount(mask);
      if (p > kmax) continue;
      for (int u = 0; u < nodes_; ++u) {
        if (!(mask >> u & 1)) continue;
        for (int j = 1; j <= last; ++j) {
          const int sid = state(mask, u, j);
          const std::vector<Entry>& fr = fronts_[sid];
          if (fr.empty()) continue;
          if (j == last) {
            if (p >= kmin) finish(mask, sid);
            continue;
          }
          if (p >= kmax) continue;
          auto [lo, hi] = range(p + 1, j);
          for (int v = 0; v < nodes_; ++v) {
            if (mask >> v & 1) continue;
            const double flow = flow_[pair(u, v, j)], h1 = hop1_[pair(u, v, j)],
                         h2 = hop2_[pair(u, v, j)];
            const uint32_t next = mask | (1u << v);
            for (int j2 = lo; j2 <= hi; ++j2) {
              if (!fit[at(v, j, j2)]) break;  // memory only grows with the range
              const double st = std::max(stage_[at(v, j, j2)], flow);
              const double ad = add_[at(v, j, j2)], sh = share_[at(v, j, j2)];
              const int to = state(next, v, j2);
              // `fr` stays valid: `to` belongs to a larger mask, another vector.
              for (int e = 0; e < static_cast<int>(fr.size()); ++e)
                insert(to, {std::max(fr[e].b, st), ((fr[e].t + h1) + h2) + ad,
                            std::max(fr[e].s, sh), sid, e});
            }
          }
        }
      }
    }
  }

  // Every complete pipeline on a final front is rebuilt and timed by cluster_period(); those
  // that no other beats in period, averaging share and owner latencies are the candidates.
  void finish(uint32_t mask, int sid) {
    const std::vector<Entry>& fr = fronts_[sid];
    const int k = popcount(mask);
    std::vector<Candidate>& list = candidates_[mask];
    for (int e = 0; e < static_cast<int>(fr.size()); ++e) {
      const double v = value(fr[e].b, fr[e].t, k);
      lower_[mask] = std::min(lower_[mask], v);
      Candidate c = shares_.candidate(rebuild(sid, e));
      if (flush_)
        RV_CHECK(std::abs(c.p.period - v) <= 1e-9 * c.p.period,
                 "exhaustive: the pipeline programme disagrees with cluster_period()");
      bool beaten = false;
      for (const Candidate& x : list) beaten = beaten || candidate_dominates(cost_, x, c);
      if (beaten) continue;
      list.erase(
          std::remove_if(list.begin(), list.end(),
                         [&](const Candidate& x) { return candidate_dominates(cost_, c, x); }),
          list.end());
      list.push_back(std::move(c));
    }
  }

  Partition rebuild(int sid, int e) const {
    Partition p;
    std::vector<int> ends;
    p.bottleneck = fronts_[sid][e].b;
    while (sid >= 0) {
      const int j = sid % n_, u = (sid / n_) % nodes_;
      p.order.push_back(u);
      ends.push_back(pos_[j]);
      const Entry& x = fronts_[sid][e];
      sid = x.prev_state;
      e = x.prev_entry;
    }
    std::reverse(p.order.begin(), p.order.end());
    std::reverse(ends.begin(), ends.end());
    p.cuts.push_back(0);
    p.cuts.insert(p.cuts.end(), ends.begin(), ends.end());
    p.period = cost_.cluster_period(p.order, p.cuts);
    return p;
  }

  const CostModel& cost_;
  int nodes_;
  Shares shares_;
  std::vector<int> pos_;  // cuttable boundaries
  int n_ = 0;             // pos_.size()
  int kmax_ = 0;          // most stages a cluster can have
  TrainingSpec training_;
  bool flush_ = false;
  double bandwidth_factor_ = 1.0;  // the network model's, as the cost model applies it
  // [v][i][j]: stage_time, additive part and averaging share of [pos_i, pos_j) on v
  std::vector<double> stage_, add_, share_;
  // [u][v][j]: flows u <-> v at pos_j: the larger, and the additive parts of each direction
  std::vector<double> flow_, hop1_, hop2_;
  std::vector<std::vector<Entry>> fronts_;
  std::vector<std::vector<Candidate>> candidates_;
  std::vector<double> lower_;
};

bool same_pipeline(const Partition& a, const Partition& b) {
  return a.order == b.order && a.cuts == b.cuts;
}

// Step 2 of the file comment. The bound on a partition's score, C clusters:
//   score <= C * batch / (P + max(2 (C - 1) round + hop, 2 (C - 1) 2 f_lat least) / average_every)
// P the largest cluster period, and the averaging time's terms (cost.cc: the busiest link's
// 2 (C - 1) steps and the longest hop once, or a chain of 2 (C - 1) hops, each at least two of
// the pool's least latency) bounded from below:
// each node sends and receives 4 * (its state: parameters and buffers) / C bytes per round, so
//   round = max_c share_c / C,  share_c = max_{n in c} 4 state_n / (bw min(up_n, down_n))
//         >= max_c 4 * state / (C * bw * sum_{n in c} min(up_n, down_n))   (any cut of c),
// and a ring hop joins an owner of one cluster to one of another, so
//   hop >= f_lat * max_c (largest latency of c's owners + least latency of another's).
class PartitionSearch {
 public:
  PartitionSearch(const Scenario& scenario, const CostModel& cost,
                  const std::vector<char>& cuttable, std::vector<std::vector<Candidate>> candidates,
                  const std::vector<double>& lower)
      : cost_(cost),
        cuttable_(cuttable),
        nodes_(cost.nodes()),
        shares_(cost, net_factors(scenario.network).bandwidth),
        candidates_(std::move(candidates)),
        heuristic_(candidates_.size()),
        heuristic_done_(candidates_.size(), 0),
        by_lowest_(nodes_),
        info_(candidates_.size()) {
    const NetFactors f = net_factors(scenario.network);
    latency_factor_ = f.latency;
    // As CostModel charges it (algo/registry.h: micro_batches_per_exchange). This planner lays out
    // pipelines, whose exchange period does not depend on the number of clusters (target-batch
    // algorithms lay out replicas, planned without it).
    RV_CHECK(!cost.target_batch(), "the exhaustive planner cannot plan a target-batch algorithm");
    average_every_ = static_cast<double>(cost.micro_batches_per_exchange(1));
    least_latency_ = kInf;
    for (int v = 0; v < nodes_; ++v)
      least_latency_ = std::min(least_latency_, cost.node(v).latency);
    const ModelDesc& model = cost.model();
    const double state = static_cast<double>(model.state_offset(model.layer_count()));
    for (uint32_t mask = 1; mask < candidates_.size(); ++mask) {
      if (candidates_[mask].empty()) continue;
      by_lowest_[__builtin_ctz(mask)].push_back(mask);
      Info& in = info_[mask];
      double bw = 0;
      in.latency = kInf;
      for (int v = 0; v < nodes_; ++v)
        if (mask >> v & 1) {
          bw += shares_.link(v);
          in.latency = std::min(in.latency, cost.node(v).latency);
        }
      in.period = std::min(lower[mask], candidates_[mask].front().p.period);
      in.share = 4.0 * state / (f.bandwidth * bw);
    }
    for (auto& list : by_lowest_)
      std::stable_sort(list.begin(), list.end(),
                       [&](uint32_t a, uint32_t b) { return info_[a].period < info_[b].period; });
  }

  void incumbent(std::vector<Partition> clusters, double score) {
    best_ = std::move(clusters);
    best_score_ = score;
  }

  // Every partition into exactly `c` clusters (plus idle nodes) that could beat the incumbent.
  void search(int c) {
    target_ = c;
    chosen_.clear();
    recurse((1u << nodes_) - 1, 0, Bound{});
  }

  const std::vector<Partition>& best() const { return best_; }
  double best_score() const { return best_score_; }

 private:
  // Lower bounds valid for every pipeline of a subset.
  struct Info {
    double period = kInf;   // on its period
    double share = 0;       // on its averaging share
    double latency = kInf;  // least latency of its nodes
  };
  // Running maxima over the clusters chosen so far.
  struct Bound {
    double period = 0, share = 0, latency = 0;
    Bound with(double p, double s, double l) const {
      return {std::max(period, p), std::max(share, s), std::max(latency, l)};
    }
  };

  // The score bound for `c` clusters whose running maxima are `b`; the latency of a hop's other
  // end is at least `other`.
  double bound(int c, const Bound& b, double other) const {
    double t = b.period;
    if (c > 1)
      t += std::max(2.0 * (c - 1) * b.share / c + latency_factor_ * (b.latency + other),
                    2.0 * (c - 1) * latency_factor_ * 2 * least_latency_) /
           average_every_;
    return t > 0 ? static_cast<double>(c) * static_cast<double>(cost_.batch()) / t : kInf;
  }
  bool promising(int c, const Bound& b, double other) const {
    return best_.empty() || bound(c, b, other) > best_score_;
  }

  void recurse(uint32_t remaining, int c, const Bound& b) {
    if (c == target_) {
      score();
      return;
    }
    if (popcount(remaining) < target_ - c) return;
    const int x = __builtin_ctz(remaining);
    for (uint32_t mask : by_lowest_[x]) {
      const Info& in = info_[mask];
      // Sorted by period: once the period alone rules a subset out, it rules out the rest.
      if (!promising(target_, b.with(in.period, 0, 0), least_latency_)) break;
      if (mask & ~remaining) continue;
      const Bound next = b.with(in.period, in.share, in.latency);
      if (!promising(target_, next, least_latency_)) continue;
      chosen_.push_back(mask);
      recurse(remaining & ~mask, c + 1, next);
      chosen_.pop_back();
    }
    recurse(remaining & ~(1u << x), c, b);  // x idle
  }

  // The candidates of a subset, and ga's decoding of it (best_pipeline over its members in index
  // order) where that is not among them; cached.
  const std::vector<Candidate>& options(uint32_t mask) {
    if (!heuristic_done_[mask]) {
      heuristic_done_[mask] = 1;
      std::vector<int> members;
      for (int v = 0; v < nodes_; ++v)
        if (mask >> v & 1) members.push_back(v);
      heuristic_[mask] = candidates_[mask];
      if (auto h = best_pipeline(cost_, members, cuttable_)) {
        bool known = false;
        for (const Candidate& c : candidates_[mask]) known = known || same_pipeline(c.p, *h);
        if (!known) heuristic_[mask].push_back(shares_.candidate(*h));
      }
    }
    return heuristic_[mask];
  }

  // Scores every combination of the clusters' candidates whose bound passes.
  void score() {
    const int c = static_cast<int>(chosen_.size());
    std::vector<const std::vector<Candidate>*> opts(c);
    for (int i = 0; i < c; ++i) opts[i] = &options(chosen_[i]);
    std::vector<const Candidate*> picked(c);
    std::vector<Partition> clusters(c);
    std::function<void(int, const Bound&)> walk = [&](int i, const Bound& partial) {
      if (i == c) {
        // The hop bound with the owners' latencies of the picked pipelines.
        Bound b = partial;
        if (c > 1)
          for (int a = 0; a < c; ++a) {
            double other = kInf;
            for (int z = 0; z < c; ++z)
              if (z != a) other = std::min(other, picked[z]->low);
            b = b.with(0, 0, picked[a]->high + other);
          }
        if (!promising(c, b, 0.0)) return;
        for (int a = 0; a < c; ++a) clusters[a] = picked[a]->p;
        const double s = score_clusters(cost_, clusters);
        if (best_.empty() || s > best_score_) {
          best_score_ = s;
          best_ = clusters;
        }
        return;
      }
      for (const Candidate& o : *opts[i]) {
        const Bound next = partial.with(o.p.period, o.share, 0);
        if (!promising(c, next, 0.0)) continue;
        picked[i] = &o;
        walk(i + 1, next);
      }
    };
    walk(0, Bound{});
  }

  const CostModel& cost_;
  const std::vector<char>& cuttable_;
  int nodes_;
  Shares shares_;
  std::vector<std::vector<Candidate>> candidates_;
  std::vector<std::vector<Candidate>> heuristic_;  // candidates_ plus best_pipeline's
  std::vector<char> heuristic_done_;
  std::vector<std::vector<uint32_t>> by_lowest_;  // feasible subsets by lowest node, by period
  std::vector<Info> info_;
  double latency_factor_ = 1, average_every_ = 1, least_latency_ = 0;
  int target_ = 1;
  std::vector<uint32_t> chosen_;
  std::vector<Partition> best_;
  double best_score_ = 0;
};

}  // namespace

Plan plan_exhaustive(const Scenario& scenario, const ModelDesc& model) {
  CostModel cost(scenario, model);
  const int n = cost.nodes();
  if (n > kMaxNodes)
    throw ScenarioError(scenario.source, "planner.method",
                        "exhaustive is limited to " + std::to_string(kMaxNodes) +
                            " nodes (its search grows like " +
                            "the Bell numbers) but the pool has " + std::to_string(n) +
                            "; use method = \"ga\", which searches the same space");
  check_pool(scenario, model, cost);
  LayerGraph graph(model);
  SubsetPipelines pipelines(scenario, cost, graph.cuttable());
  if (pipelines.transitions() > kMaxTransitions)
    throw ScenarioError(
        scenario.source, "planner.method",
        "exhaustive: " + std::to_string(n) + " nodes and " + std::to_string(model.layer_count()) +
            " layers are too many cut points to search exactly; use method = \"ga\"");
  auto candidates = pipelines.run();
  PartitionSearch search(scenario, cost, graph.cuttable(), std::move(candidates),
                         pipelines.lower_bounds());

  // Incumbent: greedy's plan (it lies in the search space), so the bound cuts from the start.
  const std::vector<int> by_speed = nodes_by_speed(cost);
  PipelineMemo memo(cost, graph.cuttable());
  for (int c : cluster_counts(scenario, n, n))
    if (auto clusters = snake_clusters(memo, by_speed, c)) {
      const double s = score_clusters(cost, *clusters);
      if (search.best().empty() || s > search.best_score())
        search.incumbent(std::move(*clusters), s);
    }

  if (scenario.planner.clusters > 0) {
    search.search(scenario.planner.clusters);
  } else {
    for (int c = 1; c <= n; ++c) search.search(c);
  }
  if (search.best().empty() || search.best_score() <= 0)
    throw ScenarioError(
        scenario.source, scenario.planner.clusters > 0 ? "planner.clusters" : "devices",
        "exhaustive: no assignment of the nodes to " +
            (scenario.planner.clusters > 0 ? std::to_string(scenario.planner.clusters) + " clusters"
                                           : std::string("clusters")) +
            " gives every cluster enough RAM for the model" + stashing_hint(cost));
  // Its own search enumerates every cut, a stage without state alone on a node included.
  std::vector<Partition> best = search.best();
  for (Partition& p : best) merge_stateless_stages(cost, p);
  return assemble_plan("exhaustive", cost, best);
}

}  // namespace rv
