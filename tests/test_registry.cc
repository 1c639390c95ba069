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
#include "snippets.h"
#include "test_support.h"

using namespace rv;
namespace fs = std::filesystem;

namespace {

const char* const kPipeline = test::kRegistryPipeline;

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
    target.algorithm_keys["target_batch"] = int64_t{200};
    CHECK(micro_batches_per_exchange(a, target, 16, 4) ==
          (a.hooks.target_batch != nullptr ? 4 : per_update * updates));
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

// Adding an algorithm is its file plus one registry line: no other source may spell a registered
// name as a string literal (a comparison, a switch by name, a special case). The struct's default
// value of training.algorithm and each file's own entry (`.name = "..."`) are the exceptions.
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
          // An algorithm's file names it in its registry entry.
          const bool own_entry =
              rel.rfind("algo/", 0) == 0 && line.find(".name = " + dq) != std::string::npos;
          if (!the_default && !own_entry)
            offenders.push_back(rel + ":" + std::to_string(n) + ": " + line);
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

namespace {

// The message of the ScenarioError that resolving `overrides` on kPipeline throws, or "".
std::string resolve_error(const std::vector<std::string>& overrides) {
  try {
    Scenario s = parse_scenario(kPipeline, "reg.toml", overrides);
    resolve_algorithm_keys(s);
  } catch (const ScenarioError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("an algorithm's own keys are checked against its rows and their defaults filled in",
          "[registry][keys]") {
  Scenario s = parse_scenario(kPipeline, "reg.toml",
                              {"training.algorithm=\"diloco\"", "training.outer_lr=1"});
  CHECK(s.training.algorithm_keys.at("outer_lr") == KeyValue(int64_t{1}));  // as read
  resolve_algorithm_keys(s);
  CHECK(s.training.algorithm_keys.at("outer_lr") == KeyValue(1.0));  // of the key's type
  CHECK(s.training.algorithm_keys.at("outer_momentum") == KeyValue(0.9));
  CHECK(s.training.algorithm_keys.size() == 2);
  // The resolved scenario writes them, and reads back to the same.
  const std::string toml = to_toml(s);
  CHECK(toml.find("outer_lr = 1.0\n") != std::string::npos);
  Scenario back = parse_scenario(toml, "resolved.toml");
  resolve_algorithm_keys(back);
  const bool same = back.training.algorithm_keys == s.training.algorithm_keys;
  CHECK(same);
  // Another algorithm has none of diloco's keys, and gets its own.
  Scenario other = parse_scenario(kPipeline, "reg.toml", {"training.algorithm=\"pipedream\""});
  resolve_algorithm_keys(other);
  CHECK(other.training.algorithm_keys.size() == 1);
  CHECK(other.training.algorithm_keys.at("double_buffered_weights") == KeyValue(false));
  // Out of range, of the wrong type, another algorithm's, nobody's: refused at the key.
  CHECK(resolve_error({"training.algorithm=\"diloco\"", "training.outer_lr=20"}) ==
        "reg.toml (--set): key 'training.outer_lr': value 20 is out of range (0, 10]");
  CHECK(resolve_error({"training.algorithm=\"diloco\"", "training.outer_lr=\"fast\""}) ==
        "reg.toml (--set): key 'training.outer_lr': expected a number");
  CHECK(resolve_error({"training.algorithm=\"diloco\"", "training.double_buffered_weights=true"}) ==
        "reg.toml (--set): key 'training.double_buffered_weights': a key of pipedream; "
        "training.algorithm \"diloco\" has no such key");
  CHECK(resolve_error({"training.no_such_key=1"}) ==
        "reg.toml (--set): key 'training.no_such_key': unknown key");
  CHECK(resolve_error({"training.algorithm=\"diloco\"", "training.outer_lr=0.5"}).empty());
}

TEST_CASE("the README lists the registry's names as the choices of their keys",
          "[registry][keys]") {
  CHECK(test::readme_keys() == keys_markdown(registry_choices(), algorithm_key_rows()));
}
