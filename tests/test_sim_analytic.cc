// The simulator against analytic values (network model "ideal", timing mode):
//   one transfer takes latency + bytes / bandwidth;
//   a GPipe step takes (m + p - 1)(tf + tb) (+ the last update) when links are fast (stages of
//   unequal times: the flow-shop makespan of the forwards, then of the backwards);
//   GPipe's idle fraction is (p - 1) / (m + p - 1) (unequal: 1 - a node's work over the step);
//   the asynchronous pipeline's steady throughput is 1 / the slowest stage;
//   one multi-ring averaging of pipeline clusters takes 2(C - 1)(latency + chunk / (C B)) for the
//   largest chunk, and one single-ring averaging adds collecting the stages at the leaders and
//   handing them back: 2 (latency + (S - s0) / B) + 2(C - 1)(latency + S / (C B)).
// Simulated time is deterministic, so these are tight.
#include <map>
#include <nlohmann/json.hpp>

#include "algo/ring_averager.h"
#include "catch.h"
#include "core/error.h"
#include "core/model/cost_model.h"
#include "core/output/run_output.h"
#include "sim/platform.h"
#include "sim/sim_runner.h"
#include "test_support.h"

using namespace rv;

namespace {

// Four nodes, links fast enough to be negligible, a model of equal linear layers cut one per stage.
std::string pipeline_scenario(const std::string& algorithm, const std::string& tflops_list) {
  return R"(
name = "analytic"
[model]
head = "linear"
kind = "mlp"
hidden = [256, 256, 256]
[data]
kind = "synthetic"
side = 16
classes = 256
batch_size = 64
[training]
algorithm = ")" +
         algorithm + R"("
micro_batches = 4
max_in_flight = 8
steps = 1
[planner]
stage_layers = [3, 2, 2, 1]
[network]
model = "ideal"
[sim]
mode = "timing"
[[devices]]
count = 1
tflops = )" +
         tflops_list.substr(0, tflops_list.find(',')) + R"(
up_mbps = 1e9
down_mbps = 1e9
latency_ms = 0
[[devices]]
count = 3
tflops = )" +
         tflops_list.substr(tflops_list.find(',') + 1) + R"(
up_mbps = 1e9
down_mbps = 1e9
latency_ms = 0
)";
}

struct StageTimes {
  double tf = 0, tb = 0, tu = 0;  // forward, backward, update, seconds
  double period = 0;              // tf + tb + tu
};

// Each stage's times, from the compute model's one function (core/compute/profile.h) on its device.
std::vector<StageTimes> stage_times(const test::Prepared& p, const TrainingSpec& tr) {
  std::vector<StageTimes> out;
  for (const auto& st : p.plan.clusters[0].stages) {
    const StageWork w =
        stage_work(p.model, st.layer_begin, st.layer_end, tr, p.scenario.data.batch_size);
    const ComputeProfile device = p.scenario.device_of(st.node).compute_profile();
    StageTimes t{time_of(w.forward, device), time_of(w.backward, device), time_of(w.update, device),
                 0};
    t.period = t.tf + t.tb + t.tu;
    out.push_back(t);
  }
  return out;
}

StageTimes slowest(const test::Prepared& p, const TrainingSpec& tr) {
  StageTimes t;
  for (const StageTimes& s : stage_times(p, tr))
    if (s.period > t.period) t = s;
  return t;
}

// One GPipe step of m micro-batches over stages of these times, links free: the forwards are a
// flow shop of m identical jobs (sum of the stages' times, then m - 1 more of the slowest), the
// backwards another in reverse order once the last stage has every forward, then the first
// stage, last to finish, updates. With equal stages: (m + p - 1)(tf + tb) + tu.
double gpipe_step(const std::vector<StageTimes>& st, int m) {
  double sf = 0, sb = 0, mf = 0, mb = 0;
  for (const StageTimes& t : st) {
    sf += t.tf;
    sb += t.tb;
    mf = std::max(mf, t.tf);
    mb = std::max(mb, t.tb);
  }
  return sf + (m - 1) * mf + sb + (m - 1) * mb + st.front().tu;
}

}  // namespace

