// Cross-executor conformance: the same scenario on the loopback transport (threads, wall clock)
// and in SimGrid (modeled time) uses the same plan and reaches comparable loss and accuracy.
// (The real-process executor joins this comparison in test_cli.)
#include <cmath>
#include <nlohmann/json.hpp>

#include "catch.h"
#include "core/output/run_output.h"
#include "core/plan.h"
#include "loopback/loopback.h"
#include "sim/sim_runner.h"
#include "test_support.h"

using namespace rv;

TEST_CASE("loopback and SimGrid agree on the plan and reach comparable loss", "[conformance]") {
  const char* scenario = R"(
name = "conformance"
seed = 3
[model]
head = "linear"
kind = "cnn"
channels = [8, 16]
hidden = [32]
dropout = 0.1
[data]
kind = "digits"
batch_size = 32
[training]
algorithm = "ravnest"
optimizer = "adam"
lr = 0.003
steps = 300
[[devices]]
count = 3
ram_gb = 8
up_mbps = 10
down_mbps = 10
latency_ms = 20
)";
  auto p = test::prepare(scenario);
  auto loop =
      summarize(p.scenario, p.plan, run_loopback(p.spec(), 60), RunInfo{"loopback", "cpu", 0});
  auto sim =
      summarize(p.scenario, p.plan, run_simulation(p.spec()).events, RunInfo{"sim", "numeric", 0});
  auto q = test::prepare(scenario);  // planning again gives the same plan
  CHECK(to_json(q.plan) == to_json(p.plan));
  INFO("loopback: " << loop["final"].dump() << "\nsim: " << sim["final"].dump());
  const double acc_loop = loop["final"]["test_accuracy"].get<double>();
  const double acc_sim = sim["final"]["test_accuracy"].get<double>();
  // Stated tolerance: final test accuracy within 5 points, final test loss within 25%.
  CHECK(acc_loop > 0.85);
  CHECK(acc_sim > 0.85);
  CHECK(std::abs(acc_loop - acc_sim) <= 0.05);
  const double l_loop = loop["final"]["test_loss"].get<double>();
  const double l_sim = sim["final"]["test_loss"].get<double>();
  CHECK(std::abs(l_loop - l_sim) <= 0.25 * std::max(l_loop, l_sim));
  CHECK(loop["train_samples"] == sim["train_samples"]);
}
