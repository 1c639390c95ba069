// dedloc (algo/dedloc.h): the load-balancing programme's shares and optimum against hand-solved
// cases, part bounds, and a collaboration of fast and slow (client_only) PCs training digits, each
// at its own pace. (The butterfly all-reduce's time: tests/test_sim_analytic.cc.)
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "algo/dedloc.h"
#include "catch.h"
#include "cli_support.h"
#include "core/error.h"
#include "core/output/run_output.h"
#include "snippets.h"

using namespace rv;
namespace fs = std::filesystem;

TEST_CASE("dedloc's shares: equal peers share equally, at (1 + (n - 2) / n) / bandwidth per byte") {
  const Shares s = dedloc_shares({8, 8, 8, 8}, {8, 9, 10, 8}, {false, false, false, false});
  for (double w : s.share) CHECK(w == Approx(0.25));
  CHECK(s.seconds_per_byte == Approx((1 + 2.0 / 4) / 8));
}

TEST_CASE(
    "dedloc's shares: two peers split in proportion to their bandwidth, each moving the whole "
    "vector") {
  // With two peers each sends and receives one vector whatever the split: T = 1 / the slower; the
  // second objective spreads the parts by bandwidth.
  const Shares s = dedloc_shares({1, 3}, {2, 5}, {false, false});
  CHECK(s.share[0] == Approx(0.25));
  CHECK(s.share[1] == Approx(0.75));
  CHECK(s.seconds_per_byte == Approx(1.0));
}

TEST_CASE(
    "dedloc's shares: slow peers that must move the vector anyway leave the aggregating to the "
    "fast") {
  // c = (1, 1, 4), n = 3: each peer moves at least one vector, so T >= 1; the slow peers then can
  // take no share ((1 + w) / 1 <= 1), and the fast one aggregates everything ((1 + 1) / 4 <= 1).
  const Shares s = dedloc_shares({1, 1, 4}, {1, 1, 4}, {false, false, false});
  CHECK(s.share[0] == Approx(0.0).margin(1e-9));
  CHECK(s.share[1] == Approx(0.0).margin(1e-9));
  CHECK(s.share[2] == Approx(1.0));
  CHECK(s.seconds_per_byte == Approx(1.0));
}

TEST_CASE("dedloc's shares: a client_only peer aggregates nothing and the others water-fill") {
  // c = (2, 2, 2), the third client-only: w1 = w2 = 1/2, T = (1 + 1/2) / 2.
  const Shares s = dedloc_shares({2, 2, 2}, {2, 2, 2}, {false, false, true});
  CHECK(s.share[0] == Approx(0.5));
  CHECK(s.share[1] == Approx(0.5));
  CHECK(s.share[2] == 0.0);
  CHECK(s.seconds_per_byte == Approx(0.75));
  CHECK_THROWS_AS(dedloc_shares({1, 1}, {1, 1}, {true, true}), InputError);
}

TEST_CASE("dedloc's part bounds cover the vector in order and a zero share is an empty part") {
  const std::vector<int64_t> b = part_bounds({0.25, 0.0, 0.75}, 10);
  REQUIRE(b.size() == 4);
  CHECK(b.front() == 0);
  CHECK(b.back() == 10);
  CHECK(b[1] == b[2]);
  for (size_t i = 1; i < b.size(); ++i) CHECK(b[i] >= b[i - 1]);
}

TEST_CASE("dedloc: fast and client_only slow PCs train digits together, each at its own pace",
          "[sim][dedloc]") {
  const fs::path d = test::fresh_dir("rv-dedloc", "train");
  std::ofstream(d / "s.toml") << R"(name = "dedloc"
)" << test::kDigitsMlp << R"([training]
algorithm = "dedloc"
optimizer = "adam"
lr = 0.003
steps = 150
eval_every = 50
target_batch = 256
[[devices]]
name = "fast"
count = 2
up_mbps = 50
down_mbps = 100
latency_ms = 10
tflops = 0.002
[[devices]]
name = "slow"
count = 2
up_mbps = 10
down_mbps = 20
latency_ms = 20
tflops = 0.0005
client_only = true
)";
  const test::Result r =
      test::ravnest({"sim", "s.toml", "--run-dir", "run", "--progress", "off"}, d);
  INFO(r.err);
  REQUIRE(r.status == 0);
  const auto summary = nlohmann::json::parse(test::slurp(d / "run" / "summary.json"));
  CHECK(summary.at("final").at("test_accuracy").get<double>() > 0.9);
  const std::vector<Event> events = read_events_csv((d / "run" / "metrics.csv").string());
  std::map<int, int> micro_batches, updates;
  std::map<int, std::vector<Bytes>> sent;  // per node, each step's all-reduce bytes
  for (const Event& e : events) {
    if (e.kind == EventKind::kLoss) ++micro_batches[e.node];
    if (e.kind == EventKind::kUpdate) ++updates[e.node];
    if (e.kind == EventKind::kAverage) sent[e.node].push_back(e.bytes);
  }
  for (int n = 0; n < 4; ++n)
    CHECK(updates[n] == 150);  // one optimizer step per collaborative step
  // The fast PCs (4x the flops) do more micro-batches than the slow ones.
  CHECK(micro_batches[0] > 2 * micro_batches[2]);
  CHECK(micro_batches[1] > 2 * micro_batches[3]);
  // The collaboration reaches the target every step: 150 steps of 256 samples at least.
  int64_t total = 0;
  for (const auto& [node, n] : micro_batches) total += n;
  CHECK(total * 32 >= 150 * 256);
  // A client_only PC sends its slices of both fast PCs' parts (the whole vector) and no sums; an
  // aggregator sends the other's slice and its sum to three peers: more.
  REQUIRE(sent[2].size() == 150);
  CHECK(sent[2][0] == sent[3][0]);
  CHECK(sent[0][0] > sent[2][0]);
  fs::remove_all(d);
}