TEST_CASE(
    "one transfer takes latency + bytes / bandwidth, over the sender's up and receiver's down link",
    "[sim][analytic]") {
  Scenario s = parse_scenario(R"(
name = "transfer"
[network]
model = "ideal"
[[devices]]
name = "a"
up_mbps = 10
down_mbps = 100
latency_ms = 10
[[devices]]
name = "b"
up_mbps = 50
down_mbps = 20
latency_ms = 5
)",
                              "transfer.toml");
  const Bytes S = 1000000;
  double arrival[2] = {0, 0};
  simulate(s, {0, 1}, false, [&](NodeEnv& env, int r) {
    Message m;
    m.kind = MsgKind::kForward;
    m.bytes = S;
    m.id = 1;
    env.transport.send(1 - r, m);
    Message got = env.transport.recv();
    arrival[r] = env.clock.now();
    CHECK(got.src == 1 - r);
    env.transport.flush();
  });
  // a -> b: latency 10 + 5 ms, bandwidth min(up_a = 10, down_b = 20) Mbit/s.
  CHECK(arrival[1] == Approx(0.015 + S / (10e6 / 8)).epsilon(1e-9));
  // b -> a: latency 15 ms, bandwidth min(up_b = 50, down_a = 100) Mbit/s.
  CHECK(arrival[0] == Approx(0.015 + S / (50e6 / 8)).epsilon(1e-9));
}

TEST_CASE("under the tcp model one transfer takes latency + bytes / (0.962 bandwidth), the default",
          "[sim][analytic]") {
  Scenario s = parse_scenario(R"(
name = "transfer"
[[devices]]
up_mbps = 10
down_mbps = 100
latency_ms = 10
[[devices]]
up_mbps = 50
down_mbps = 20
latency_ms = 5
)",
                              "transfer.toml");
  REQUIRE(s.network.model == NetworkModel::kTcp);
  const Bytes S = 1000000;
  double arrival = 0;
  simulate(s, {0, 1}, false, [&](NodeEnv& env, int r) {
    if (r == 0) {
      Message m;
      m.kind = MsgKind::kForward;
      m.bytes = S;
      env.transport.send(1, m);
      env.transport.flush();
    } else {
      env.transport.recv();
      arrival = env.clock.now();
    }
  });
  CHECK(arrival == Approx(0.015 + S / (kTcpBandwidthFactor * 10e6 / 8)).epsilon(1e-9));
}

// (SimGrid allows one engine per process, and ctest runs each test case in its own process.)
TEST_CASE(
    "messages from one sender arrive in the order sent, one after the other, the latency paid once",
    "[sim][analytic]") {
  Scenario s = parse_scenario(R"(
name = "fifo"
[network]
model = "ideal"
[[devices]]
count = 2
up_mbps = 10
down_mbps = 10
latency_ms = 10
)",
                              "fifo.toml");
  const Bytes S = 1000000;
  const double b = 10e6 / 8;
  std::vector<std::pair<int64_t, Seconds>> got;
  simulate(s, {0, 1}, false, [&](NodeEnv& env, int r) {
    if (r == 0) {
      Message big, small;
      big.id = 1;
      big.bytes = 4 * S;
      small.id = 2;
      small.bytes = 10;
      env.transport.send(1, big);
      env.transport.send(1, small);
      env.transport.flush();
      // After the stream has gone idle, a message pays the latency again.
      env.clock.sleep_for(10.0 - env.clock.now());
      Message late;
      late.id = 3;
      late.bytes = S;
      env.transport.send(1, late);
      env.transport.flush();
    } else {
      for (int i = 0; i < 3; ++i) {
        Message m = env.transport.recv();
        got.push_back({m.id, env.clock.now()});
      }
    }
  });
  REQUIRE(got.size() == 3);
  CHECK(got[0].first == 1);
  CHECK(got[0].second == Approx(0.020 + 4 * S / b).epsilon(1e-9));
  // The small message follows the big one's last byte: no second latency (but for the sliver
  // SimGrid charges each transfer itself), no share of the link.
  CHECK(got[1].first == 2);
  CHECK(got[1].second ==
        Approx(0.020 + (4 * S + 10) / b).epsilon(0).margin(1.01 * kSimGridLatencyFactor * 0.020));
  CHECK(got[1].second > got[0].second);
  CHECK(got[2].first == 3);
  CHECK(got[2].second == Approx(10.020 + S / b).epsilon(1e-9));
}

