// dedloc (algo/dedloc.h): the load-balancing programme's shares and optimum against hand-solved
// cases, part bounds, the cost model's target-batch round, the butterfly all-reduce's simulated
// time against the programme's, and collaborations of fast and slow (client_only) PCs training
// digits, each at its own pace, simulated and as real processes.
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "algo/dedloc.h"
#include "catch.h"
#include "cli_support.h"
#include "core/error.h"
#include "core/output/run_output.h"
#include "planner/cost.h"
#include "sim/sim_runner.h"
#include "snippets.h"
#include "test_support.h"

using namespace rv;
namespace fs = std::filesystem;

namespace {

const char* const kSmall = test::kSmallDigitsCnn;
const char* const kTwoPeers = test::kRegistryPipeline;

constexpr double kB = 100e6 / 8;  // bytes per second
constexpr double kLat = 0.020;    // seconds per transfer (two links)

}  // namespace

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

TEST_CASE(
    "a target-batch round: each peer at its own pace until the target, then it finishes its "
    "micro-batch",
    "[registry][planner]") {
  // dedloc: every peer trains from the round's start; once the finished micro-batches hold the
  // target's samples, each peer finishes the one it is on. Peers of 0.1 s and 0.4 s per micro-batch
  // of B samples and a target of 25 B: the 25th micro-batch ends at 2.0 s (20 + 5), no other is
  // under way then, and without averaging the rate is the peers' summed one, B (1/0.1 + 1/0.4).
  auto p = test::prepare(kTwoPeers, {"training.algorithm=\"dedloc\""}, false);
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
      kTwoPeers,
      {"training.algorithm=\"dedloc\"", "training.target_batch=" + std::to_string(25 * b)}, false);
  const CostModel dedloc(p.scenario, p.model);
  CHECK(dedloc.throughput({0.1, 0.4}, 0.0, {}) == Approx(b * (1 / 0.1 + 1 / 0.4)));
  CHECK(dedloc.throughput({0.1, 0.4}, 2.0, {}) == Approx(25.0 * b / (2.0 + 2.0)));
  CHECK(dedloc.micro_batches_per_exchange(2) == 13);  // 25 B over 2 peers, rounded up
  // A synchronous gradient exchange (sync-dp) waits for the slower every step: 2 B / (0.4 + A).
  auto q = test::prepare(kTwoPeers, {"training.algorithm=\"sync-dp\""}, false);
  const CostModel sync(q.scenario, q.model);
  CHECK(sync.throughput({0.1, 0.4}, 2.0, {}) == Approx(2.0 * b / (0.4 + 2.0)));
}

TEST_CASE(
    "dedloc's butterfly all-reduce of equal peers takes the programme's time per byte plus two "
    "transfers' latency",
    "[sim][analytic][dedloc]") {
  // Three equal PCs: equal shares; each phase moves 2/3 of the vector up and down every link
  // (two parts of S / 3, each at half the link), so the two take (4/3) S / B = T S, each after
  // one transfer's latency (two links of 10 ms).
  auto p = test::prepare(R"(
name = "butterfly"
[model]
head = "linear"
kind = "mlp"
hidden = [1024, 1024]
[data]
kind = "synthetic"
side = 32
[training]
algorithm = "dedloc"
steps = 3
target_batch = 192
[network]
model = "ideal"
[sim]
mode = "timing"
[[devices]]
count = 3
tflops = 1000
ram_gb = 8
up_mbps = 100
down_mbps = 100
latency_ms = 10
)",
                         {}, false);
  const SimResult r = run_simulation(p.spec());
  const double S = kFloatBytes * static_cast<double>(p.model.state_offset(p.model.layer_count()));
  const Shares shares = dedloc_shares({kB, kB, kB}, {kB, kB, kB}, {false, false, false});
  CHECK(shares.seconds_per_byte == Approx(4.0 / 3.0 / kB));
  const double expected = shares.seconds_per_byte * S + 2 * kLat;
  int spans = 0;
  for (const Event& e : r.events) {
    if (e.kind != EventKind::kAverage) continue;
    ++spans;
    INFO("node " << e.node << " step " << e.step << ": simulated " << e.end - e.start
                 << " s, analytic " << expected << " s");
    CHECK(e.end - e.start == Approx(expected).epsilon(0.01));
  }
  CHECK(spans == 3 * 3);
}

TEST_CASE("dedloc as real processes: each peer at its own pace and one step per collaborative step",
          "[cli][real][dedloc]") {
  const fs::path d = test::fresh_dir("rv-dedloc", "real");
  std::ofstream(d / "s.toml") << kSmall;
  test::Result real = test::ravnest(
      {"real", "s.toml", "--set", "training.algorithm=\"dedloc\"", "--set", "training.steps=60",
       "--set", "training.target_batch=192", "--run-dir", "real"},
      d);
  INFO(real.err);
  REQUIRE(real.status == 0);
  // metrics.csv rows by kind (first column) and node (second).
  std::map<int, int> updates, averages;
  int64_t micro_batches = 0;
  std::ifstream csv(d / "real" / "metrics.csv");
  for (std::string line; std::getline(csv, line);) {
    const size_t comma = line.find(',');
    const std::string kind = line.substr(0, comma);
    if (kind == "kind") continue;
    const int node = std::atoi(line.c_str() + comma + 1);
    updates[node] += kind == "update";
    averages[node] += kind == "average";
    micro_batches += kind == "loss";
  }
  for (int n = 0; n < 3; ++n) {
    CHECK(updates[n] == 60);
    CHECK(averages[n] == 60);
  }
  // Every peer trains at least one micro-batch a step. A step ends when the collaboration's
  // progress, as the peers estimate it from each other's reports and rates (as hivemind's peers
  // do), reaches the target: a step can end a little short of it (11,392 of 11,520 samples over
  // the 60 steps in one run on a loaded machine), never far, unless the estimate is broken.
  CHECK(micro_batches >= 60 * 3);
  CHECK(micro_batches * 32 >= 60 * 192 * 3 / 4);
  auto s = nlohmann::json::parse(test::slurp(d / "real" / "summary.json"));
  CHECK(s["final"]["test_accuracy"].get<double>() > 0.8);
  fs::remove_all(d);
}
