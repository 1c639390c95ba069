// ga: our genetic algorithm. An individual assigns every node to a cluster or leaves it idle;
// its fitness is the predicted global throughput of the plan it decodes to (each cluster's
// pipeline order and cut by best_pipeline(), the slowest cluster gating the averaging); a cluster
// that cannot hold the model makes the individual infeasible. The population starts from the
// greedy solutions for every number of clusters; offspring come from a grouping crossover (whole
// clusters inherited from either parent) and mutations aimed at the bottleneck (move or swap a
// node between the slowest and fastest clusters, split, merge, idle a straggler). Elitist, seeded,
// deterministic; clusters are evaluated once and cached by their members. Where the pool spans
// regions, the dealing of each region alone and their unions seed it too (region_seeds). The
// evaluations the generations leave go to an iterated local search from the best and from the
// best seeds (Search::polish), whose moves and kicks do not depend on the seed: searches from
// different seeds end at the same plan where they reach the same basin (bench/ga_seeds.py measures
// the spread over seeds 1-10).
#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <optional>
#include <random>
#include <set>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "core/error.h"
#include "planner/layer_graph.h"
#include "planner/planner.h"
#include "planner/search_budget.h"

namespace rv {
namespace {

// The default budget (search_budget.h): 20,000 individuals, or 2e7 / nodes where fewer (an
// individual's decoding passes over every node): 2,000 at 10,000 nodes, 200 at 100,000. The
// pool-size defaults of population x generations stay inside it.
constexpr int64_t kMostEvaluations = 20000;
constexpr double kWorkPerNode = 2e7;

struct Individual {
  std::vector<int> assign;  // per node: cluster label, or -1 (idle)
  double score = -1e300;
  std::vector<const Partition*>
      clusters;             // decoded, in label order (held by the Evaluator's cache)
  std::vector<int> labels;  // label of clusters[i]
};

// A hash of a list of ints: an assignment (for the set of distinct individuals), a cluster's
// members (for the cache of pipelines).
struct AssignHash {
  size_t operator()(const std::vector<int>& a) const {
    uint64_t h = 0xcbf29ce484222325ULL;
    for (int x : a) h = (h ^ static_cast<uint32_t>(x)) * 0x100000001b3ULL;
    return static_cast<size_t>(h);
  }
};

class Evaluator {
 public:
  Evaluator(const CostModel& cost, PipelineMemo& memo) : cost_(cost), memo_(memo) {}

  // `members` in ascending order.
  const std::optional<Partition>& cluster(std::vector<int> members) {
    auto it = cache_.find(members);
    if (it != cache_.end()) return it->second;
    ++evaluations_;
    auto p = memo_.best(members);
    return cache_.emplace(std::move(members), std::move(p)).first->second;
  }

  // Decodes and scores `ind` in place.
  void evaluate(Individual& ind) {
    // Members by label, in label order (labels are normalised: 0..C-1, idle -1).
    int labels = 0;
    for (int x : ind.assign) labels = std::max(labels, x + 1);
    std::vector<std::vector<int>> groups(static_cast<size_t>(labels));
    for (int n = 0; n < static_cast<int>(ind.assign.size()); ++n)
      if (ind.assign[n] >= 0) groups[static_cast<size_t>(ind.assign[n])].push_back(n);
    ind.clusters.clear();
    ind.labels.clear();
    int infeasible = 0, nonempty = 0;
    for (int label = 0; label < labels; ++label) {
      std::vector<int>& members = groups[static_cast<size_t>(label)];
      if (members.empty()) continue;
      ++nonempty;
      const auto& p = cluster(std::move(members));
      if (!p) {
        ++infeasible;
        continue;
      }
      ind.clusters.push_back(&*p);
      ind.labels.push_back(label);
    }
    if (nonempty == 0)
      ind.score = -1e300;
    else if (infeasible > 0)
      ind.score = -static_cast<double>(infeasible);
    else
      ind.score = score_clusters(cost_, ind.clusters);
  }

  int64_t evaluations() const { return evaluations_; }