TEST_CASE("a GPipe step takes (m + p - 1)(tf + tb) when links are fast", "[sim][analytic]") {
  auto p = test::prepare(pipeline_scenario("gpipe", "1,1"));
  REQUIRE(p.plan.clusters[0].stages.size() == 4);
  SimResult r = run_simulation(p.spec());
  TrainingSpec tr = p.scenario.training;
  tr.weight_stashing = true;
  CHECK(r.simulated_time == Approx(gpipe_step(stage_times(p, tr), 4)).epsilon(0.01));
}

// Each node's idle fraction: 1 - its work over the step (with equal stages (p - 1) / (m + p - 1)).
void check_gpipe_idle(int m) {
  auto p = test::prepare(pipeline_scenario("gpipe", "1,1"),
                         {"training.micro_batches=" + std::to_string(m), "training.steps=5"});
  SimResult r = run_simulation(p.spec());
  auto summary = summarize(p.scenario, p.plan, r.events, RunInfo{"sim", "timing", 0});
  TrainingSpec tr = p.scenario.training;
  tr.weight_stashing = true;
  const std::vector<StageTimes> st = stage_times(p, tr);
  const double step = gpipe_step(st, m);
  for (const auto& node : summary["per_node"]) {
    const StageTimes& t = st.at(node["stage"].get<size_t>());
    const double expected = 1.0 - (m * (t.tf + t.tb) + t.tu) / step;
    INFO("m = " << m << ", node " << node["node"]);
    CHECK(node["idle_fraction"].get<double>() == Approx(expected).margin(0.01));
  }
}

TEST_CASE("GPipe's idle fraction is 1 - a node's work over the step, m = 2", "[sim][analytic]") {
  check_gpipe_idle(2);
}
TEST_CASE("GPipe's idle fraction is 1 - a node's work over the step, m = 4", "[sim][analytic]") {
  check_gpipe_idle(4);
}
TEST_CASE("GPipe's idle fraction is 1 - a node's work over the step, m = 8", "[sim][analytic]") {
  check_gpipe_idle(8);
}

TEST_CASE("the asynchronous pipeline's steady throughput is 1 / the slowest stage",
          "[sim][analytic]") {
  // Node 0 at 2 TFLOPS, nodes 1-3 at 0.5: the slowest stage is the slowest of 1-3.
  auto p = test::prepare(pipeline_scenario("ravnest", "2,0.5"), {"training.steps=300"});
  SimResult r = run_simulation(p.spec());
  auto summary = summarize(p.scenario, p.plan, r.events, RunInfo{"sim", "timing", 0});
  StageTimes t = slowest(p, p.scenario.training);
  const double expected = p.scenario.data.batch_size / t.period;
  CHECK(summary["steady_samples_per_s"].get<double>() == Approx(expected).epsilon(0.01));
  // The bottleneck stage has no bubble in steady state.
  double best_busy = 0;
  for (const auto& node : summary["per_node"])
    best_busy = std::max(best_busy, node["busy_fraction"].get<double>());
  CHECK(best_busy > 0.95);
}

// sim.shared_cores = C: the four stages share C cores, which never idle while 8 micro-batches are
// in flight, so the pipeline is bound by whichever is less: the slowest stage, or C cores' worth of
// every stage's forward, backward and update.
void check_shared_cores(int cores) {
  auto p = test::prepare(pipeline_scenario("ravnest", "2,0.5"),
                         {"training.steps=300", "sim.shared_cores=" + std::to_string(cores)});
  SimResult r = run_simulation(p.spec());
  auto summary = summarize(p.scenario, p.plan, r.events, RunInfo{"sim", "timing", 0});
  double sum = 0;
  for (const StageTimes& t : stage_times(p, p.scenario.training)) sum += t.period;
  const double bound = std::min(cores / sum, 1 / slowest(p, p.scenario.training).period);
  CHECK(summary["steady_samples_per_s"].get<double>() ==
        Approx(p.scenario.data.batch_size * bound).epsilon(0.02));
}

TEST_CASE("the asynchronous pipeline on one shared core: one micro-batch per sum of the stages",
          "[sim][analytic][shared_cores]") {
  check_shared_cores(1);
}

TEST_CASE("the asynchronous pipeline on two shared cores: the lesser of two bounds",
          "[sim][analytic][shared_cores]") {
  check_shared_cores(2);
}

