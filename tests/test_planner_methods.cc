// Every planning method (greedy, ga, ravnest-ga, exhaustive, manual clusters) gives valid plans
// (clusters disjoint, contiguous stages covering the model, memory within RAM, rings with one
// owner per cluster), the same plan for the same seed, and refuses infeasible pools saying what
// is missing; on small random pools exhaustive >= ga >= greedy, ga within 2% of exhaustive, and
// exhaustive matches brute force on tiny ones.
#include <algorithm>
#include <cmath>
#include <functional>
#include <nlohmann/json.hpp>
#include <numeric>
#include <optional>
#include <random>
#include <set>
#include <sstream>

#include "catch.h"
#include "core/error.h"
#include "planner/layer_graph.h"
#include "test_support.h"

using namespace rv;

namespace {

// A 10-layer MLP (about 3.7 M parameters, 30 MB of weights and gradients with SGD).
const char* kModel = R"(
[model]
head = "linear"
kind = "mlp"
hidden = [1024, 1024, 1024, 512]
[data]
kind = "synthetic"
side = 32
batch_size = 64
)";

struct Node {
  double tflops, ram_gb, up, down, latency;
};

std::string toml_of(const std::vector<Node>& pool, const std::string& extra = "") {
  std::ostringstream os;
  os << "name = \"methods\"\nseed = 11\n" << kModel << extra << "\n";
  for (size_t i = 0; i < pool.size(); ++i) {
    const Node& n = pool[i];
    os << "[[devices]]\nname = \"n" << i << "\"\ntflops = " << n.tflops << "\nram_gb = " << n.ram_gb
       << "\nup_mbps = " << n.up << "\ndown_mbps = " << n.down << "\nlatency_ms = " << n.latency
       << "\n";
  }
  return os.str();
}

// Heterogeneous: compute 10x apart and slow (0.5-5 Gflop/s: a micro-batch computes for about as
// long as its activations and the averaging take to send, so plans differ), RAM from half what
// the model needs alone on a node (about 32 MB) to three times it, links 10x apart.
std::vector<Node> random_pool(uint64_t seed, int n, double ram_lo = 0.015, double ram_hi = 0.09) {
  std::mt19937_64 rng(seed);
  auto u = [&](double lo, double hi) {
    return lo + (hi - lo) * static_cast<double>(rng() >> 11) * 0x1.0p-53;
  };
  std::vector<Node> pool;
  for (int i = 0; i < n; ++i)
    pool.push_back({0.0005 * std::pow(10.0, u(0, 1)), std::round(u(ram_lo, ram_hi) * 10000) / 10000,
                    std::round(u(10, 100)), std::round(u(50, 500)), std::round(u(5, 50))});
  return pool;
}

// Six nodes, four speeds, RAM enough for every method (ravnest-ga's equal split included).
std::vector<Node> fixed_pool() {
  return {{0.05, 1, 100, 400, 5}, {0.01, 1, 20, 100, 20}, {0.05, 1, 80, 300, 10},
          {0.01, 1, 20, 100, 30}, {0.02, 1, 50, 200, 15}, {0.005, 1, 10, 50, 40}};
}

const char* kManualClusters = R"(
[[planner.cluster]]
nodes = [0, 1, 5]
[[planner.cluster]]
nodes = [2, 3, 4]
stage_layers = [4, 3, 3]
)";

std::string planner_section(const std::string& method, const std::string& more = "") {
  return "[planner]\nmethod = \"" + method + "\"\n" + more +
         (method == "manual" ? kManualClusters : "");
}