 private:
  const CostModel& cost_;
  PipelineMemo& memo_;
  // Pipelines by their members; elements stay in place as it grows (Individual holds pointers).
  std::unordered_map<std::vector<int>, std::optional<Partition>, AssignHash> cache_;
  int64_t evaluations_ = 0;
};

// Renumbers labels 0..C-1 in order of first appearance (idle stays -1), so equal groupings compare
// equal.
void normalise(std::vector<int>& a) {
  std::unordered_map<int, int> map;
  for (int& x : a) {
    if (x < 0) continue;
    auto it = map.find(x);
    if (it == map.end()) it = map.emplace(x, static_cast<int>(map.size())).first;
    x = it->second;
  }
}

class Search {
 public:
  // `by_speed`: every node, fastest first (nodes_by_speed()).
  Search(const Scenario& s, const CostModel& cost, PipelineMemo& memo,
         const std::vector<int>& by_speed)
      : scenario_(s),
        cost_(cost),
        eval_(cost, memo),
        rng_(s.seed * 0x9E3779B97F4A7C15ULL + 0xA11CE),
        n_(cost.nodes()),
        by_speed_(by_speed) {
    for (int n = 0; n < n_; ++n) regions_ = std::max(regions_, cost.node(n).region + 1);
  }

  // At most `generations` generations of `population`, as far as `budget` allows (the first
  // population always: it is clamped to the budget).
  Individual run(const std::vector<std::vector<Partition>>& seeds, int population, int generations,
                 SearchBudget& budget) {
    population = static_cast<int>(std::min<int64_t>(population, budget.limit()));
    budget.spend(population);
    std::vector<Individual> pop;
    for (const auto& clusters : seeds) pop.push_back(from_clusters(clusters));
    if (pop.empty()) pop.push_back(random_individual(std::max(1, scenario_.planner.clusters)));
    while (static_cast<int>(pop.size()) < population) {
      Individual child = pop[pop.size() % std::max<size_t>(1, seeds.size())];
      mutate(child, 1 + static_cast<int>(rng_() % 3));
      pop.push_back(std::move(child));
    }
    for (auto& ind : pop) eval_.evaluate(ind);
    // The best seed of each number of clusters (seeds come best first), for polish_starts().
    std::set<size_t> counts;
    seeded_.clear();
    for (size_t i = 0; i < std::min(seeds.size(), pop.size()); ++i)
      if (seeded_.size() + 1 < kStarts && pop[i].score > 0 &&
          counts.insert(pop[i].clusters.size()).second)
        seeded_.push_back(pop[i]);
    for (int g = 0; g < generations && budget.spend(population); ++g) {
      std::vector<Individual> next = pop;
      for (int k = 0; k < population; ++k) {
        Individual child = tournament(pop);
        if (rng_() % 2 == 0) crossover(child, tournament(pop));
        mutate(child, 1 + static_cast<int>(rng_() % 3));
        eval_.evaluate(child);
        next.push_back(std::move(child));
      }
      // Elitist selection of distinct individuals.
      std::stable_sort(next.begin(), next.end(),
                       [](const Individual& a, const Individual& b) { return a.score > b.score; });
      pop.clear();
      std::unordered_set<std::vector<int>, AssignHash> kept;
      for (auto& ind : next) {
        if (kept.insert(ind.assign).second) pop.push_back(std::move(ind));
        if (static_cast<int>(pop.size()) == population) break;
      }
    }
    return pop.front();
  }

  // polish() from several starts, each with an equal share of what the budget has left: `found`
  // (run()'s answer), and the best seed of each number of clusters (up to kStarts - 1 of them,
  // best first). The seeds do not depend on planner's seed: where their polish reaches the best
  // plan, every seed returns it. The best plan found.
  Individual polish_starts(const Individual& found, SearchBudget& budget) {
    std::vector<const Individual*> starts{&found};
    for (const Individual& s : seeded_) starts.push_back(&s);
    Individual best = found;
    for (size_t i = 0; i < starts.size(); ++i) {
      const int64_t left = budget.limit() - budget.used();
      Individual p = polish(*starts[i], budget, left / static_cast<int64_t>(starts.size() - i));
      if (p.score > best.score) best = std::move(p);
    }
    return best;
  }