TEST_CASE("a pipeline's time per step is its period, dilated k times, k times longer",
          "[sim][analytic]") {
  // The expectation from the undilated scenario; the simulation of the same dilated 2.5 times.
  auto plain = test::prepare(pipeline_scenario("ravnest", "2,0.5"), {"training.steps=300"});
  const StageTimes t = slowest(plain, plain.scenario.training);
  auto p =
      test::prepare(pipeline_scenario("ravnest", "2,0.5"), {"training.steps=300", "dilation=2.5"});
  SimResult r = run_simulation(p.spec());
  auto summary = summarize(p.scenario, p.plan, r.events, RunInfo{"sim", "timing", 0});
  CHECK(summary["steady_samples_per_s"].get<double>() ==
        Approx(p.scenario.data.batch_size / (2.5 * t.period)).epsilon(0.01));
  // Every stage updates once per micro-batch: one step per period.
  CHECK(summary["time_per_step_s"].get<double>() == Approx(2.5 * t.period).epsilon(0.01));
  const auto window = summary["steady_window_s"];
  CHECK(window[0].get<double>() < window[1].get<double>());
}

TEST_CASE("every stage applies one update per micro-batch, on the LV08 model too", "[sim]") {
  auto p = test::prepare(pipeline_scenario("ravnest", "2,0.5"),
                         {"training.steps=50", "network.model=\"lv08\""});
  SimResult a = run_simulation(p.spec());
  // (Byte-identical reruns are checked by the CLI test, which can run two simulations.)
  int updates = 0;
  for (const auto& e : a.events) updates += e.kind == EventKind::kUpdate;
  CHECK(updates == 50 * 4);
}

namespace {

// Two clusters of three nodes cut at the same layers, on equal links of B = 100 Mbit/s each way
// and 10 ms per link (20 ms per transfer); every node starts one averaging at time 0.
struct OneAveraging {
  double t = 0;                // when the last node is done, simulated seconds
  int64_t rows = 1;            // of the averaged tensor (the optimizer's state too, where averaged)
  double S = 0;                // the state's bytes in total
  std::vector<double> chunks;  // and per stage
  double predicted = 0;        // the planner's cost model
};

OneAveraging one_averaging(RingTopology topology, double piece_mb = 0,
                           const std::vector<std::string>& extra = {}) {
  OneAveraging a;
  std::string toml = R"(
name = "avg"
[model]
head = "linear"
kind = "mlp"
hidden = [1024, 1024]
[data]
kind = "synthetic"
side = 32
[network]
model = "ideal"
[sim]
mode = "timing"
[planner]
method = "manual"
[[planner.cluster]]
nodes = [0, 1, 2]
stage_layers = [2, 2, 2]
[[planner.cluster]]
nodes = [3, 4, 5]
stage_layers = [2, 2, 2]
[[devices]]
count = 6
tflops = 1000
ram_gb = 8
up_mbps = 100
down_mbps = 100
latency_ms = 10
)";
  std::vector<std::string> overrides{
      std::string("training.allreduce=") +
          (topology == RingTopology::kMulti ? "multi-ring" : "single-ring"),
      "training.ring_piece_mb=" + std::to_string(piece_mb)};
  overrides.insert(overrides.end(), extra.begin(), extra.end());
  auto p = test::prepare(toml, overrides, false);
  a.predicted = p.plan.averaging_time;
  a.rows = averaged_rows(algorithm_of(p.scenario), p.scenario.training);
  a.S = kFloatBytes * static_cast<double>(p.model.state_offset(p.model.layer_count()));
  for (const auto& st : p.plan.clusters[0].stages)
    a.chunks.push_back(kFloatBytes * static_cast<double>(p.model.state_offset(st.layer_end) -
                                                         p.model.state_offset(st.layer_begin)));
  simulate(p.scenario, {0, 1, 2, 3, 4, 5}, false, [&](NodeEnv& env, int node) {
    RingAverager avg(env, p.plan, p.model, node, topology, ring_piece_bytes(p.scenario.training));
    avg.average(
        at::Tensor(), a.rows, 0, [&] { return env.transport.recv(); },
        [](Message) { throw Error("unexpected message"); });
    env.transport.flush();
    a.t = std::max(a.t, env.clock.now());
  });
  INFO("simulated " << a.t << " s, predicted " << a.predicted << " s");
  CHECK(a.predicted == Approx(a.t).epsilon(0.02));
  return a;
}

constexpr double kB = 100e6 / 8;  // bytes per second
constexpr double kLat = 0.020;    // seconds per transfer (two links)