// Everything a valid plan must satisfy.
void check_valid(const test::Prepared& p) {
  const Plan& plan = p.plan;
  CostModel cost(p.scenario, p.model);
  INFO("method " << plan.method << ": " << to_json(plan).dump());
  REQUIRE(plan.nodes == p.scenario.node_count());
  REQUIRE(!plan.clusters.empty());
  std::set<int> seen;
  for (const auto& c : plan.clusters) {
    REQUIRE(!c.stages.empty());
    CHECK(c.stages.front().layer_begin == 0);
    CHECK(c.stages.back().layer_end == p.model.layer_count());
    const int64_t f = cost.in_flight(static_cast<int>(c.stages.size()));
    for (size_t s = 0; s < c.stages.size(); ++s) {
      const StagePlan& st = c.stages[s];
      CHECK(st.layer_begin < st.layer_end);
      if (s + 1 < c.stages.size()) CHECK(st.layer_end == c.stages[s + 1].layer_begin);
      CHECK(seen.insert(st.node).second);  // every node in at most one cluster, once
      CHECK(cost.fits(st.node, st.layer_begin, st.layer_end, f));
      CHECK(st.memory <= p.scenario.device_of(st.node).ram_gb * kGbToBytes);
    }
    CHECK(c.period > 0);
  }
  CHECK(plan.throughput > 0);
  if (plan.clusters.size() == 1) {
    CHECK(plan.rings.empty());
  } else {
    REQUIRE(!plan.rings.empty());
    int64_t next = 0;
    for (const Ring& r : plan.rings) {
      CHECK(r.begin == next);
      next = r.end;
      REQUIRE(r.owners.size() == plan.clusters.size());
      for (size_t c = 0; c < plan.clusters.size(); ++c) {
        const auto& st = plan.clusters[c].stages;
        CHECK(std::any_of(st.begin(), st.end(), [&](const StagePlan& s) {
          return s.node == r.owners[c] && p.model.state_offset(s.layer_begin) <= r.begin &&
                 r.end <= p.model.state_offset(s.layer_end);
        }));
      }
    }
    CHECK(next == p.model.state_offset(p.model.layer_count()));
  }
}

Plan plan_of(const std::vector<Node>& pool, const std::string& planner) {
  return test::prepare(toml_of(pool, planner), {}, false).plan;
}

}  // namespace

TEST_CASE("every planning method gives a valid plan", "[planner][methods]") {
  const std::string method = GENERATE("greedy", "ga", "ravnest-ga", "exhaustive", "manual");
  auto p = test::prepare(toml_of(fixed_pool(), planner_section(method)), {}, false);
  CHECK(p.plan.method == method);
  check_valid(p);
  if (method == "manual") CHECK(p.plan.clusters.size() == 2);
}

TEST_CASE("every planning method gives the same plan for the same seed", "[planner][methods]") {
  const std::string method = GENERATE("greedy", "ga", "ravnest-ga", "exhaustive", "manual");
  const std::string text = toml_of(random_pool(5, 7), planner_section(method));
  std::string a, b;
  try {
    a = to_json(test::prepare(text, {}, false).plan).dump();
  } catch (const ScenarioError& e) {
    a = e.what();  // ravnest-ga may refuse a pool; it must refuse it the same way
  }
  try {
    b = to_json(test::prepare(text, {}, false).plan).dump();
  } catch (const ScenarioError& e) {
    b = e.what();
  }
  CHECK(a == b);
}

TEST_CASE("on small random pools exhaustive >= ga >= greedy, ga within 2% of exhaustive",
          "[planner][methods]") {
  const uint64_t seed = GENERATE(range(1, 13));
  const int n = 3 + static_cast<int>(seed % 6);  // 3..8 nodes
  const auto pool = random_pool(100 + seed, n);
  auto run = [&](const std::string& method) -> std::optional<Plan> {
    try {
      auto p = test::prepare(toml_of(pool, planner_section(method)), {}, false);
      check_valid(p);
      return p.plan;
    } catch (const ScenarioError& e) {
      UNSCOPED_INFO(method << ": " << e.what());
      return std::nullopt;
    }
  };
  const auto ex = run("exhaustive"), ga = run("ga"), greedy = run("greedy");
  if (!ex) {  // no plan exists: no method may claim one
    CHECK(!ga);
    CHECK(!greedy);
    return;
  }
  REQUIRE(ga);
  INFO(n << " nodes; exhaustive " << to_json(*ex).dump() << "\nga " << to_json(*ga).dump());
  CHECK(ex->throughput >= ga->throughput * (1 - 1e-12));
  // ga decodes each cluster to its shortest-period pipeline; exhaustive also weighs pipelines
  // whose cuts make the averaging cheaper (its Pareto front), which ga cannot reach. That gap was
  // 1.003% on one of these pools (8 nodes, seed 5 or 11) once TCP's goodput went 0.935 -> 0.962.
  CHECK(ga->throughput >= 0.98 * ex->throughput);
  if (greedy) CHECK(ga->throughput >= greedy->throughput * (1 - 1e-12));
}