  // A local search from `best` with the evaluations `budget` has left, at most `most` of them:
  // moves of one node (to idle, from idle into a cluster, between clusters), then of whole
  // clusters (idle one, merge two, split one, a new cluster of the idle nodes of one region),
  // each kept where it raises the score, until a pass over them all keeps none. Deterministic:
  // the moves come in a fixed order, not from the seed, so that searches from different seeds
  // that reach the same basin end at the same plan.
  // Then, while evaluations are left, kicks: kKicked nodes of the best plan sent to random
  // clusters (or idle) by a generator of its own (not the seed), the local search again, and the
  // result kept where it is better (an iterated local search).
  Individual polish(Individual best, SearchBudget& budget, int64_t most) {
    left_ = most;
    tried_.clear();
    tried_.insert(AssignHash{}(best.assign));
    descend(best, budget);
    std::mt19937_64 kicks(0x5EED);
    for (int refused = 0; left_ > 0 && refused < kMostRefusedKicks;) {
      Individual next = best;
      const int c = clusters_of(next.assign);
      for (int i = 0; i < kKicked; ++i)
        next.assign[kicks() % n_] = static_cast<int>(kicks() % (c + 2)) - 1;
      normalise(next.assign);
      if (fixed_count() && clusters_of(next.assign) != scenario_.planner.clusters) {
        ++refused;  // a kick that changes the number of clusters the scenario fixes
        continue;
      }
      refused = 0;
      if (!budget.spend(1)) break;
      --left_;
      eval_.evaluate(next);
      descend(next, budget);
      if (next.score > best.score + 1e-9 * std::abs(best.score)) best = std::move(next);
    }
    left_ = 0;
    return best;
  }

  // The local search proper: every family of moves until none is kept.
  void descend(Individual& best, SearchBudget& budget) {
    for (bool improved = true; improved && left_ > 0;) {
      improved = false;
      for (auto family : {&Search::move_nodes, &Search::trade_nodes, &Search::reshape_clusters,
                          &Search::redeal_pairs, &Search::gather_idle})
        if (left_ > 0) improved |= (this->*family)(best, budget);
    }
  }

 private:
  static constexpr size_t kStarts = 4;
  static constexpr int kKicked = 3;
  static constexpr int kMostRefusedKicks = 1000;
  std::vector<Individual> seeded_;  // run()'s best seed of each number of clusters, best first

  // Tries `assign` (normalised here) against `best`; keeps it if it scores higher. False when
  // it is not kept, or the budget is spent (left_ is then 0).
  bool try_assign(Individual& best, std::vector<int> assign, SearchBudget& budget) {
    normalise(assign);
    if (fixed_count() && clusters_of(assign) != scenario_.planner.clusters) return false;
    // Tried before (by its hash: a collision only skips a move, the same way every time).
    if (!tried_.insert(AssignHash{}(assign)).second) return false;
    if (left_ <= 0 || !budget.spend(1)) {
      left_ = 0;
      return false;
    }
    --left_;
    Individual cand;
    cand.assign = std::move(assign);
    eval_.evaluate(cand);
    // Strictly better beyond rounding, or as good with its clusters' periods more even (the
    // slowest cluster gates the score: a move that speeds up only the second slowest changes
    // nothing yet, but opens the next), so that equal plans never cycle.
    const double tol = 1e-9 * std::abs(best.score);
    if (!(cand.score > best.score + tol) &&
        !(cand.score >= best.score - tol && more_even(cand, best)))
      return false;
    best = std::move(cand);
    return true;
  }

  // Whether `a`'s cluster periods, slowest first, are below `b`'s (lexicographically, beyond
  // rounding; fewer clusters first where all the shared ones are equal).
  static bool more_even(const Individual& a, const Individual& b) {
    auto periods = [](const Individual& x) {
      std::vector<double> p;
      for (const Partition* c : x.clusters) p.push_back(c->period);
      std::sort(p.rbegin(), p.rend());
      return p;
    };
    const std::vector<double> pa = periods(a), pb = periods(b);
    for (size_t i = 0; i < std::min(pa.size(), pb.size()); ++i) {
      if (pa[i] < pb[i] * (1 - 1e-9)) return true;
      if (pa[i] > pb[i] * (1 + 1e-9)) return false;
    }
    return pa.size() < pb.size();
  }

