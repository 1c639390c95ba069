// network.topology = "regions" (core/network/links.h): the scenario's checks, one route definition
// in the simulator and the planner's cost model (the emulator's is checked against the simulator in
// test_star_shaper.cc), and the planner's clusters following the regions where that is faster.
#include <algorithm>
#include <set>
#include <sstream>

#include "catch.h"
#include "core/network/links.h"
#include "planner/cost.h"
#include "scenario_errors.h"
#include "sim/sim_runner.h"
#include "test_support.h"

using namespace rv;

namespace {

// Two regions of four nodes each; nodes' own links fast, the link between the regions slow.
// The 10-layer MLP (30 MB of weights and gradients) needs four of these nodes per cluster.
std::string two_regions(const std::string& planner, double between_mbps = 20,
                        double between_ms = 80) {
  std::ostringstream os;
  os << R"(name = "regions"
seed = 3
[model]
kind = "mlp"
head = "linear"
hidden = [1024, 1024, 1024, 512]
[data]
kind = "synthetic"
side = 32
batch_size = 64
[training]
average_every = 500
[sim]
mode = "timing"
[network]
topology = "regions"
model = "ideal"
[[network.link]]
a = "east"
b = "west"
latency_ms = )"
     << between_ms << "\nmbps = " << between_mbps << "\n"
     << planner << R"(
[[devices]]
name = "e"
count = 4
region = "east"
tflops = 0.01
ram_gb = 0.025
up_mbps = 500
down_mbps = 500
latency_ms = 5
[[devices]]
name = "w"
count = 4
region = "west"
tflops = 0.01
ram_gb = 0.025
up_mbps = 500
down_mbps = 500
latency_ms = 5
)";
  return os.str();
}

// A [planner] table of two clusters given by hand (each a TOML list of nodes in pipeline order).
std::string manual_clusters(const std::string& first, const std::string& second) {
  return "[planner]\nmethod = \"manual\"\n[[planner.cluster]]\nnodes = " + first +
         "\n[[planner.cluster]]\nnodes = " + second + "\n";
}

// The region of every node of each cluster of `plan`.
std::vector<std::set<int>> cluster_regions(const Plan& plan, const NetworkLinks& links) {
  std::vector<std::set<int>> out;
  for (const ClusterPlan& c : plan.clusters) {
    std::set<int> r;
    for (const StagePlan& s : c.stages) r.insert(links.region[static_cast<size_t>(s.node)]);
    out.push_back(r);
  }
  return out;
}

}  // namespace

TEST_CASE("a region or a link between regions is refused where it would do nothing", "[regions]") {
  using test::error_of;
  CHECK_THAT(error_of("name = \"x\"\n[[devices]]\nregion = \"eu\"\n"),
             Catch::Contains("devices[0].region") && Catch::Contains("does nothing"));
  CHECK_THAT(error_of("name = \"x\"\n[[devices]]\n[[network.link]]\na = \"x\"\nb = \"y\"\n"),
             Catch::Contains("network.link[0]") && Catch::Contains("does nothing"));
  const std::string regions = "name = \"x\"\n[network]\ntopology = \"regions\"\n";
  CHECK_THAT(error_of(regions + "[[devices]]\nregion = \"eu>us\"\n"),
             Catch::Contains("devices[0].region") && Catch::Contains("letters, digits"));
  CHECK_THAT(error_of(regions + "[[devices]]\nregion = \"eu\"\n[[devices]]\n"),
             Catch::Contains("devices[1].region") && Catch::Contains("missing"));
  CHECK_THAT(error_of(regions + "[[devices]]\nregion = \"eu\"\n[[devices]]\nregion = \"us\"\n"),
             Catch::Contains("\"eu\" and \"us\"") && Catch::Contains("needs one"));
  const std::string pair = regions + "[[devices]]\nregion = \"eu\"\n[[devices]]\nregion = \"us\"\n";
  CHECK_THAT(
      error_of(pair + "[[network.link]]\na = \"eu\"\nb = \"asia\"\n"),
      Catch::Contains("network.link[0].b") && Catch::Contains("no device is in region \"asia\""));
  CHECK_THAT(error_of(pair + "[[network.link]]\na = \"eu\"\nb = \"eu\"\n"),
             Catch::Contains("network.link[0].b") && Catch::Contains("two different regions"));
  CHECK_THAT(error_of(pair + "[[network.link]]\na = \"eu\"\n"),
             Catch::Contains("network.link[0].b") && Catch::Contains("missing"));
  CHECK_THAT(
      error_of(
          pair +
          "[[network.link]]\na = \"eu\"\nb = \"us\"\n[[network.link]]\na = \"us\"\nb = \"eu\"\n"),
      Catch::Contains("network.link[1]") && Catch::Contains("already joined by network.link[0]"));
  CHECK_THAT(error_of(pair + "[[network.link]]\na = \"eu\"\nb = \"us\"\nmbps = 0\n"),
             Catch::Contains("network.link[0].mbps"));
  // A valid one reads back from its resolved copy.
  const Scenario s = parse_scenario(
      pair + "[[network.link]]\na = \"eu\"\nb = \"us\"\nlatency_ms = 67\nmbps = 790\n", "ok.toml");
  const Scenario back = parse_scenario(to_toml(s), "resolved.toml");
  REQUIRE(back.network.link.size() == 1);
  CHECK(back.network.link[0].mbps == 790);
  CHECK(back.devices[1].region == "us");
}

