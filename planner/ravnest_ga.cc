// ravnest-ga: the Ravnest reference's cluster formation (operations/genetic.py and its caller in
// the reference code), for comparison with ga.
//
// Genetic algorithm: one gene per node, its cluster id in [0, max_clusters - 1] (max_clusters 5,
// or planner.clusters when set: an upper bound, as in the reference clusters may come out empty).
// Fitness, minimised, over the non-empty clusters c:
//   100 * sum_c max(0, L - RAM_c) + (max_c S_c - min_c S_c),  S_c = sum_{i in c} floor(RAM_i/bw_i)
// with RAM in MB (ram_gb * 1024), bw the node's bandwidth in Mbit/s (the pool gives up and down
// separately; we take min(up_mbps, down_mbps), the rate a pipeline stage can sustain both ways)
// and L the model's memory in MB as the reference measures it with torchinfo (MB = 1e6 bytes):
// 4 bytes * (parameters + batch * (input + every layer's output elements)), no gradients or
// optimizer state. Population 200, 500 generations (planner.population / generations override
// them), parents by tournaments of 5 drawn without replacement, one-point crossover giving two
// children, per-gene mutation probability 0.01 (a fresh random id), the best individual ever seen
// returned; std::mt19937_64 seeded from the scenario's seed, so the plan is deterministic.
// The fitness ignores compute and latency, and a single cluster scores 0 whenever the pool's RAM
// exceeds L: it never prefers several clusters for their throughput.
//
// Then, as the reference does: each cluster's nodes in pool (config) order; the model cut into
// stages of about equal parameter count (stage s ends at the cuttable boundary closest to
// (s + 1) / k of the parameters). The reference's proportions round(1/k, 1) leave an empty last
// stage for k = 6 (and wrong shares for other k); that bug is not reproduced: every stage gets at
// least one layer, and nodes beyond the model's cut points stay idle (the reference would give
// them empty stages). Finally the reference's hard check RAM_c >= L, and ours that every stage
// fits its node (CostModel::fits with the cluster's in-flight count): a cluster that fails either
// is a ScenarioError on planner.method, since the fitness, not the pool, produced it.
#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <sstream>

#include "core/error.h"
#include "planner/layer_graph.h"
#include "planner/planner.h"
#include "planner/search_budget.h"

namespace rv {
namespace {

constexpr int kDefaultMaxClusters = 5;
constexpr int kPopulation = 200;
constexpr int kGenerations = 500;
// The default budget (search_budget.h): the 100,000 individuals of the default population x
// generations, or 2e8 / nodes where fewer (fitness passes over every node): 2,000 at 100,000.
constexpr int64_t kMostEvaluations = int64_t{kPopulation} * kGenerations;
constexpr double kWorkPerNode = 2e8;
constexpr int kTournament = 5;
constexpr double kMutation = 0.01;

// The reference's L: parameters plus one micro-batch's input and outputs, in MB (1e6 bytes).
double model_mb(const ModelDesc& model, int64_t batch) {
  double elems = static_cast<double>(model.input_elems);
  for (const auto& p : model.profile) elems += static_cast<double>(p.out_elems);
  return 4.0 * (static_cast<double>(model.total_params()) + static_cast<double>(batch) * elems) /
         1e6;
}

class ReferenceGa {
 public:
  ReferenceGa(std::vector<double> ram_mb, std::vector<double> speed, double l, int max_clusters,
              uint64_t seed)
      : ram_(std::move(ram_mb)),
        speed_(std::move(speed)),
        l_(l),
        max_clusters_(max_clusters),
        rng_(seed),
        n_(static_cast<int>(ram_.size())) {}

  double fitness(const std::vector<int>& genes) const {
    std::vector<double> ram(max_clusters_, 0.0), speed(max_clusters_, 0.0);
    std::vector<char> used(max_clusters_, 0);
    for (int i = 0; i < n_; ++i) {
      used[genes[i]] = 1;
      ram[genes[i]] += ram_[i];
      speed[genes[i]] += speed_[i];
    }
    double penalty = 0, lo = 1e300, hi = -1e300;
    for (int c = 0; c < max_clusters_; ++c) {
      if (!used[c]) continue;
      penalty += std::max(0.0, l_ - ram[c]);
      lo = std::min(lo, speed[c]);
      hi = std::max(hi, speed[c]);
    }
    return 100.0 * penalty + (hi - lo);
  }

