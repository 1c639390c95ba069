// Scenario loading: defaults, overrides, and a clear error (file, line, key) for every bad input.
#include <filesystem>
#include <fstream>

#include "algo/registry.h"
#include "catch.h"
#include "core/data/dataset.h"
#include "core/error.h"
#include "core/model/cost_model.h"
#include "core/model/model.h"
#include "core/scenario/scenario.h"
#include "planner/planner.h"
#include "scenario_errors.h"
#include "test_support.h"

using namespace rv;

namespace {

using test::error_of;
using test::kMinimal;

}  // namespace

TEST_CASE("a minimal scenario gets every default", "[scenario]") {
  Scenario s = parse_scenario(kMinimal, "mini.toml");
  CHECK(s.name == "mini");
  CHECK(s.node_count() == 2);
  CHECK(s.training.algorithm == "ravnest");
  CHECK(s.data.kind == DataKind::kSynthetic);
  CHECK(s.devices[0].up_mbps == 100.0);
  CHECK(s.device_of(1).name == "device0");
}

TEST_CASE("the resolved scenario reads back to the same scenario", "[scenario]") {
  Scenario s = load_scenario(test::source_path("scenarios/quickstart.toml"));
  Scenario t = parse_scenario(to_toml(s), "resolved.toml");
  CHECK(to_toml(t).substr(to_toml(t).find('\n')) == to_toml(s).substr(to_toml(s).find('\n')));
  CHECK(t.training.momentum == s.training.momentum);
  CHECK(t.devices.size() == s.devices.size());
}

TEST_CASE("overrides given with --set change any key, with TOML values", "[scenario]") {
  Scenario s = parse_scenario(kMinimal, "mini.toml",
                              {"training.lr=0.25", "training.algorithm=gpipe", "devices.0.count=5",
                               "model.hidden=[8, 4]", "sim.mode=\"timing\""});
  CHECK(s.training.lr == 0.25);
  CHECK(s.training.algorithm == "gpipe");
  CHECK(s.node_count() == 5);
  CHECK(s.model.hidden == std::vector<int64_t>{8, 4});
  CHECK(s.sim.mode == SimMode::kTiming);
}

TEST_CASE("bad scenarios name file, line and key", "[scenario]") {
  SECTION("unknown key") {
    // [training] may hold the algorithm's own keys: the registry refuses the others.
    std::string e;
    try {
      Scenario s = parse_scenario(
          "name = \"x\"\n[training]\nlr = 0.1\nlearning_rate = 0.1\n[[devices]]\ncount = 1\n",
          "bad.toml");
      resolve_algorithm_keys(s);
    } catch (const ScenarioError& x) {
      e = x.what();
    }
    CHECK(e.find("bad.toml:4") != std::string::npos);
    CHECK(e.find("training.learning_rate") != std::string::npos);
    CHECK(e.find("unknown key") != std::string::npos);
  }
  SECTION("unknown top-level table") {
    auto e = error_of("name = \"x\"\n[trainig]\nlr = 0.1\n[[devices]]\ncount = 1\n");
    CHECK(e.find("'trainig'") != std::string::npos);
  }
  SECTION("wrong type") {
    auto e = error_of("name = \"x\"\n[training]\nsteps = \"many\"\n[[devices]]\ncount = 1\n");
    CHECK(e.find("bad.toml:3") != std::string::npos);
    CHECK(e.find("training.steps") != std::string::npos);
    CHECK(e.find("expected an integer") != std::string::npos);
  }
  SECTION("negative bandwidth") {
    auto e = error_of("name = \"x\"\n[[devices]]\ncount = 1\nup_mbps = -5\n");
    CHECK(e.find("bad.toml:4") != std::string::npos);
    CHECK(e.find("devices[0].up_mbps") != std::string::npos);
    CHECK(e.find("out of range") != std::string::npos);
  }
  SECTION("unknown dataset") {
    auto e = error_of("name = \"x\"\n[data]\nkind = \"imagenet\"\n[[devices]]\ncount = 1\n");
    CHECK(e.find("data.kind") != std::string::npos);
    CHECK(e.find("imagenet") != std::string::npos);
    CHECK(e.find("fashion-mnist") != std::string::npos);
  }
  SECTION("no devices") {
    auto e = error_of("name = \"x\"\n");
    CHECK(e.find("devices") != std::string::npos);
  }
  SECTION("TOML syntax error") {
    auto e = error_of("name = \"x\"\n[training\n");
    CHECK(e.find("bad.toml:2") != std::string::npos);
    CHECK(e.find("syntax") != std::string::npos);
  }
  SECTION("bad override") {
    auto e = error_of(kMinimal, {"training.lr"});
    CHECK(e.find("--set") != std::string::npos);
    e = error_of(kMinimal, {"training.lr=-1"});
    CHECK(e.find("training.lr") != std::string::npos);
    e = error_of(kMinimal, {"devices.7.count=1"});
    CHECK(e.find("devices.7.count") != std::string::npos);
  }
}