// C = 2: one reduce-scatter round and one all-gather round of half the largest chunk (plus a
// header).
double multi_ring_alpha_beta(const std::vector<double>& chunks) {
  return 2 * (kLat + (*std::max_element(chunks.begin(), chunks.end()) / 2 + kHeaderBytes) / kB);
}

}  // namespace

TEST_CASE(
    "one multi-ring averaging of pipeline clusters takes 2(C-1)(latency + chunk/(C B)) for the "
    "largest chunk",
    "[sim][analytic][rings]") {
  const OneAveraging a = one_averaging(RingTopology::kMulti);
  const double expected = multi_ring_alpha_beta(a.chunks);
  INFO("simulated " << a.t << " s, alpha-beta " << expected << " s");
  CHECK(a.t == Approx(expected).epsilon(0.01));
}

TEST_CASE(
    "averaging Adam's moments with the parameters moves three rows, and the planner charges them",
    "[sim][analytic][rings]") {
  const OneAveraging a =
      one_averaging(RingTopology::kMulti, 0,
                    {"training.optimizer=adam", "training.average_optimizer_state=true"});
  REQUIRE(a.rows == 3);
  // C = 2: one round each way of half the largest chunk's three rows (plus a header).
  const double largest = *std::max_element(a.chunks.begin(), a.chunks.end());
  const double expected = 2 * (kLat + (3 * largest / 2 + kHeaderBytes) / kB);
  INFO("simulated " << a.t << " s, alpha-beta " << expected << " s");
  CHECK(a.t == Approx(expected).epsilon(0.01));
}

TEST_CASE(
    "a multi-ring averaging in pieces overlaps the pieces' latencies: at most the whole segments' "
    "time",
    "[sim][analytic][rings]") {
  // (One simulation per process: the whole segments' time is the alpha-beta figure, which the
  // test above holds the simulator to.)
  const OneAveraging pieces = one_averaging(RingTopology::kMulti, 0.5);
  const double whole = multi_ring_alpha_beta(pieces.chunks);
  INFO("whole segments " << whole << " s, in pieces " << pieces.t << " s");
  CHECK(pieces.t < whole);
}

TEST_CASE(
    "one single-ring averaging adds collecting at the leaders and handing back: slower than the "
    "multi-ring",
    "[sim][analytic][rings]") {
  const OneAveraging a = one_averaging(RingTopology::kSingle);
  const double S = a.S, t = a.t;
  const double members = S - a.chunks[0];  // what the leader collects and hands back
  // Collect (members share the leader's down link), the ring over S, hand back (its up link).
  const double expected =
      2 * (kLat + (members + 2 * kHeaderBytes) / kB) + 2 * (kLat + (S / 2 + kHeaderBytes) / kB);
  const double multi = multi_ring_alpha_beta(a.chunks);
  INFO("simulated " << t << " s, alpha-beta " << expected << " s; multi-ring " << multi << " s");
  CHECK(t == Approx(expected).epsilon(0.01));
  CHECK(t > 2 * multi);
}

namespace {

// Two clusters of one node each (the whole model); E = 10 inner steps per outer step: the k-th
// outer step ends at k (E period + one ring averaging of the parameters).
void check_outer_periods(const std::string& algorithm) {
  const std::string toml = R"(
name = "outer"
[model]
head = "linear"
kind = "mlp"
hidden = [1024, 1024]
[data]
kind = "synthetic"
side = 32
[training]
optimizer = "adamw"
steps = 30
average_every = 10
[network]
model = "ideal"
[sim]
mode = "timing"
[planner]
method = "manual"
[[planner.cluster]]
nodes = [0]
[[planner.cluster]]
nodes = [1]
[[devices]]
count = 2
tflops = 2
ram_gb = 8
up_mbps = 100
down_mbps = 100
latency_ms = 10
)";
  {
    auto p = test::prepare(toml, {"training.algorithm=\"" + algorithm + "\""}, false);
    const SimResult r = run_simulation(p.spec());
    const double period = stage_times(p, p.scenario.training)[0].period;
    // The averaging: both nodes start it together; one reduce-scatter and one all-gather round of
    // half the state (the parameters alone: no optimizer rows) over B, each transfer 20 ms.
    const double S = kFloatBytes * static_cast<double>(p.model.state_offset(p.model.layer_count()));
    const double averaging = 2 * (kLat + (S / 2 + kHeaderBytes) / kB);
    std::vector<double> ends;
    int updates = 0;
    for (const Event& e : r.events) {
      if (e.node != 0) continue;
      if (e.kind == EventKind::kAverage) ends.push_back(e.end);
      updates += e.kind == EventKind::kUpdate;
    }
    CHECK(updates == 30);
    REQUIRE(ends.size() == 3);
    for (size_t k = 0; k < ends.size(); ++k) {
      const double expected = static_cast<double>(k + 1) * (10 * period + averaging);
      INFO("outer step " << k + 1 << ": simulated " << ends[k] << " s, analytic " << expected
                         << " s");
      CHECK(ends[k] == Approx(expected).epsilon(0.01));
    }
  }
}

}  // namespace