  // At most `generations` generations of `population` (clamped to the budget), as far as `budget`
  // allows.
  std::vector<int> run(int population, int generations, SearchBudget& budget) {
    population = static_cast<int>(std::min<int64_t>(population, budget.limit()));
    std::vector<std::vector<int>> pop(population, std::vector<int>(n_));
    for (auto& ind : pop)
      for (int& g : ind) g = gene();
    std::vector<int> best;
    double best_fitness = std::numeric_limits<double>::infinity();
    std::vector<double> fit(population);
    for (int gen = 0; gen < generations && budget.spend(population); ++gen) {
      for (int i = 0; i < population; ++i) {
        fit[i] = fitness(pop[i]);
        if (fit[i] < best_fitness) {
          best_fitness = fit[i];
          best = pop[i];
        }
      }
      std::vector<std::vector<int>> next;
      next.reserve(population);
      while (static_cast<int>(next.size()) + 1 < population) {
        const std::vector<int>& a = pop[tournament(fit)];
        const std::vector<int>& b = pop[tournament(fit)];
        std::vector<int> c1 = a, c2 = b;
        if (n_ >= 2) {
          const int point =
              1 + static_cast<int>(rng_() % static_cast<uint64_t>(n_ - 1));  // [1, n - 1]
          for (int i = point; i < n_; ++i) std::swap(c1[i], c2[i]);
        }
        mutate(c1);
        mutate(c2);
        next.push_back(std::move(c1));
        next.push_back(std::move(c2));
      }
      if (static_cast<int>(next.size()) < population)
        next.push_back(pop[tournament(fit)]);  // odd sizes
      pop = std::move(next);
    }
    return best;
  }

 private:
  int gene() { return static_cast<int>(rng_() % static_cast<uint64_t>(max_clusters_)); }

  // The best (least fitness; the first drawn among equals) of kTournament distinct individuals.
  int tournament(const std::vector<double>& fit) {
    const int n = static_cast<int>(fit.size());
    const int draw = std::min(kTournament, n);
    int best = -1;
    picked_.clear();
    while (static_cast<int>(picked_.size()) < draw) {
      const int i = static_cast<int>(rng_() % static_cast<uint64_t>(n));
      if (std::find(picked_.begin(), picked_.end(), i) != picked_.end()) continue;
      picked_.push_back(i);
      if (best < 0 || fit[i] < fit[best]) best = i;
    }
    return best;
  }

  void mutate(std::vector<int>& genes) {
    for (int& g : genes)
      if (static_cast<double>(rng_() >> 11) * 0x1.0p-53 < kMutation) g = gene();
  }

