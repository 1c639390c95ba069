// The planner's cost model against the simulator: predicted steady throughput of a cluster within
// 5% of the simulated one (8% where two flows share the bottleneck link), in compute-bound,
// bandwidth-bound and in-flight-bound pipelines, on both network models. (One simulation per test
// case: SimGrid allows one engine per process.)
#include <nlohmann/json.hpp>

#include "catch.h"
#include "core/output/run_output.h"
#include "planner/cost.h"
#include "sim/sim_runner.h"
#include "test_support.h"

using namespace rv;

namespace {

const char* kCluster = R"(
name = "cost"
[model]
head = "linear"
kind = "mlp"
hidden = [1024, 1024, 512]
[data]
kind = "synthetic"
side = 32
[training]
steps = 400
[sim]
mode = "timing"
[[devices]]
name = "a"
count = 2
tflops = 0.05
ram_gb = 8
up_mbps = 100
down_mbps = 200
latency_ms = 5
[[devices]]
name = "b"
count = 2
tflops = 0.2
ram_gb = 8
up_mbps = 50
down_mbps = 100
latency_ms = 10
)";

void check_prediction(const std::vector<std::string>& overrides, double tolerance = 0.05) {
  auto p = test::prepare(kCluster, overrides);
  const double predicted = p.plan.clusters.at(0).throughput;
  SimResult r = run_simulation(p.spec());
  auto s = summarize(p.scenario, p.plan, r.events, RunInfo{"sim", "timing", 0});
  const double simulated = s["steady_samples_per_s"].get<double>();
  INFO("predicted " << predicted << " samples/s, simulated " << simulated);
  CHECK(predicted == Approx(simulated).epsilon(tolerance));
}

}  // namespace

TEST_CASE("cost model: in-flight-bound pipeline, ideal network", "[planner][cost]") {
  check_prediction({"network.model=ideal"});
}
TEST_CASE("cost model: bandwidth-bound pipeline, ideal network", "[planner][cost]") {
  // Node 1's 5 Mbit/s uplink carries two connections, its activations out and its gradients back
  // (the bottleneck), and node 0's uplink half that load: mean-value analysis approximates a link
  // whose two FIFO connections share its rate (cost.cc), hence 8% where such a link is the
  // bottleneck (0.01% here; 7.3% under LV08, below).
  check_prediction({"network.model=ideal", "devices.0.up_mbps=5"}, 0.08);
}
TEST_CASE("cost model: saturated pipeline, ideal network", "[planner][cost]") {
  check_prediction({"network.model=ideal", "training.max_in_flight=12"});
}
TEST_CASE("cost model: compute-bound pipeline, ideal network", "[planner][cost]") {
  check_prediction({"network.model=ideal", "devices.0.tflops=0.002", "devices.1.tflops=0.004",
                    "training.max_in_flight=8"});
}
TEST_CASE("cost model: in-flight-bound pipeline, LV08 network", "[planner][cost]") {
  check_prediction({"network.model=lv08"});
}
TEST_CASE("cost model: bandwidth-bound pipeline, LV08 network", "[planner][cost]") {
  check_prediction({"network.model=lv08", "devices.0.up_mbps=5"}, 0.08);
}
TEST_CASE("cost model: latency-heavy pipeline, LV08 network", "[planner][cost]") {
  check_prediction({"network.model=lv08", "devices.0.latency_ms=40"});
}
TEST_CASE("cost model: saturated pipeline, LV08 network", "[planner][cost]") {
  check_prediction({"network.model=lv08", "training.max_in_flight=12"});
}
TEST_CASE("a plan states its reason: the bottleneck station and what bounds it",
          "[planner][cost]") {
  auto reason = [](const std::vector<std::string>& overrides) {
    return test::prepare(kCluster, overrides, false).plan.reason;
  };
  const std::string bandwidth = reason({"network.model=ideal", "devices.0.up_mbps=5"});
  INFO(bandwidth);
  CHECK(bandwidth.find("bottleneck: the uplink of node 1 (a) (5 Mbit/s)") == 0);
  CHECK(bandwidth.find("4 of 4 nodes used") != std::string::npos);
  const std::string compute = reason({"network.model=ideal", "devices.0.tflops=0.002",
                                      "devices.1.tflops=0.004", "training.max_in_flight=8"});
  INFO(compute);
  CHECK(compute.find("bottleneck: the compute of stage") == 0);
  CHECK(compute.find("(a)") != std::string::npos);
  const std::string round_trip =
      reason({"network.model=lv08", "devices.0.latency_ms=40", "training.max_in_flight=1"});
  INFO(round_trip);
  CHECK(round_trip.find("bound by its round trip") != std::string::npos);
  // It travels with the plan.
  const Plan p = test::prepare(kCluster, {"network.model=ideal"}, false).plan;
  CHECK(plan_from_json(to_json(p)).reason == p.reason);
}