TEST_CASE(
    "diloco: each outer period takes E updates of a whole-model node, then one ring averaging",
    "[sim][analytic][diloco]") {
  check_outer_periods("diloco");
}

TEST_CASE("local-sgd: each period takes E updates of a whole-model node, then one ring averaging",
          "[sim][analytic][diloco]") {
  check_outer_periods("local-sgd");
}

namespace {

// One forward or backward (with its update) of micro-batch `mb` on a stage: when it ran.
struct Op {
  bool backward = false;
  int64_t mb = 0;
  double start = 0, end = 0;
};

// The 1F1B schedule of `n` micro-batches over stages of these times, links free, as a recurrence:
// stage s runs F0 .. F(L-1) (L = p - s), then B0, F(L), B1, F(L+1), ..., each op starting when the
// stage's previous op ended and its input arrived (a forward from the stage before, a backward
// from the stage after, sent before its update; the last stage's backward follows its forward).
// A backward includes its update.
std::vector<std::vector<Op>> one_f_one_b(const std::vector<StageTimes>& st, int64_t n) {
  const int p = static_cast<int>(st.size());
  std::vector<std::vector<Op>> order(p);
  for (int s = 0; s < p; ++s) {
    const int64_t warm = std::min<int64_t>(p - s, n);
    for (int64_t k = 0; k < warm; ++k) order[s].push_back({false, k});
    for (int64_t k = 0; k < n; ++k) {
      order[s].push_back({true, k});
      if (k + warm < n) order[s].push_back({false, k + warm});
    }
  }
  // Relax until every op's start is known: ops are placed in their stage's order, each once its
  // inputs are placed (the dependencies form a DAG, so this ends).
  std::vector<std::map<std::pair<bool, int64_t>, double>> done(p);  // (backward, mb) -> end
  std::vector<size_t> next(p, 0);
  std::vector<double> free_at(p, 0.0);
  for (bool moved = true; moved;) {
    moved = false;
    for (int s = 0; s < p; ++s) {
      while (next[s] < order[s].size()) {
        Op& op = order[s][next[s]];
        double ready = free_at[s];
        if (!op.backward && s > 0) {
          auto it = done[s - 1].find({false, op.mb});
          if (it == done[s - 1].end()) break;
          ready = std::max(ready, it->second);
        }
        if (op.backward && s + 1 < p) {
          auto it = done[s + 1].find({true, op.mb});
          if (it == done[s + 1].end()) break;
          ready = std::max(ready, it->second);
        }
        op.start = ready;
        op.end = ready + (op.backward ? st[s].tb + st[s].tu : st[s].tf);
        // What the neighbour waits for: a forward's output, a backward's gradient (before the
        // update).
        done[s][{op.backward, op.mb}] = op.backward ? ready + st[s].tb : op.end;
        free_at[s] = op.end;
        ++next[s];
        moved = true;
      }
    }
  }
  return order;
}

// A simulated run's forwards and backwards (each backward ending with its update) per stage, in
// the order they ran.
std::vector<std::vector<Op>> simulated_ops(const SimResult& r, int stages) {
  std::vector<std::vector<Op>> ops(stages);
  for (const Event& e : r.events) {
    if (e.cluster != 0 || e.micro_batch < 0) continue;
    if (e.kind == EventKind::kForward)
      ops[e.stage].push_back({false, e.micro_batch, e.start, e.end});
    if (e.kind == EventKind::kBackward)
      ops[e.stage].push_back({true, e.micro_batch, e.start, e.end});
    if (e.kind == EventKind::kUpdate) ops[e.stage].back().end = e.end;
  }
  for (auto& s : ops)
    std::stable_sort(s.begin(), s.end(),
                     [](const Op& a, const Op& b) { return a.start < b.start; });
  return ops;
}

constexpr int64_t kMicroBatches = 12;

}  // namespace

