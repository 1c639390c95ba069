// The algorithm registry: traits drive the planner and the cost model, and no other source file
// compares an algorithm's name.
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include "algo/registry.h"
#include "catch.h"
#include "core/error.h"
#include "core/scenario/keys.h"
#include "planner/cost.h"
#include "readme_keys.h"
#include "test_support.h"

using namespace rv;
namespace fs = std::filesystem;

namespace {

const char* kPipeline = R"(name = "reg"
[model]
head = "linear"
hidden = [32]
[data]
kind = "synthetic"
[training]
micro_batches = 6
max_in_flight = 3
average_every = 7
weight_stashing = false
[[devices]]
count = 4
)";

std::string read(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

TEST_CASE("every registered algorithm is found by its name, and only by it", "[registry]") {
  REQUIRE(algorithms().size() >= 3);
  for (const Algorithm& a : algorithms()) {
    Scenario s = parse_scenario(kPipeline, "reg.toml",
                                {std::string("training.algorithm=\"") + a.name + "\""});
    CHECK(&algorithm_of(s) == &a);
    CHECK(a.run != nullptr);
    CHECK(std::string(a.summary).size() > 10);
  }
  Scenario s =
      parse_scenario(std::string(kPipeline) + "", "reg.toml", {"training.algorithm=\"nope\""});
  try {
    algorithm_of(s);
    FAIL("no error for an unknown algorithm");
  } catch (const ScenarioError& e) {
    CHECK(e.key() == "training.algorithm");
    CHECK(std::string(e.what()).find("unknown value 'nope'") != std::string::npos);
    for (const Algorithm& a : algorithms())
      CHECK(std::string(e.what()).find(a.name) != std::string::npos);
  }
}

TEST_CASE("an unknown algorithm in a file is reported at its line", "[registry]") {
  Scenario s = parse_scenario(
      "name = \"x\"\n[training]\nalgorithm = \"nope\"\n[[devices]]\ncount = 2\n", "x.toml");
  try {
    algorithm_of(s);
    FAIL("no error");
  } catch (const ScenarioError& e) {
    CHECK(e.where() == "x.toml:3");
  }
}

TEST_CASE("traits decide in-flight micro-batches, stashing and the exchange period", "[registry]") {
  for (const Algorithm& a : algorithms()) {
    Scenario s = parse_scenario(kPipeline, "reg.toml",
                                {std::string("training.algorithm=\"") + a.name + "\""});
    INFO(a.name);
    const TrainingSpec t = effective_training(s);
    CHECK(t.weight_stashing == a.traits.forces_weight_stashing);
    const int64_t f = in_flight(a, t, 4);
    switch (a.traits.in_flight) {
      case InFlightRule::kMaxInFlight:
        CHECK(f == 3);
        break;
      case InFlightRule::kMicroBatches:
        CHECK(f == 6);
        break;
      case InFlightRule::kOne:
        CHECK(f == 1);
        break;
      case InFlightRule::kStages:
        CHECK(f == 4);
        break;
    }
    const int64_t per_update = a.traits.schedule == Schedule::kFlush ? 6 : 1;
    const int64_t updates = a.traits.exchange == Exchange::kParameters ? 7 : 1;
    CHECK(micro_batches_per_exchange(a, t, 16, 4) == per_update * updates);
    // A target batch: each of 4 clusters trains its share of 200 samples in micro-batches of 16,
    // rounded up (a quarter of 200 is 50: 3.125 micro-batches).
    TrainingSpec target = t;
    target.target_batch = 200;
    CHECK(micro_batches_per_exchange(a, target, 16, 4) ==
          (a.traits.target_batch ? 4 : per_update * updates));
  }
  // "stages" means one in flight per stage.
  Scenario s = parse_scenario(kPipeline, "reg.toml", {"training.max_in_flight=\"stages\""});
  CHECK(in_flight(algorithm_of(s), s.training, 5) == 5);
}

TEST_CASE("the cost model charges what the registry says", "[registry][planner]") {
  for (const Algorithm& a : algorithms()) {
    if (a.traits.layout != Layout::kPipelines) continue;
    auto p =
        test::prepare(kPipeline, {std::string("training.algorithm=\"") + a.name + "\""}, false);
    CostModel cost(p.scenario, p.model);
    INFO(a.name);
    CHECK(cost.in_flight(2) == in_flight(a, effective_training(p.scenario), 2));
    CHECK(cost.micro_batches_per_exchange(3) ==
          micro_batches_per_exchange(a, effective_training(p.scenario), p.scenario.data.batch_size,
                                     3));
    CHECK(cost.training().weight_stashing == effective_training(p.scenario).weight_stashing);
  }
}

TEST_CASE("replica algorithms get one whole-model cluster per node", "[registry][planner]") {
  for (const Algorithm& a : algorithms()) {
    if (a.traits.layout != Layout::kReplicas) continue;
    auto p =
        test::prepare(kPipeline, {std::string("training.algorithm=\"") + a.name + "\""}, false);
    CHECK(p.plan.clusters.size() == 4);
    CHECK(p.plan.method == a.name);
    for (const auto& c : p.plan.clusters) CHECK(c.stages.size() == 1);
  }
}

TEST_CASE("the variant label names what is not the default", "[registry]") {
  Scenario s = parse_scenario(kPipeline, "reg.toml");
  const std::string name = algorithm_of(s).name;
  CHECK(variant_label(s) == name);
  s = parse_scenario(kPipeline, "reg.toml",
                     {"training.averaging=\"overlapped\"", "training.allreduce=\"single-ring\""});
  CHECK(variant_label(s) == name + " overlapped single-ring");
}

// Adding an algorithm is one file plus one registry entry: no other source may spell a registered
// name as a string literal (a comparison, a switch by name, a special case). The struct's default
// value of training.algorithm is the one exception.
TEST_CASE("no source outside the registry compares an algorithm's name", "[registry]") {
  const fs::path root = RV_SOURCE_DIR;
  std::vector<std::string> names = algorithm_names();
  std::vector<std::string> offenders;
  int scanned = 0;
  for (const char* dir :
       {"algo", "core", "planner", "sim", "real", "loopback", "exec", "cli", "analysis"}) {
    for (const auto& entry : fs::recursive_directory_iterator(root / dir)) {
      const fs::path& p = entry.path();
      const std::string ext = p.extension().string();
      if (!entry.is_regular_file() || (ext != ".cc" && ext != ".h" && ext != ".py")) continue;
      if (p.filename().string().rfind("test_", 0) == 0) continue;  // tests name what they test
      const std::string rel = fs::relative(p, root).string();
      if (rel == "algo/registry.cc") continue;
      ++scanned;
      std::istringstream lines(read(p));
      int n = 0;
      for (std::string line; std::getline(lines, line);) {
        ++n;
        for (const auto& name : names) {
          const std::string dq = "\"" + name + "\"", sq = "'" + name + "'";
          if (line.find(dq) == std::string::npos && line.find(sq) == std::string::npos) continue;
          const bool the_default =
              rel == "core/scenario/scenario.h" &&
              std::regex_search(line, std::regex(R"(std::string algorithm = ")"));
          if (!the_default) offenders.push_back(rel + ":" + std::to_string(n) + ": " + line);
        }
      }
    }
  }
  CHECK(scanned > 50);
  std::string all;
  for (const auto& o : offenders) all += o + "\n";
  INFO(all);
  CHECK(offenders.empty());
}

TEST_CASE("the README lists the registry's names as the choices of their keys",
          "[registry][keys]") {
  CHECK(test::readme_keys() == keys_markdown(registry_choices()));
}

TEST_CASE(
    "a target-batch round: each peer at its own pace until the target, then it finishes its "
    "micro-batch",
    "[registry][planner]") {
  // dedloc: every peer trains from the round's start; once the finished micro-batches hold the
  // target's samples, each peer finishes the one it is on. Peers of 0.1 s and 0.4 s per micro-batch
  // of B samples and a target of 25 B: the 25th micro-batch ends at 2.0 s (20 + 5), no other is
  // under way then, and without averaging the rate is the peers' summed one, B (1/0.1 + 1/0.4).
  auto p = test::prepare(kPipeline, {"training.algorithm=\"dedloc\""}, false);
  const int64_t b = p.scenario.data.batch_size;
  const TargetRound even = target_round({0.1, 0.4}, b, 25.0 * b);
  CHECK(even.samples == Approx(25.0 * b));
  CHECK(even.seconds == Approx(2.0));
  // Peers of 1 s and 10 s and a target of 2 B: the fast one's second micro-batch ends at 2 s, but
  // the slow one finishes its first at 10 s: 3 B in 10 s (the slowest bounds a round).
  const TargetRound uneven = target_round({1.0, 10.0}, b, 2.0 * b);
  CHECK(uneven.samples == Approx(3.0 * b));
  CHECK(uneven.seconds == Approx(10.0));
  // The cost model's throughput is the round's samples over its time and the exchange's.
  p = test::prepare(
      kPipeline,
      {"training.algorithm=\"dedloc\"", "training.target_batch=" + std::to_string(25 * b)}, false);
  const CostModel dedloc(p.scenario, p.model);
  CHECK(dedloc.throughput({0.1, 0.4}, 0.0) == Approx(b * (1 / 0.1 + 1 / 0.4)));
  CHECK(dedloc.throughput({0.1, 0.4}, 2.0) == Approx(25.0 * b / (2.0 + 2.0)));
  CHECK(dedloc.micro_batches_per_exchange(2) == 13);  // 25 B over 2 peers, rounded up
  // A synchronous gradient exchange (sync-dp) waits for the slower every step: 2 B / (0.4 + A).
  auto q = test::prepare(kPipeline, {"training.algorithm=\"sync-dp\""}, false);
  const CostModel sync(q.scenario, q.model);
  CHECK(sync.throughput({0.1, 0.4}, 2.0) == Approx(2.0 * b / (0.4 + 2.0)));
}
