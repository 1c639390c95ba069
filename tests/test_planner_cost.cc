// The planner's cost model against the simulator: predicted steady throughput of a cluster within
// 5% of the simulated one, in compute-bound, bandwidth-bound and in-flight-bound pipelines, on
// both network models. (One simulation per test case: SimGrid allows one engine per process.)
#include "catch.h"

#include <nlohmann/json.hpp>

#include "core/run_output.h"
#include "planner/cost.h"
#include "sim/sim_runner.h"
#include "test_support.h"

using namespace rv;

namespace {

const char* kCluster = R"(
name = "cost"
[model]
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

void check_prediction(const std::vector<std::string>& overrides) {
  auto p = test::prepare(kCluster, overrides);
  const double predicted = p.plan.clusters.at(0).throughput;
  SimResult r = run_simulation(p.spec());
  auto s = summarize(p.scenario, p.plan, r.events, RunInfo{"sim", "timing", 0});
  const double simulated = s["steady_samples_per_s"].get<double>();
  INFO("predicted " << predicted << " samples/s, simulated " << simulated);
  CHECK(predicted == Approx(simulated).epsilon(0.05));
}

}  // namespace

TEST_CASE("cost model: in-flight-bound pipeline, ideal network", "[planner][cost]") {
  check_prediction({"network.model=ideal"});
}
TEST_CASE("cost model: bandwidth-bound pipeline, ideal network", "[planner][cost]") {
  check_prediction({"network.model=ideal", "devices.0.up_mbps=5"});
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
  check_prediction({"network.model=lv08", "devices.0.up_mbps=5"});
}
TEST_CASE("cost model: latency-heavy pipeline, LV08 network", "[planner][cost]") {
  check_prediction({"network.model=lv08", "devices.0.latency_ms=40"});
}
TEST_CASE("cost model: saturated pipeline, LV08 network", "[planner][cost]") {
  check_prediction({"network.model=lv08", "training.max_in_flight=12"});
}
TEST_CASE("cost model: a single transfer costs latency x 13.01 and bandwidth x 0.97 under LV08", "[planner][cost]") {
  auto p = test::prepare(kCluster, {"network.model=lv08"}, false);
  CostModel cost(p.scenario, p.model);
  CHECK(cost.path_latency(0, 2) == Approx((0.005 + 0.010) * 13.01));
  CHECK(cost.path_bandwidth(0, 2) == Approx(std::min(100e6 / 8, 100e6 / 8) * 0.97));
}