  // The families of moves of descend(), each tried against the plan as it stands, fastest
  // nodes first; each says whether it kept one.

  // One node: to idle, or into another cluster (idle ones too).
  bool move_nodes(Individual& best, SearchBudget& budget) {
    bool kept = false;
    for (int n : by_speed_)
      for (int label = -1; label < clusters_of(best.assign) && left_ > 0; ++label) {
        if (best.assign[n] == label) continue;
        std::vector<int> a = best.assign;
        a[n] = label;
        kept |= try_assign(best, std::move(a), budget);
      }
    return kept;
  }

  // Two nodes of different clusters (or one idle) trade places.
  bool trade_nodes(Individual& best, SearchBudget& budget) {
    bool kept = false;
    for (size_t i = 0; i < by_speed_.size() && left_ > 0; ++i)
      for (size_t j = i + 1; j < by_speed_.size() && left_ > 0; ++j) {
        const int x = by_speed_[i], y = by_speed_[j];
        if (best.assign[x] == best.assign[y]) continue;
        std::vector<int> a = best.assign;
        std::swap(a[x], a[y]);
        kept |= try_assign(best, std::move(a), budget);
      }
    return kept;
  }

  // A whole cluster: idle, merged into another, split in two (alternating by speed).
  bool reshape_clusters(Individual& best, SearchBudget& budget) {
    bool kept = false;
    for (int x = 0; x < clusters_of(best.assign) && left_ > 0; ++x) {
      const int c = clusters_of(best.assign);
      std::vector<int> a = best.assign;
      for (int& v : a)
        if (v == x) v = -1;
      if (try_assign(best, std::move(a), budget)) {
        kept = true;
        continue;
      }
      for (int y = 0; y < c && left_ > 0; ++y) {
        if (y == x) continue;
        a = best.assign;
        for (int& v : a)
          if (v == y) v = x;
        kept |= try_assign(best, std::move(a), budget);
      }
      if (x >= clusters_of(best.assign)) break;
      a = best.assign;
      int i = 0;
      for (int n : by_speed_)
        if (a[n] == x && i++ % 2 == 1) a[n] = clusters_of(best.assign);
      kept |= try_assign(best, std::move(a), budget);
    }
    return kept;
  }

  // Two clusters' nodes dealt again by speed, in snake order as greedy deals, into 1, 2 or 3.
  bool redeal_pairs(Individual& best, SearchBudget& budget) {
    bool kept = false;
    for (int x = 0; x < clusters_of(best.assign) && left_ > 0; ++x)
      for (int y = x + 1; y < clusters_of(best.assign) && left_ > 0; ++y)
        for (int into = 1; into <= 3 && left_ > 0; ++into) {
          std::vector<int> a = best.assign;
          const int fresh = clusters_of(a);
          int i = 0;
          for (int n : by_speed_) {
            if (a[n] != x && a[n] != y) continue;
            const int round = i / into, k = i % into;
            const int slot = round % 2 == 0 ? k : into - 1 - k;
            a[n] = slot == 0 ? x : (slot == 1 ? y : fresh);
            ++i;
          }
          kept |= try_assign(best, std::move(a), budget);
        }
    return kept;
  }

  // A new cluster of idle nodes: all of them, or those of one region.
  bool gather_idle(Individual& best, SearchBudget& budget) {
    bool kept = false;
    for (int r = -1; r < regions_ && left_ > 0; ++r) {
      std::vector<int> a = best.assign;
      const int label = clusters_of(a);
      bool any = false;
      for (int n : by_speed_)
        if (a[n] < 0 && (r < 0 || cost_.node(n).region == r)) {
          a[n] = label;
          any = true;
        }
      if (any) kept |= try_assign(best, std::move(a), budget);
    }
    return kept;
  }

  Individual from_clusters(const std::vector<Partition>& clusters) {
    Individual ind;
    ind.assign.assign(n_, -1);
    for (size_t c = 0; c < clusters.size(); ++c)
      for (int node : clusters[c].order) ind.assign[node] = static_cast<int>(c);
    return ind;
  }