TEST_CASE("a plan names the approximations its prediction relies on, and only those",
          "[planner][cost]") {
  auto approximations = [](const std::vector<std::string>& overrides) {
    const Plan p = test::prepare(kCluster, overrides, false).plan;
    CHECK(plan_from_json(to_json(p)).approximations == p.approximations);  // in plan.json
    std::string all;
    for (const auto& a : p.approximations) all += a + "\n";
    return all;
  };
  // Enough in flight on an ideal network: the slowest station sets the period, no approximation.
  CHECK(approximations({"network.model=ideal", "training.max_in_flight=8"}).empty());
  // One micro-batch in flight over 40 ms links: the round trip sets it, by mean-value analysis.
  const std::string round_trip = approximations(
      {"network.model=ideal", "devices.0.latency_ms=40", "training.max_in_flight=1"});
  INFO(round_trip);
  CHECK(round_trip.find("is set by the round trip") != std::string::npos);
  CHECK(round_trip.find("mean-value analysis") != std::string::npos);
  // Under tcp, one small message at a time over fast, long links: TCP BBR's warm floor holds the
  // flows (a round trip of 160 ms against 2 ms of bytes).
  const std::string floor =
      approximations({"network.model=tcp", "training.max_in_flight=1", "devices.0.latency_ms=40",
                      "devices.1.latency_ms=40", "devices.0.up_mbps=1000", "devices.1.up_mbps=1000",
                      "devices.0.down_mbps=1000", "devices.1.down_mbps=1000"});
  INFO(floor);
  CHECK(floor.find("held by TCP BBR's warm floor") != std::string::npos);
  // The shipped geo-regions scenario's greedy plan: pipelines of several clusters cross the
  // Virginia-Oregon link, whose queueing the planner takes by its mean load.
  Scenario geo = load_scenario(test::source_path("scenarios/geo-regions.toml"));
  geo.planner.method = PlannerMethod::kGreedy;
  const ModelDesc model = build_model(geo);
  const Plan greedy = make_plan(geo, model);
  std::string shared;
  for (const auto& a : greedy.approximations)
    if (a.find("queueing on the link from region") == 0) shared += a;
  INFO(shared);
  CHECK(shared.find("modeled by its mean load") != std::string::npos);
  CHECK(shared.find("clusters 0") != std::string::npos);
}

TEST_CASE("cost model: a single transfer costs latency x 13.01 and bandwidth x 0.97 under LV08",
          "[planner][cost]") {
  auto p = test::prepare(kCluster, {"network.model=lv08"}, false);
  CostModel cost(p.scenario, p.model);
  CHECK(cost.path_latency(0, 2) == Approx((0.005 + 0.010) * 13.01));
  CHECK(cost.path_bandwidth(0, 2) == Approx(std::min(100e6 / 8, 100e6 / 8) * 0.97));
}

namespace {

// C single-node clusters on equal links; one averaging after 10 local updates.
double simulated_averaging(int clusters, const std::string& network, double* predicted) {
  std::string toml = std::string(R"(
name = "avg"
[model]
head = "linear"
kind = "mlp"
hidden = [1024, 1024]
[data]
kind = "synthetic"
side = 32
[training]
steps = 10
average_every = 10
[sim]
mode = "timing"
[planner]
method = "manual"
)");
  for (int c = 0; c < clusters; ++c)
    toml += "[[planner.cluster]]\nnodes = [" + std::to_string(c) + "]\n";
  toml += "[network]\nmodel = \"" + network + "\"\n";
  toml += "[[devices]]\ncount = " + std::to_string(clusters) +
          "\ntflops = 1\nram_gb = 8\nup_mbps = 100\ndown_mbps = 100\nlatency_ms = 10\n";
  auto p = test::prepare(toml);
  *predicted = p.plan.averaging_time;
  SimResult r = run_simulation(p.spec());
  double start = 0, end = 0;
  for (const auto& e : r.events)
    if (e.kind == EventKind::kAverage) {
      start = std::max(start, e.start);
      end = std::max(end, e.end);
    }
  return end - start;
}

}  // namespace

TEST_CASE(
    "cost model: one averaging of 4 clusters, ideal network, equals 2(C-1)(latency + S/(C B))",
    "[planner][cost]") {
  double predicted = 0;
  const double simulated = simulated_averaging(4, "ideal", &predicted);
  // S = state bytes, B = 100 Mbit/s, latency 10 + 10 ms per hop.
  const double S = 4.0 * (1024 * 1024 + 1024 + 1024 * 1024 + 1024 + 1024 * 10 + 10);
  const double alpha_beta = 2 * 3 * (0.020 + S / 4 / (100e6 / 8));
  INFO("simulated " << simulated << " s, predicted " << predicted << " s, alpha-beta " << alpha_beta
                    << " s");
  CHECK(simulated == Approx(alpha_beta).epsilon(0.01));
  CHECK(predicted == Approx(simulated).epsilon(0.05));
}

TEST_CASE("cost model: one averaging of 3 clusters, LV08 network", "[planner][cost]") {
  double predicted = 0;
  const double simulated = simulated_averaging(3, "lv08", &predicted);
  INFO("simulated " << simulated << " s, predicted " << predicted << " s");
  CHECK(predicted == Approx(simulated).epsilon(0.05));
}

TEST_CASE("a drained pipeline's micro-batches between two exchanges, by hand", "[planner][cost]") {
  // Round trip 1 s, bottleneck 0.3 s, 2 in flight: the round trip binds (2 x 0.3 < 1); the
  // micro-batches come back in waves of two, one round trip apart, 0.3 s apart within a wave.
  CostModel::Fill f{1.0, 0.3, 2};
  CHECK(CostModel::drained_time(f, 0.5, 4) == Approx(2.3));  // 1, 1.3, 2, 2.3
  CHECK(CostModel::drained_time(f, 0.5, 5) == Approx(3.0));  // ..., 3
  CHECK(CostModel::drained_time(f, 0.5, 1) == Approx(1.0));
  // A station binds (4 x 0.5 > 1): the first back after a round trip, the others 0.5 s apart.
  CostModel::Fill g{1.0, 0.5, 4};
  CHECK(CostModel::drained_time(g, 0.5, 5) == Approx(3.0));  // 1, 1.5, 2, 2.5, 3
  // Never fewer than the steady periods (a period above both bounds: queueing).
  CHECK(CostModel::drained_time(g, 0.9, 5) == Approx(4.5));
  CHECK(CostModel::drained_time(g, 0.5, 0) == 0);
}
