// The algorithm x executor matrix (in the manner of Gloo's algorithm x transport x size tests):
// every algorithm the registry holds runs one small scenario under the three executors, from the
// command line as a user runs them: `ravnest sim` (SimGrid), `ravnest sim --executor loopback`
// (threads) and `ravnest real` (processes over c10d/Gloo). An algorithm added to the registry is
// in the matrix without a line here.
//
// The scenario keeps one micro-batch in flight per pipeline and averages in bulk, so that what an
// algorithm computes does not depend on when messages arrive: the simulator and the loopback must
// then record the same training losses, micro-batch by micro-batch, to the digits metrics.csv
// keeps; the real processes the same within kRealTolerance (its all-reduces may sum in another
// order). An algorithm whose maths depends on timing by design says why
// (Algorithm::paced_by_clock).
#include <cmath>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <utility>

#include "algo/registry.h"
#include "catch.h"
#include "cli_support.h"
#include "core/output/event_schema.h"

using namespace rv;
using namespace rv::test;
namespace fs = std::filesystem;

namespace {

// Two clusters of two stages (pipeline algorithms), or four replicas (data-parallel ones).
constexpr const char* kScenario = R"(
name = "matrix"
seed = 5
[model]
hidden = [32, 16]
head = "linear"
[data]
kind = "synthetic"
side = 6
classes = 4
batch_size = 16
train_samples = 512
test_samples = 128
[training]
steps = 24
lr = 0.05
max_in_flight = 1
micro_batches = 2
average_every = 4
[planner]
method = "manual"
[[planner.cluster]]
nodes = [0, 1]
[[planner.cluster]]
nodes = [2, 3]
[[devices]]
count = 4
tflops = 0.05
up_mbps = 100
down_mbps = 100
latency_ms = 1
[network]
model = "ideal"
)";

// Relative difference allowed between a real run's losses and the simulator's.
constexpr double kRealTolerance = 1e-4;

// Algorithms whose maths depends on how fast each node goes, by design (Algorithm::paced_by_clock
// says why), and so differs between a modeled clock and a wall clock: their real runs' losses are
// compared in the mean only.
constexpr double kPacedTolerance = 0.05;

// (node, micro_batch) -> training loss, from a run folder's metrics.csv.
std::map<std::pair<int, int64_t>, double> losses(const fs::path& run) {
  std::istringstream rows(slurp(run / "metrics.csv"));
  std::map<std::pair<int, int64_t>, double> out;
  for (const Event& e : parse_events_csv(rows, (run / "metrics.csv").string()))
    if (e.kind == EventKind::kLoss) out[{e.node, e.micro_batch}] = e.loss;
  return out;
}

double mean(const std::map<std::pair<int, int64_t>, double>& m) {
  double sum = 0;
  for (const auto& [key, loss] : m) sum += loss;
  return m.empty() ? 0 : sum / static_cast<double>(m.size());
}

// The algorithm with the settings it is defined with (Algorithm::fixed).
std::vector<std::string> run_args(const Algorithm& a, const std::string& command,
                                  const std::string& dir) {
  std::vector<std::string> args = {command, "s.toml", "--run-dir",
                                   dir,     "--set",  std::string("training.algorithm=") + a.name};
  for (const FixedSetting& f : a.fixed)
    args.insert(args.end(), {"--set", std::string(f.key) + "=" + f.value});
  return args;
}

}  // namespace

TEST_CASE("every registered algorithm runs alike under the simulator, the loopback and processes",
          "[matrix][conformance][real]") {
  const fs::path d = fresh_dir("rv-matrix", "all");
  { std::ofstream(d / "s.toml") << kScenario; }
  for (const Algorithm& a : algorithms()) {
    INFO("algorithm " << a.name);
    const std::string sim = std::string("sim-") + a.name, loop = std::string("loop-") + a.name,
                      real = std::string("real-") + a.name;
    Result rs = ravnest(run_args(a, "sim", sim), d);
    INFO(rs.err);
    REQUIRE(rs.status == 0);
    std::vector<std::string> loop_args = run_args(a, "sim", loop);
    loop_args.insert(loop_args.end(), {"--executor", "loopback"});
    Result rl = ravnest(loop_args, d);
    INFO(rl.err);
    REQUIRE(rl.status == 0);
    Result rr = ravnest(run_args(a, "real", real), d);
    INFO(rr.err);
    REQUIRE(rr.status == 0);

    auto plan = [&](const std::string& run) {
      return nlohmann::json::parse(slurp(d / run / "plan.json"));
    };
    CHECK(plan(loop) == plan(sim));
    CHECK(plan(real) == plan(sim));
    const auto ls = losses(d / sim), ll = losses(d / loop), lr = losses(d / real);
    REQUIRE(ls.size() >= 8);
    if (a.paced_by_clock != nullptr) {
      INFO("compared in the mean: " << a.paced_by_clock);
      CHECK(std::abs(mean(ll) - mean(ls)) <= kPacedTolerance * mean(ls));
      CHECK(std::abs(mean(lr) - mean(ls)) <= kPacedTolerance * mean(ls));
      continue;
    }
    // The same micro-batches trained, with the same losses.
    CHECK(ll == ls);
    REQUIRE(lr.size() == ls.size());
    for (const auto& [key, loss] : ls) {
      INFO("node " << key.first << " micro-batch " << key.second << ": sim " << loss);
      REQUIRE(lr.count(key) == 1);
      CHECK(std::abs(lr.at(key) - loss) <= kRealTolerance * std::abs(loss));
    }
  }
  fs::remove_all(d);
}