TEST_CASE("exhaustive matches brute force over every partition, order and cut of a tiny pool",
          "[planner][methods]") {
  const uint64_t seed = GENERATE(range(1, 21));
  // The mean-value analysis (ravnest, in flight = stages or fixed) and GPipe's formula.
  const std::string training = GENERATE(std::string("algorithm = \"ravnest\"\n"),
                                        std::string("algorithm = \"ravnest\"\nmax_in_flight = 3\n"),
                                        std::string("algorithm = \"gpipe\"\n"));
  // Five nodes, eight layers (0.69 M parameters, about 5.8 MB alone on a node, more in a
  // pipeline), RAM from 2 to 12 MB: pipelines of one to five stages. Every plan can be listed.
  // (800 seeds x 3 settings passed when this was written.)
  const auto pool = random_pool(200 + seed, 5, 0.002, 0.012);
  std::string text = toml_of(pool, planner_section("exhaustive") + "[training]\n" + training);
  const std::string from = "hidden = [1024, 1024, 1024, 512]";
  text.replace(text.find(from), from.size(), "hidden = [512, 256, 128]");
  test::Prepared p;
  p.scenario = parse_scenario(text, "test.toml");
  p.model = build_model(p.scenario);
  CostModel cost(p.scenario, p.model);
  const int n = cost.nodes(), layers = p.model.layer_count();

  // Every pipeline of every subset: each order of its nodes, each cut, each stage within memory.
  std::vector<std::vector<Partition>> pipelines(1 << n);
  for (int mask = 1; mask < (1 << n); ++mask) {
    std::vector<int> order;
    for (int v = 0; v < n; ++v)
      if (mask >> v & 1) order.push_back(v);
    const int k = static_cast<int>(order.size());
    if (k > layers) continue;
    do {
      // Cuts: choose k - 1 of the layers - 1 inner boundaries.
      std::vector<int> pick(layers - 1, 0);
      std::fill(pick.begin(), pick.begin() + (k - 1), 1);
      do {
        std::vector<int> cuts{0};
        for (int b = 1; b < layers; ++b)
          if (pick[b - 1]) cuts.push_back(b);
        cuts.push_back(layers);
        bool fits = true;
        for (int s = 0; s < k; ++s)
          fits = fits && cost.fits(order[s], cuts[s], cuts[s + 1], cost.in_flight(k));
        if (fits)
          pipelines[mask].push_back(Partition{order, cuts, 0, cost.cluster_period(order, cuts)});
      } while (std::prev_permutation(pick.begin(), pick.end()));
    } while (std::next_permutation(order.begin(), order.end()));
  }
  // Every partition of the pool into clusters and idle nodes (clusters listed by lowest node, as
  // the planners list them), every combination of the clusters' pipelines.
  double best = 0;
  std::vector<int> chosen;
  std::function<void(int)> partitions = [&](int remaining) {
    if (remaining == 0) {
      if (chosen.empty()) return;
      std::vector<Partition> clusters(chosen.size());
      std::function<void(size_t)> combine = [&](size_t i) {
        if (i == chosen.size()) {
          best = std::max(best, score_clusters(cost, clusters));
          return;
        }
        for (const Partition& q : pipelines[chosen[i]]) {
          clusters[i] = q;
          combine(i + 1);
        }
      };
      combine(0);
      return;
    }
    const int low = remaining & -remaining;
    for (int sub = remaining; sub > 0; sub = (sub - 1) & remaining)
      if ((sub & low) && !pipelines[sub].empty()) {
        chosen.push_back(sub);
        partitions(remaining & ~sub);
        chosen.pop_back();
      }
    partitions(remaining & ~low);  // the lowest node idle
  };
  partitions((1 << n) - 1);
  if (best == 0) {  // no plan fits
    CHECK_THROWS_AS(plan_exhaustive(p.scenario, p.model), ScenarioError);
    return;
  }
  p.plan = plan_exhaustive(p.scenario, p.model);
  INFO("exhaustive " << to_json(p.plan).dump());
  CHECK(p.plan.throughput == Approx(best).epsilon(1e-9));
  CHECK(p.plan.throughput >= best * (1 - 1e-9));
}