  Individual random_individual(int c) {
    Individual ind;
    ind.assign.resize(n_);
    for (int& x : ind.assign) x = static_cast<int>(rng_() % c);
    normalise(ind.assign);
    return ind;
  }

  const Individual& tournament(const std::vector<Individual>& pop) {
    const Individual* best = &pop[rng_() % pop.size()];
    for (int i = 0; i < 2; ++i) {
      const Individual& o = pop[rng_() % pop.size()];
      if (o.score > best->score) best = &o;
    }
    return *best;
  }

  int clusters_of(const std::vector<int>& a) const {
    int c = 0;
    for (int x : a) c = std::max(c, x + 1);
    return c;
  }

  bool fixed_count() const { return scenario_.planner.clusters > 0; }

  // Grouping crossover: keep each of `a`'s clusters with probability 1/2, add `b`'s clusters
  // without the nodes already placed, and give nodes placed by neither to the weakest cluster.
  void crossover(Individual& a, const Individual& b) {
    std::vector<int> out(n_, -2);
    const int ca = clusters_of(a.assign);
    std::vector<char> keep(ca);
    for (auto& k : keep) k = rng_() % 2;
    for (int n = 0; n < n_; ++n)
      if (a.assign[n] >= 0 && keep[a.assign[n]]) out[n] = a.assign[n];
    for (int n = 0; n < n_; ++n)
      if (out[n] == -2 && b.assign[n] >= 0) out[n] = ca + b.assign[n];
    // The weakest label by total speed, kept up to date as nodes join it (one pass over the
    // nodes, not one per node placed).
    // (Ties go to the lowest label.)
    std::map<int, double> speed;
    for (int n = 0; n < n_; ++n)
      if (out[n] >= 0) speed[out[n]] += cost_.node(n).speed;
    std::set<std::pair<double, int>> by_speed;
    for (const auto& [label, sum] : speed) by_speed.emplace(sum, label);
    for (int n = 0; n < n_; ++n) {
      if (out[n] != -2) continue;
      if (a.assign[n] < 0 && b.assign[n] < 0) {
        out[n] = -1;
        continue;
      }
      if (by_speed.empty()) {
        out[n] = 0;  // nothing assigned yet: label 0, as before any cluster exists
        const double v = (speed[0] += cost_.node(n).speed);
        by_speed.emplace(v, 0);
        continue;
      }
      const auto [least, label] = *by_speed.begin();
      out[n] = label;
      by_speed.erase(by_speed.begin());
      const double v = (speed[label] += cost_.node(n).speed);
      by_speed.emplace(v, label);
    }
    normalise(out);
    if (fixed_count() && clusters_of(out) != scenario_.planner.clusters) return;  // keep `a`
    a.assign = std::move(out);
  }

  // The labels of the slowest and fastest clusters of `ind` (by predicted period), if decoded.
  std::pair<int, int> extremes(const Individual& ind) {
    if (ind.clusters.empty()) return {-1, -1};
    size_t lo = 0, hi = 0;
    for (size_t i = 1; i < ind.clusters.size(); ++i) {
      if (ind.clusters[i]->period > ind.clusters[lo]->period) lo = i;
      if (ind.clusters[i]->period < ind.clusters[hi]->period) hi = i;
    }
    return {ind.labels[lo], ind.labels[hi]};
  }

  int random_member(const std::vector<int>& a, int label) {
    std::vector<int> m;
    for (int n = 0; n < n_; ++n)
      if (a[n] == label) m.push_back(n);
    return m.empty() ? -1 : m[rng_() % m.size()];
  }

