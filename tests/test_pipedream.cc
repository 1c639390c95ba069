// pipedream (algo/pipedream.cc) in numeric runs: 1F1B pipelines of three stages train digits with
// stage s's updates exactly p - s - 1 versions stale in steady state; PipeDream-2BW (double-
// buffered weights) makes one update per micro_batches micro-batches, its weights at most one
// version behind, and keeps less memory than 1F1B's stashed versions; the option is refused for
// other algorithms. (The 1F1B schedule's timing against its recurrence, and against ravnest's
// backward-first stages: tests/test_sim_analytic.cc.)
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "catch.h"
#include "cli_support.h"
#include "core/output/run_output.h"
#include "snippets.h"

using namespace rv;
namespace fs = std::filesystem;

namespace {

// Two clusters of three stages.
const std::string kThreeStages = std::string(R"(name = "pipedream"
)") + test::kDigitsMlp + R"([training]
algorithm = "pipedream"
optimizer = "adam"
lr = 0.003
steps = 300
eval_every = 100
average_every = 20
[planner]
method = "manual"
[[planner.cluster]]
nodes = [0, 1, 2]
[[planner.cluster]]
nodes = [3, 4, 5]
[[devices]]
count = 6
up_mbps = 20
down_mbps = 50
latency_ms = 10
tflops = 0.001
)";

struct Run {
  std::vector<Event> events;
  nlohmann::json summary;
};

Run sim(const fs::path& d, const std::vector<std::string>& sets, const std::string& dir) {
  std::vector<std::string> args = {"sim", "s.toml", "--run-dir", dir, "--progress", "off"};
  for (const auto& s : sets) args.insert(args.end(), {"--set", s});
  const test::Result r = test::ravnest(args, d);
  INFO(r.err);
  REQUIRE(r.status == 0);
  return {read_events_csv((d / dir / "metrics.csv").string()),
          nlohmann::json::parse(test::slurp(d / dir / "summary.json"))};
}

// Per stage: how many updates had each staleness.
std::map<int, std::map<int64_t, int>> staleness_by_stage(const Run& r) {
  std::map<int, std::map<int64_t, int>> out;
  for (const Event& e : r.events)
    if (e.kind == EventKind::kUpdate) ++out[e.stage][e.staleness];
  return out;
}

Bytes peak_memory(const Run& r, int stage) {
  Bytes peak = 0;
  for (const Event& e : r.events)
    if (e.kind == EventKind::kMemory && e.stage == stage) peak = std::max(peak, e.bytes);
  return peak;
}

}  // namespace

TEST_CASE(
    "pipedream: 1F1B with weight stashing trains, each stage's updates p - s - 1 versions stale",
    "[sim][pipedream]") {
  const fs::path d = test::fresh_dir("rv-pipedream", "1f1b");
  std::ofstream(d / "s.toml") << kThreeStages;
  const Run one = sim(d, {}, "1f1b");
  CHECK(one.summary.at("final").at("test_accuracy").get<double>() > 0.9);
  const auto st = staleness_by_stage(one);
  for (int s = 0; s < 3; ++s) {
    INFO("stage " << s);
    const auto& counts = st.at(s);
    // Warm-up and the drains before each averaging start with fresher weights; never staler.
    CHECK(counts.rbegin()->first == 2 - s);
    CHECK(counts.at(2 - s) > 2 * 300 * 8 / 10);  // most updates, both clusters
  }

  // 2BW: micro_batches = 4 micro-batches per update, at most one version behind, two versions kept.
  const Run two = sim(d, {"training.double_buffered_weights=true"}, "2bw");
  CHECK(two.summary.at("final").at("test_accuracy").get<double>() > 0.9);
  int updates = 0;
  for (const Event& e : two.events) updates += e.kind == EventKind::kUpdate && e.node == 0;
  CHECK(updates == 300);
  int forwards = 0;
  for (const Event& e : two.events)
    forwards += e.kind == EventKind::kForward && e.node == 0 && e.micro_batch >= 0;
  CHECK(forwards >= 300 * 4);
  for (const auto& [stage, counts] : staleness_by_stage(two)) {
    INFO("stage " << stage);
    CHECK(counts.rbegin()->first <= 1);
  }
  CHECK(staleness_by_stage(two).at(0).count(1) == 1);  // the one-version lag does happen
  CHECK(peak_memory(two, 0) < peak_memory(one, 0));

  // The option is pipedream's alone.
  const test::Result r = test::ravnest({"sim", "s.toml", "--set", "training.algorithm=\"ravnest\"",
                                        "--set", "training.double_buffered_weights=true"},
                                       d);
  CHECK(r.status == 2);
  CHECK(r.err.find("'training.double_buffered_weights': a key of pipedream; training.algorithm "
                   "\"ravnest\" has no such key") != std::string::npos);
  fs::remove_all(d);
}