TEST_CASE(
    "links_of: a message between regions crosses the sender's uplink and the regions' link and "
    "the receiver's downlink",
    "[regions]") {
  const Scenario s = parse_scenario(two_regions("", 5, 80), "regions.toml");
  const NetworkLinks links = links_of(s);
  REQUIRE(links.regions == 2);
  CHECK(links.region == std::vector<int>{0, 0, 0, 0, 1, 1, 1, 1});
  CHECK(links.inter(0, 3) == -1);
  CHECK(links.route_latency(0, 3) == Approx(0.010));
  CHECK(links.route_latency(0, 5) == Approx(0.090));
  CHECK(links.route_bandwidth(0, 5) == Approx(5 * kMbpsToBytesPerSecond));
  CHECK(links.route_bandwidth(5, 0) == Approx(5 * kMbpsToBytesPerSecond));
  CHECK(links.route_bandwidth(1, 2) == Approx(500 * kMbpsToBytesPerSecond));
  // The planner's cost model charges the same routes.
  const ModelDesc model = build_model(s);
  const CostModel cost(s, model);
  CHECK(cost.path_latency(0, 5) == Approx(links.route_delay(0, 5)));
  CHECK(cost.path_bandwidth(0, 5) == Approx(links.route_bandwidth(0, 5)));
  CHECK(cost.path_latency(1, 2) == Approx(links.route_delay(1, 2)));
}

TEST_CASE(
    "a simulated message between regions takes the three links' latency plus its bytes over "
    "the slowest and two share the link",
    "[regions][sim]") {
  const Scenario s = parse_scenario(two_regions("", 5, 80), "regions.toml");
  std::vector<int> nodes(8);
  for (int i = 0; i < 8; ++i) nodes[i] = i;
  const Bytes bytes = 1'000'000;
  std::vector<Seconds> arrived(8, -1);
  simulate(s, nodes, false, [&](NodeEnv& env, int node) {
    if (node == 0 || node == 1) {
      Message m;
      m.kind = MsgKind::kForward;
      m.bytes = bytes;
      env.transport.send(node == 0 ? 4 : 5, std::move(m));
      env.transport.flush();
    } else if (node == 4 || node == 5) {
      env.transport.recv();
      arrived[static_cast<size_t>(node)] = env.clock.now();
    }
  });
  // Both cross east -> west at once: 2.5 Mbit/s each.
  const double expected = 0.005 + 0.080 + 0.005 + bytes / (2.5 * kMbpsToBytesPerSecond);
  CHECK(arrived[4] == Approx(expected).epsilon(1e-6));
  CHECK(arrived[5] == Approx(expected).epsilon(1e-6));
}