TEST_CASE("exhaustive honours a fixed number of clusters", "[planner][methods]") {
  const Plan plan = plan_of(random_pool(7, 6), planner_section("exhaustive", "clusters = 2\n"));
  CHECK(plan.clusters.size() == 2);
}

TEST_CASE("exhaustive refuses more than 12 nodes and points to ga", "[planner][methods]") {
  std::vector<Node> pool(13, Node{0.01, 1, 50, 100, 10});
  try {
    plan_of(pool, planner_section("exhaustive"));
    FAIL("13 nodes were accepted");
  } catch (const ScenarioError& e) {
    CHECK(e.key() == "planner.method");
    CHECK_THAT(e.what(), Catch::Contains("12 nodes") && Catch::Contains("ga"));
  }
}

TEST_CASE("ravnest-ga honours its caps: at most 5 clusters, or planner.clusters",
          "[planner][methods]") {
  // Twenty nodes with RAM to spare: every split the reference's fitness may pick is feasible.
  std::vector<Node> pool;
  for (int i = 0; i < 20; ++i)
    pool.push_back({0.01 * (1 + i % 4), 4.0 + i % 3, 20.0 + 10 * (i % 5), 100, 10});
  const std::string cap =
      GENERATE(std::string(""), std::string("clusters = 2\n"), std::string("clusters = 1\n"));
  auto p = test::prepare(toml_of(pool, planner_section("ravnest-ga", cap)), {}, false);
  check_valid(p);
  const size_t most = cap.empty() ? 5 : static_cast<size_t>(cap[11] - '0');
  CHECK(p.plan.clusters.size() <= most);
  for (const auto& c : p.plan.clusters) {
    // Nodes in pool order; stages of about equal parameter counts (within one layer's worth).
    const int k = static_cast<int>(c.stages.size());
    int64_t largest_layer = 0;
    for (const auto& l : p.model.profile) largest_layer = std::max(largest_layer, l.params);
    for (int s = 0; s < k; ++s) {
      if (s + 1 < k) CHECK(c.stages[s].node < c.stages[s + 1].node);
      const double target = static_cast<double>(p.model.total_params()) * (s + 1) / k;
      CHECK(std::abs(static_cast<double>(p.model.prefix_params[c.stages[s].layer_end]) - target) <=
            largest_layer);
    }
  }
}

TEST_CASE("ravnest-ga refuses a split its fitness made that cannot hold the model",
          "[planner][methods]") {
  // Four nodes of 12 MiB: together they hold the model (check_pool passes), and any two hold the
  // reference's L (parameters and activations, about 15 MB), but stages of equal parameter counts
  // with weights, gradients and stashed versions (k micro-batches in flight) need more than
  // 12 MiB each for every k.
  std::vector<Node> pool(4, Node{0.01, 0.012, 50, 100, 10});
  try {
    auto p = test::prepare(toml_of(pool, planner_section("ravnest-ga")), {}, false);
    FAIL("ravnest-ga accepted " << to_json(p.plan).dump());
  } catch (const ScenarioError& e) {
    CHECK(e.key() == "planner.method");
    CHECK_THAT(e.what(), Catch::Contains("cannot hold the model"));
  }
}

TEST_CASE("every method refuses a pool whose RAM is below the model, saying how much is missing",
          "[planner][methods]") {
  const std::string method = GENERATE("greedy", "ga", "ravnest-ga", "exhaustive", "manual");
  std::vector<Node> pool(3,
                         Node{0.01, 0.005, 50, 100, 10});  // 15 MB in all; the model needs ~30 MB
  try {
    auto p = test::prepare(toml_of(pool, "[planner]\nmethod = \"" + method + "\"\n"), {}, false);
    FAIL(method << " accepted " << to_json(p.plan).dump());
  } catch (const ScenarioError& e) {
    CHECK_THAT(e.what(), Catch::Contains("RAM") && Catch::Contains("add"));
  }
}