  void mutate(Individual& ind, int times) {
    for (int t = 0; t < times; ++t) {
      const std::vector<int> before = ind.assign;
      std::vector<int>& a = ind.assign;
      const int c = clusters_of(a);
      auto [slow, fast] = extremes(ind);
      const int op = static_cast<int>(rng_() % (fixed_count() ? 5 : 8));
      if (op == 0 && slow >= 0 &&
          slow != fast) {  // a node of the slowest cluster joins the fastest
        int n = random_member(a, slow);
        if (n >= 0) a[n] = fast;
      } else if (op == 1 && slow >= 0 && slow != fast) {  // swap between slowest and fastest
        int x = random_member(a, slow), y = random_member(a, fast);
        if (x >= 0 && y >= 0) std::swap(a[x], a[y]);
      } else if (op == 2) {  // a random node to a random cluster, or idle
        const int n = static_cast<int>(rng_() % n_);
        const int label = static_cast<int>(rng_() % (c + 1)) - 1;
        a[n] = label;
      } else if (op == 3 &&
                 slow >= 0) {  // idle a straggler of the slowest cluster, or wake an idle node
        std::vector<int> idle;
        for (int n = 0; n < n_; ++n)
          if (a[n] < 0) idle.push_back(n);
        if (!idle.empty() && rng_() % 2 == 0)
          a[idle[rng_() % idle.size()]] = slow;
        else if (int n = random_member(a, slow); n >= 0)
          a[n] = -1;
      } else if (op == 4) {  // an idle node takes the place of a member of the slowest cluster
        std::vector<int> idle;
        for (int n = 0; n < n_; ++n)
          if (a[n] < 0) idle.push_back(n);
        const int x = slow >= 0 ? random_member(a, slow) : -1;
        if (!idle.empty() && x >= 0) std::swap(a[idle[rng_() % idle.size()]], a[x]);
      } else if (op == 5 && c >= 2) {  // a whole cluster goes idle (fewer, faster clusters)
        const int x = (slow >= 0 && rng_() % 2 == 0) ? slow : static_cast<int>(rng_() % c);
        for (int& v : a)
          if (v == x) v = -1;
      } else if (op == 7 && c >= 2) {  // merge two clusters
        const int x = static_cast<int>(rng_() % c), y = static_cast<int>(rng_() % c);
        for (int& v : a)
          if (v == y) v = x;
      } else if (op == 6 && c >= 1) {  // split a cluster in two, alternating by speed
        const int x = slow >= 0 ? slow : static_cast<int>(rng_() % c);
        std::vector<int> m;
        for (int n = 0; n < n_; ++n)
          if (a[n] == x) m.push_back(n);
        std::stable_sort(m.begin(), m.end(),
                         [&](int p, int q) { return cost_.node(p).speed > cost_.node(q).speed; });
        for (size_t i = 1; i < m.size(); i += 2) a[m[i]] = c;
      }
      normalise(a);
      if (fixed_count() && clusters_of(a) != scenario_.planner.clusters) {
        a = before;  // keep the number of clusters the scenario fixes
        continue;
      }
      // Refresh the decoded clusters for the next targeted mutation (after the last one, the
      // caller evaluates the child).
      if (t + 1 < times) eval_.evaluate(ind);
    }
  }