TEST_CASE("the planner's clusters follow the regions where that is faster", "[regions][planner]") {
  for (const char* method : {"ga", "exhaustive"}) {
    INFO("method " << method);
    const test::Prepared p = test::prepare(
        two_regions(std::string("[planner]\nmethod = \"") + method + "\"\n"), {}, false);
    const NetworkLinks links = links_of(p.scenario);
    REQUIRE(p.plan.clusters.size() >= 2);
    for (const std::set<int>& r : cluster_regions(p.plan, links)) CHECK(r.size() == 1);
    // Both regions train.
    std::set<int> used;
    for (const std::set<int>& r : cluster_regions(p.plan, links)) used.insert(r.begin(), r.end());
    CHECK(used.size() == 2);
  }
  // Clusters that straddle the regions, by hand: predicted slower.
  const std::string straddle = manual_clusters("[0, 1, 4, 5]", "[6, 7, 2, 3]");
  const std::string local = manual_clusters("[0, 1, 2, 3]", "[4, 5, 6, 7]");
  const test::Prepared across = test::prepare(two_regions(straddle), {}, false);
  const test::Prepared within = test::prepare(two_regions(local), {}, false);
  const test::Prepared ga = test::prepare(two_regions("[planner]\nmethod = \"ga\"\n"), {}, false);
  INFO("straddling " << across.plan.throughput << ", within regions " << within.plan.throughput
                     << ", ga " << ga.plan.throughput);
  CHECK(across.plan.throughput < 0.5 * within.plan.throughput);
  CHECK(ga.plan.throughput >= within.plan.throughput * (1 - 1e-9));
  // With a link between the regions as fast as the nodes' own, straddling costs only latency.
  const test::Prepared fast = test::prepare(two_regions(straddle, 5000, 0), {}, false);
  CHECK(fast.plan.throughput > 0.9 * within.plan.throughput);
}

TEST_CASE(
    "the shipped geo-regions scenario: ga keeps each pipeline in one city and beats greedy "
    "whose pipelines cross them",
    "[regions][planner]") {
  const Scenario s = load_scenario(test::source_path("scenarios/geo-regions.toml"));
  const ModelDesc model = build_model(s);
  const Plan ga = make_plan(s, model);
  const NetworkLinks links = links_of(s);
  std::set<int> used;
  for (const std::set<int>& r : cluster_regions(ga, links)) {
    CHECK(r.size() == 1);
    used.insert(r.begin(), r.end());
  }
  CHECK(used.size() >= 2);
  Scenario blind = s;
  blind.planner.method = PlannerMethod::kGreedy;
  const Plan greedy = make_plan(blind, model);
  bool crosses = false;
  for (const std::set<int>& r : cluster_regions(greedy, links)) crosses |= r.size() > 1;
  CHECK(crosses);
  CHECK(greedy.throughput < 0.8 * ga.throughput);
}

TEST_CASE(
    "the shipped geo-regions scenario: ga's plan is the same for seeds 1-10, never below "
    "greedy's",
    "[regions][planner]") {
  // Before the seeds by region and the local search (planner/ga.cc), ga's plans for these seeds
  // were 35.8% apart: three clusters or four, found or not by chance.
  Scenario s = load_scenario(test::source_path("scenarios/geo-regions.toml"));
  const ModelDesc model = build_model(s);
  Scenario blind = s;
  blind.planner.method = PlannerMethod::kGreedy;
  const double greedy = make_plan(blind, model).throughput;
  double lo = 1e300, hi = 0;
  for (uint64_t seed = 1; seed <= 10; ++seed) {
    s.seed = seed;
    const double t = make_plan(s, model).throughput;
    lo = std::min(lo, t);
    hi = std::max(hi, t);
    CHECK(t >= greedy);
  }
  INFO("ga over seeds 1-10: " << lo << " .. " << hi << " samples/s");
  CHECK(hi <= 1.01 * lo);
}