TEST_CASE("pipedream runs the 1F1B schedule: every forward and backward when the recurrence says",
          "[sim][analytic][pipedream]") {
  // Four stages of unequal times (2 and 0.5 TFLOPS / 100, so that transfers are negligible).
  auto p = test::prepare(
      pipeline_scenario("pipedream", "0.02,0.005"),
      {"training.steps=" + std::to_string(kMicroBatches), "training.eval_every=0"}, false);
  const SimResult r = run_simulation(p.spec());
  const auto expected = one_f_one_b(stage_times(p, effective_training(p.scenario)), kMicroBatches);
  const auto got = simulated_ops(r, 4);
  for (int s = 0; s < 4; ++s) {
    REQUIRE(got[s].size() == expected[s].size());
    for (size_t i = 0; i < got[s].size(); ++i) {
      const Op& g = got[s][i];
      const Op& x = expected[s][i];
      INFO("stage " << s << " op " << i << ": " << (x.backward ? "B" : "F") << x.mb
                    << " expected at " << x.start << ".." << x.end << ", simulated "
                    << (g.backward ? "B" : "F") << g.mb << " at " << g.start << ".." << g.end);
      CHECK(g.backward == x.backward);
      CHECK(g.mb == x.mb);
      CHECK(g.start == Approx(x.start).epsilon(1e-3).margin(1e-6));
      CHECK(g.end == Approx(x.end).epsilon(1e-3).margin(1e-6));
    }
  }
}

TEST_CASE("ravnest's backward-first stages fill the bubbles that 1F1B leaves on the middle stages",
          "[sim][analytic][pipedream]") {
  // The same pipeline under ravnest (at most 4 micro-batches in flight, as pipedream's first
  // stage).
  auto p = test::prepare(pipeline_scenario("ravnest", "0.02,0.005"),
                         {"training.steps=" + std::to_string(kMicroBatches),
                          "training.eval_every=0", "training.max_in_flight=4"},
                         false);
  const SimResult r = run_simulation(p.spec());
  const auto one_f = one_f_one_b(stage_times(p, effective_training(p.scenario)), kMicroBatches);
  const auto got = simulated_ops(r, 4);
  // Stage 1 (the second): 1F1B does 3 forwards, then waits for B0 with F3 ready; ravnest runs F3
  // in that wait, so its first backward comes after four forwards, and its stage finishes its
  // forwards earlier.
  auto first_backward = [](const std::vector<Op>& ops) {
    for (size_t i = 0; i < ops.size(); ++i)
      if (ops[i].backward) return i;
    return ops.size();
  };
  CHECK(first_backward(one_f[1]) == 3);
  CHECK(first_backward(got[1]) == 4);
  // The idle time of stage 1 before its first backward: 1F1B's is longer.
  auto idle_before_first_backward = [&](const std::vector<Op>& ops) {
    double busy = 0;
    const size_t b = first_backward(ops);
    for (size_t i = 0; i < b; ++i) busy += ops[i].end - ops[i].start;
    return ops[b].start - ops.front().start - busy;
  };
  INFO("stage 1 idle before its first backward: 1F1B "
       << idle_before_first_backward(one_f[1]) << " s, ravnest "
       << idle_before_first_backward(got[1]) << " s");
  CHECK(idle_before_first_backward(got[1]) < idle_before_first_backward(one_f[1]) - 1e-4);
}

TEST_CASE("GPipe's steady throughput is m micro-batches per flush", "[sim][analytic][steady]") {
  // Five steps of four micro-batches: the window spans steps 2-5 whole (the second half of the
  // 20 completions would start inside step 3).
  auto p = test::prepare(pipeline_scenario("gpipe", "1,1"), {"training.steps=5"});
  SimResult r = run_simulation(p.spec());
  auto summary = summarize(p.scenario, p.plan, r.events, RunInfo{"sim", "timing", 0});
  TrainingSpec tr = p.scenario.training;
  tr.weight_stashing = true;
  const double step = gpipe_step(stage_times(p, tr), 4);
  CHECK(summary["steady_window"]["basis"] == "optimizer steps");
  CHECK(summary["steady_window"]["periods"].get<int64_t>() == 4);
  CHECK(summary["steady_window"]["micro_batches"].get<int64_t>() == 16);
  CHECK(summary["steady_samples_per_s"].get<double>() ==
        Approx(4 * p.scenario.data.batch_size / step).epsilon(0.01));
}
