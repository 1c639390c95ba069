// Training in the simulator with real maths: the ravnest pipeline learns Fashion-MNIST.
#include <nlohmann/json.hpp>

#include "catch.h"
#include "core/output/run_output.h"
#include "sim/sim_runner.h"
#include "test_support.h"

using namespace rv;

TEST_CASE("ravnest pipeline reaches 80% on Fashion-MNIST in simulation", "[sim][slow]") {
  auto p = test::prepare(R"(
name = "fmnist-test"
seed = 7
[model]
head = "linear"
kind = "mlp"
hidden = [256, 128]
[data]
kind = "fashion-mnist"
batch_size = 64
[training]
algorithm = "ravnest"
lr = 0.1
steps = 1500
eval_every = 500
[[devices]]
count = 2
tflops = 0.5
ram_gb = 8
up_mbps = 20
down_mbps = 100
latency_ms = 30
[[devices]]
count = 2
tflops = 8
ram_gb = 32
up_mbps = 50
down_mbps = 300
latency_ms = 15
)");
  REQUIRE(p.plan.clusters.at(0).stages.size() == 4);
  SimResult r = run_simulation(p.spec());
  auto summary = summarize(p.scenario, p.plan, r.events, RunInfo{"sim", "numeric", 0});
  INFO(summary.dump(2));
  const double acc = summary["final"]["test_accuracy"].get<double>();
  CHECK(acc >= 0.80);
  CHECK(summary["train_samples"].get<int64_t>() == 1500 * 64);
  // The pipeline really is asynchronous: some updates are stale, never beyond the in-flight cap.
  CHECK(summary["staleness"]["max"].get<int64_t>() >= 1);
  CHECK(summary["staleness"]["max"].get<int64_t>() <= 4);
}