TEST_CASE("a missing scenario file is an input error", "[scenario]") {
  CHECK_THROWS_AS(load_scenario("/nonexistent/x.toml"), ScenarioError);
  try {
    load_scenario("/nonexistent/x.toml");
  } catch (const ScenarioError& e) {
    CHECK(std::string(e.what()).find("/nonexistent/x.toml") != std::string::npos);
  }
}

TEST_CASE("a missing dataset file is an input error naming the file", "[scenario][data]") {
  Scenario s = parse_scenario(kMinimal, "mini.toml",
                              {"data.kind=fashion-mnist", "data.path=/nonexistent/fm"});
  try {
    load_dataset(s.data, s.seed);
    FAIL("no error");
  } catch (const InputError& e) {
    CHECK(std::string(e.what()).find("/nonexistent/fm/train-images-idx3-ubyte.gz") !=
          std::string::npos);
  }
}

TEST_CASE("a model that does not fit the cluster's RAM is refused with what is missing",
          "[scenario][planner]") {
  Scenario s = parse_scenario(
      "name = \"big\"\n[model]\nhead = \"linear\"\nhidden = [8192, 8192, 8192]\n[[devices]]\ncount "
      "= 2\nram_gb = 0.1\n",
      "big.toml");
  ModelDesc m = build_model(s);
  try {
    make_plan(s, m);
    FAIL("no error");
  } catch (const ScenarioError& e) {
    std::string w = e.what();
    CHECK(w.find("big.toml") != std::string::npos);
    CHECK(w.find("devices") != std::string::npos);
    CHECK(w.find("does not fit") != std::string::npos);
    CHECK(w.find("GiB") != std::string::npos);
  }
}

TEST_CASE("a model past 2^40 parameters is refused at its key's line", "[scenario][model]") {
  // 2^20 x 2^20 in one linear layer: 2^40 weights (and its bias) in a layer.
  Scenario s = parse_scenario(
      "name = \"huge\"\n[model]\nhidden = [1048576, 1048576]\nhead = "
      "\"linear\"\n[[devices]]\ncount = 2\n",
      "huge.toml");
  try {
    build_model(s);
    FAIL("no error");
  } catch (const ScenarioError& e) {
    CHECK(std::string(e.what()).find("huge.toml:3: key 'model.hidden': ") == 0);
    CHECK(std::string(e.what()).find("2^40") != std::string::npos);
  }
  // The model's own mistakes name their keys too.
  Scenario none = parse_scenario(
      "name = \"none\"\n[model]\nhidden = []\nhead = \"none\"\n[[devices]]\ncount = 1\n",
      "none.toml");
  CHECK_THROWS_WITH(build_model(none),
                    Catch::StartsWith("none.toml:3: key 'model.hidden': no layers"));
}

TEST_CASE("memory sizes saturate instead of wrapping around", "[scenario][model]") {
  CHECK(sat_mul(int64_t{1} << 40, int64_t{1} << 40) == kBytesMax);
  CHECK(sat_add(kBytesMax - 1, 2) == kBytesMax);
  CHECK(sat_mul(3, 4) == 12);
  // A batch of 2^20 samples of a 32x32 CNN with 65536 channels, 10^6 micro-batches in flight:
  // its memory is far beyond 64 bits; the stage reports the largest size, never a negative one.
  Scenario s = parse_scenario(
      "name = \"wide\"\n[model]\nkind = \"cnn\"\nchannels = [65536]\nhidden = []\nhead = "
      "\"linear\"\n"
      "[data]\nkind = \"synthetic\"\nside = 1024\nbatch_size = 1048576\n[[devices]]\ncount = 1\n",
      "wide.toml");
  const ModelDesc m = build_model(s);
  const StageCost c = stage_cost(m, 0, m.layer_count(), s.training, s.data.batch_size, 1000000);
  CHECK(c.memory == kBytesMax);
  CHECK(c.activation_out == 0);
}