TEST_CASE("a refusal for want of RAM names weight stashing when its copies are what does not fit",
          "[planner][methods]") {
  // 8 nodes of 21 MB: the model's weights and gradients (32 MB with SGD) need a pipeline, which
  // fits them without weight stashing and not with it (an older copy of a stage's weights per
  // micro-batch in flight but one).
  const std::string method = GENERATE("greedy", "ga", "exhaustive");
  const std::string text = toml_of(std::vector<Node>(8, Node{0.01, 0.02, 50, 100, 10}),
                                   "[planner]\nmethod = \"" + method + "\"\n");
  try {
    auto p = test::prepare(text, {}, false);
    FAIL(method << " accepted " << to_json(p.plan).dump());
  } catch (const ScenarioError& e) {
    CHECK_THAT(e.what(), Catch::Contains("training.weight_stashing = false"));
  }
  auto p = test::prepare(text, {"training.weight_stashing=false"}, false);
  check_valid(p);
}

TEST_CASE("every method refuses a node too small for any layer, naming it", "[planner][methods]") {
  const std::string method = GENERATE("greedy", "ga", "ravnest-ga", "exhaustive", "manual");
  auto pool = fixed_pool();
  pool[3].ram_gb = 0.0001;  // 100 kB: not even the smallest layer
  try {
    auto p = test::prepare(toml_of(pool, "[planner]\nmethod = \"" + method + "\"\n"), {}, false);
    FAIL(method << " accepted " << to_json(p.plan).dump());
  } catch (const ScenarioError& e) {
    // check_pool's message (manual's single cluster says which stage the node cannot hold).
    CHECK_THAT(e.what(), Catch::Contains("node 3") && Catch::Contains("0.0001 GiB"));
    if (method != "manual") CHECK_THAT(e.what(), Catch::Contains("too little for any layer"));
  }
}

TEST_CASE("no planner leaves a stage without state alone on a node when merging it is no slower",
          "[planner][methods]") {
  // The consumer pool of scenarios/consumer-pool-1024.toml at 8 nodes, a 67-million-parameter MLP:
  // cut without the merge, greedy puts the flatten alone on every laptop (a hop over its
  // 20 Mbit/s uplink that computes nothing). And seeded random pools.
  std::string consumer = R"(
name = "consumer"
seed = 5
[model]
head = "linear"
kind = "mlp"
hidden = [4096, 4096, 4096, 4096, 4096]
[data]
kind = "synthetic"
batch_size = 16
[training]
optimizer = "adam"
average_every = 100
[network]
model = "ideal"
[[devices]]
count = 4
tflops = 2
ram_gb = 8
up_mbps = 20
down_mbps = 100
latency_ms = 30
[[devices]]
count = 3
tflops = 10
ram_gb = 16
up_mbps = 50
down_mbps = 300
latency_ms = 15
[[devices]]
count = 1
tflops = 40
ram_gb = 32
up_mbps = 100
down_mbps = 500
latency_ms = 10
)";
  const std::string method = GENERATE("greedy", "ga", "exhaustive");
  // (manual and ravnest-ga keep their layouts: the user's, the reference's.)
  for (const std::string& text :
       {consumer + planner_section(method), toml_of(random_pool(3, 8), planner_section(method)),
        toml_of(random_pool(8, 10, 0.02, 0.2), planner_section(method))}) {
    test::Prepared p;
    try {
      p = test::prepare(text, {}, false);
    } catch (const ScenarioError& e) {
      FAIL(method << " refused a pool: " << e.what());
    }
    check_valid(p);
    CostModel cost(p.scenario, p.model);
    const ModelDesc& m = p.model;
    for (const ClusterPlan& c : p.plan.clusters) {
      std::vector<int> order, cuts{0};
      for (const StagePlan& s : c.stages) {
        order.push_back(s.node);
        cuts.push_back(s.layer_end);
      }
      const double period = cost.cluster_period(order, cuts);
      for (size_t s = 0; s < order.size() && order.size() > 1; ++s) {
        if (m.state_offset(cuts[s]) != m.state_offset(cuts[s + 1])) continue;
        // A stage without state: merging it into either neighbour must be slower or not fit.
        for (const bool into_next : {false, true}) {
          if (into_next ? s + 1 >= order.size() : s == 0) continue;
          std::vector<int> o = order, k = cuts;
          o.erase(o.begin() + static_cast<std::ptrdiff_t>(s));
          k.erase(k.begin() + static_cast<std::ptrdiff_t>(into_next ? s + 1 : s));
          bool fits = true;
          for (size_t u = 0; u < o.size(); ++u)
            fits =
                fits && cost.fits(o[u], k[u], k[u + 1], cost.in_flight(static_cast<int>(o.size())));
          INFO(method << ": " << to_json(p.plan).dump() << ", stage " << s);
          CHECK((!fits || cost.cluster_period(o, k) > period * (1 + 1e-12)));
        }
      }
    }
  }
}