  std::vector<double> ram_, speed_;
  double l_;
  int max_clusters_;
  std::mt19937_64 rng_;
  int n_;
  std::vector<int> picked_;
};

// Cuts of `k` stages with about equal parameter counts, at cuttable boundaries, each stage at
// least one boundary step long.
std::vector<int> equal_parameter_cuts(const ModelDesc& model, const std::vector<int>& pos, int k) {
  const int n = static_cast<int>(pos.size());
  const double total = static_cast<double>(model.total_params());
  std::vector<int> cuts{0};
  int at = 0;  // index into pos
  for (int s = 1; s < k; ++s) {
    const double target = total * s / k;
    int best = at + 1;
    for (int j = at + 1; j <= n - 1 - (k - s); ++j)
      if (std::abs(static_cast<double>(model.prefix_params[pos[j]]) - target) <
          std::abs(static_cast<double>(model.prefix_params[pos[best]]) - target))
        best = j;
    cuts.push_back(pos[best]);
    at = best;
  }
  cuts.push_back(pos[n - 1]);
  return cuts;
}

}  // namespace

Plan plan_ravnest_ga(const Scenario& scenario, const ModelDesc& model) {
  CostModel cost(scenario, model);
  check_pool(scenario, model, cost);
  const int n = cost.nodes();
  std::vector<double> ram_mb(n), speed(n);
  for (int i = 0; i < n; ++i) {
    const DeviceGroup& d = scenario.device_of(i);
    ram_mb[i] = d.ram_gb * 1024.0;
    speed[i] = std::floor(ram_mb[i] / std::min(d.up_mbps, d.down_mbps));
  }
  const double l = model_mb(model, scenario.data.batch_size);
  const int max_clusters =
      scenario.planner.clusters > 0 ? scenario.planner.clusters : kDefaultMaxClusters;
  const int population =
      scenario.planner.population > 0 ? scenario.planner.population : kPopulation;
  const int generations =
      scenario.planner.generations > 0 ? scenario.planner.generations : kGenerations;
  SearchBudget budget(scenario, n, kMostEvaluations, kWorkPerNode);
  SearchBudget::check_population(scenario, std::min<int64_t>(population, budget.limit()), n);
  ReferenceGa ga(ram_mb, speed, l, max_clusters, scenario.seed);
  const std::vector<int> genes = ga.run(population, generations, budget);

  LayerGraph graph(model);
  std::vector<int> pos;
  for (int b = 0; b <= model.layer_count(); ++b)
    if (graph.cuttable()[b]) pos.push_back(b);
  const int room = static_cast<int>(pos.size()) - 1;  // most stages a pipeline can have

  std::vector<Partition> clusters;
  for (int c = 0; c < max_clusters; ++c) {
    Partition p;
    double ram = 0;
    for (int i = 0; i < n; ++i)
      if (genes[i] == c) {
        ram += ram_mb[i];
        if (static_cast<int>(p.order.size()) < room) p.order.push_back(i);  // the rest stay idle
      }
    if (p.order.empty()) continue;  // empty clusters are dropped
    std::string members;            // for messages: the first few
    int count = 0;
    for (int i = 0; i < n; ++i)
      if (genes[i] == c && ++count <= 8)
        members += (members.empty() ? "" : ", ") + std::to_string(i);
    if (count > 8) members += ", ... (" + std::to_string(count) + " nodes)";
    if (ram < l) {
      std::ostringstream os;
      os << "ravnest-ga: the reference's fitness produced a cluster (nodes " << members << ") with "
         << ram << " MB of RAM, below the model's " << l
         << " MB (its hard check RAM_c >= L fails): the pool cannot "
         << "be split this way; use method = \"ga\", which only forms clusters that hold the model";
      throw PlanRefused(scenario.source, "planner.method", os.str());
    }
    const int k = static_cast<int>(p.order.size());
    p.cuts = equal_parameter_cuts(model, pos, k);
    const int64_t f = cost.in_flight(k);
    for (int s = 0; s < k; ++s) {
      if (!cost.fits(p.order[s], p.cuts[s], p.cuts[s + 1], f)) {
        std::ostringstream os;
        os << "ravnest-ga: the reference's fitness produced a cluster (nodes " << members
           << ") that cannot hold the model: with equal parameter shares, stage " << s
           << " (layers " << p.cuts[s] << ".." << p.cuts[s + 1] - 1 << ") needs "
           << format_gib(cost.memory(p.cuts[s], p.cuts[s + 1], f))
           << " (weights, gradients, optimizer state, and the activations of " << f
           << " micro-batches in flight) but node " << p.order[s] << " has "
           << format_gib(cost.node(p.order[s]).ram)
           << "; its fitness counts only parameters and activations (" << l
           << " MB). Use method = \"ga\", which cuts by memory and speed";
        throw PlanRefused(scenario.source, "planner.method", os.str());
      }
      p.bottleneck = std::max(p.bottleneck, cost.stage_time(p.order[s], p.cuts[s], p.cuts[s + 1]));
    }
    p.period = cost.cluster_period(p.order, p.cuts);
    clusters.push_back(std::move(p));
  }
  Plan plan = assemble_plan("ravnest-ga", cost, clusters);
  budget.record(plan);
  return plan;
}

}  // namespace rv