  const Scenario& scenario_;
  const CostModel& cost_;
  Evaluator eval_;
  std::mt19937_64 rng_;
  int n_;
  const std::vector<int>& by_speed_;  // every node, fastest first
  int regions_ = 1;                   // the pool's regions (1 under a star)
  // polish(): the evaluations it has left, the hashes of the assignments it has tried.
  int64_t left_ = 0;
  std::unordered_set<size_t> tried_;
};

// Seeds by locality, where the pool spans regions (network.topology = "regions"): each region's
// best dealing by speed on its own (over its numbers of clusters), and the union of these over
// every set of regions (of the first kMaxSeedRegions regions with a feasible dealing), best
// first among the others: pipelines that stay inside a region, and leave a far one out, can
// win, and a dealing of the whole pool by speed mixes the regions.
constexpr int kMaxSeedRegions = 10;

void region_seeds(const Scenario& scenario, const CostModel& cost, PipelineMemo& memo,
                  const std::vector<int>& nodes,
                  std::vector<std::pair<double, std::vector<Partition>>>& seeds) {
  std::vector<std::vector<int>> members;  // per region, fastest first
  for (int v : nodes) {
    const auto r = static_cast<size_t>(cost.node(v).region);
    if (members.size() <= r) members.resize(r + 1);
    members[r].push_back(v);
  }
  if (members.size() <= 1) return;
  std::vector<std::vector<Partition>> alone;  // each region's best dealing, where one fits
  for (const std::vector<int>& m : members) {
    if (m.empty()) continue;
    double best = 0;
    std::optional<std::vector<Partition>> chosen;
    for (int c : cluster_counts(scenario, static_cast<int>(m.size()), static_cast<int>(m.size())))
      if (auto clusters = snake_clusters(memo, m, c)) {
        const double score = score_clusters(cost, *clusters);
        if (score > best) {
          best = score;
          chosen = std::move(clusters);
        }
      }
    if (chosen && static_cast<int>(alone.size()) < kMaxSeedRegions)
      alone.push_back(std::move(*chosen));
  }
  const int fixed = scenario.planner.clusters;
  for (uint32_t set = 1; set < (1u << alone.size()); ++set) {
    std::vector<Partition> clusters;
    for (size_t r = 0; r < alone.size(); ++r)
      if (set & (1u << r)) clusters.insert(clusters.end(), alone[r].begin(), alone[r].end());
    if (fixed > 0 && static_cast<int>(clusters.size()) != fixed) continue;
    seeds.emplace_back(score_clusters(cost, clusters), std::move(clusters));
  }
}

}  // namespace

Plan plan_ga(const Scenario& scenario, const ModelDesc& model) {
  CostModel cost(scenario, model);
  check_pool(scenario, model, cost);
  LayerGraph graph(model);
  const std::vector<int> nodes = nodes_by_speed(cost);
  // Seeds: the greedy dealing of every node for every number of clusters worth trying, and of
  // only the m fastest nodes (m = 1, 2, 4, ...: one pipeline, or one cluster per node, or
  // between), since leaving slow nodes out can win. Best first.
  const int n = cost.nodes();
  SearchBudget budget(scenario, n, kMostEvaluations, kWorkPerNode);
  PipelineMemo memo(cost, graph.cuttable());
  std::vector<std::pair<double, std::vector<Partition>>> seeds;
  auto seed = [&](const std::vector<int>& pool, int c) {
    if (scenario.planner.clusters > 0 && c != scenario.planner.clusters) return;
    if (!seeds.empty() && budget.out_of_time()) return;
    if (auto clusters = snake_clusters(memo, pool, c))
      seeds.emplace_back(score_clusters(cost, *clusters), std::move(*clusters));
  };
  for (int c : cluster_counts(scenario, cost.nodes(), cost.nodes())) seed(nodes, c);
  for (int m = 1; m < cost.nodes(); m *= 2) {
    const std::vector<int> fastest(nodes.begin(), nodes.begin() + m);
    std::vector<int> counts{1, std::max(1, m / 4), std::max(1, m / 2), m};
    if (scenario.planner.clusters > 0) counts = {scenario.planner.clusters};
    std::sort(counts.begin(), counts.end());
    counts.erase(std::unique(counts.begin(), counts.end()), counts.end());
    for (int c : counts)
      if (c <= m) seed(fastest, c);
  }
  region_seeds(scenario, cost, memo, nodes, seeds);
  std::stable_sort(seeds.begin(), seeds.end(),
                   [](const auto& a, const auto& b) { return a.first > b.first; });
  int population = scenario.planner.population, generations = scenario.planner.generations;
  if (population <= 0) population = n <= 12 ? 80 : (n <= 100 ? 40 : (n <= 1000 ? 20 : 10));
  if (generations <= 0) generations = n <= 100 ? 200 : (n <= 1000 ? 60 : 15);
  std::vector<std::vector<Partition>> seed_clusters;
  for (size_t i = 0; i < seeds.size() && static_cast<int>(i) < population; ++i)
    seed_clusters.push_back(seeds[i].second);
  SearchBudget::check_population(scenario, std::min<int64_t>(population, budget.limit()), n);
  Search search(scenario, cost, memo, nodes);
  const Individual best =
      search.polish_starts(search.run(seed_clusters, population, generations, budget), budget);
  if (best.score <= 0)
    throw PlanRefused(
        scenario.source, "devices",
        "ga: found no assignment in which every cluster can hold the model" + stashing_hint(cost));
  std::vector<Partition> clusters;
  for (const Partition* p : best.clusters) clusters.push_back(*p);
  Plan plan = assemble_plan("ga", cost, clusters);
  budget.record(plan);
  return plan;
}

}  // namespace rv