TEST_CASE("the genetic algorithms stop at their budget of evaluations and record it",
          "[planner][methods]") {
  const std::string method = GENERATE("ga", "ravnest-ga");
  INFO(method);
  const auto pool = fixed_pool();
  // Defaults: the whole search fits the default budget, and plan.json says how much it used.
  const Plan full = plan_of(pool, planner_section(method));
  CHECK(full.search_evaluations > 0);
  CHECK(full.search_evaluations <= full.search_budget);
  CHECK_FALSE(full.search_timed_out);
  CHECK(plan_from_json(to_json(full)).search_evaluations == full.search_evaluations);
  // A million generations asked, 300 evaluations allowed: the search ends there, and the same
  // way every time (the plan depends on the scenario only).
  const std::string capped =
      planner_section(method, "generations = 1000000\nevaluations = 300\npopulation = 20\n");
  const Plan a = plan_of(pool, capped), b = plan_of(pool, capped);
  CHECK(a.search_budget == 300);
  CHECK(a.search_evaluations <= 300);
  CHECK(a.search_evaluations >= 280);  // 20 per generation: 15 generations, nothing left unspent
  CHECK(to_json(a).dump() == to_json(b).dump());
  // A population whose genes would not fit in memory is refused, naming the key.
  try {
    plan_of(random_pool(3, 2000, 1, 2),
            planner_section(method, "population = 100000\nevaluations = 1000000\n"));
    FAIL("accepted");
  } catch (const ScenarioError& e) {
    CHECK(e.key() == "planner.population");
  }
}

TEST_CASE("PipelineMemo answers exactly what best_pipeline() does, for any list of a pool's nodes",
          "[planner][methods]") {
  // Three device groups of six alike nodes: lists with the same groups in the same places share
  // one remembered answer, their own nodes put in.
  std::ostringstream os;
  os << "name = \"memo\"\nseed = 3\n" << kModel << "\n";
  const std::vector<Node> kinds = {
      {0.05, 0.04, 100, 400, 5}, {0.01, 0.03, 20, 100, 20}, {0.002, 0.09, 10, 50, 40}};
  for (size_t g = 0; g < kinds.size(); ++g) {
    const Node& n = kinds[g];
    os << "[[devices]]\nname = \"g" << g << "\"\ncount = 6\ntflops = " << n.tflops
       << "\nram_gb = " << n.ram_gb << "\nup_mbps = " << n.up << "\ndown_mbps = " << n.down
       << "\nlatency_ms = " << n.latency << "\n";
  }
  const Scenario s = parse_scenario(os.str(), "memo.toml");
  const ModelDesc model = build_model(s);
  const CostModel cost(s, model);
  const LayerGraph graph(model);
  PipelineMemo memo(cost, graph.cuttable());
  std::mt19937_64 rng(7);
  int answered = 0;
  for (int trial = 0; trial < 400; ++trial) {
    std::vector<int> all(18);
    std::iota(all.begin(), all.end(), 0);
    std::shuffle(all.begin(), all.end(), rng);
    std::vector<int> nodes(all.begin(), all.begin() + 1 + static_cast<int>(rng() % 9));
    if (trial % 2 == 0) std::sort(nodes.begin(), nodes.end());  // as the ga lists members
    INFO("trial " << trial);
    const std::optional<Partition> want = best_pipeline(cost, nodes, graph.cuttable());
    const std::optional<Partition> got = memo.best(nodes);
    REQUIRE(want.has_value() == got.has_value());
    if (!want) continue;
    ++answered;
    CHECK(got->order == want->order);
    CHECK(got->cuts == want->cuts);
    CHECK(got->bottleneck == want->bottleneck);
    CHECK(got->period == want->period);
  }
  CHECK(answered > 100);
  CHECK(memo.hits() > 50);  // the point of it: lists of alike nodes answered without a search
}
