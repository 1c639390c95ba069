// The steady state (core/output/steady_state.h): the window over whole averaging rounds or
// optimizer steps, the evaluations' time taken out of it, and the planner's prediction of the same
// figures against the simulator's.
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "catch.h"
#include "cli_support.h"
#include "core/output/run_output.h"
#include "core/output/steady_state.h"
#include "test_support.h"

using namespace rv;

namespace {

// A plan of `clusters` one-stage clusters.
Plan one_stage_clusters(int clusters) {
  Plan p;
  p.nodes = clusters;
  for (int c = 0; c < clusters; ++c) {
    ClusterPlan cl;
    StagePlan s;
    s.node = c;
    s.layer_begin = 0;
    s.layer_end = 1;
    cl.stages.push_back(s);
    p.clusters.push_back(cl);
  }
  p.throughput = 100;
  return p;
}

Event span(EventKind kind, int node, Seconds start, Seconds end, int64_t step = 0,
           int64_t micro_batch = 0) {
  Event e;
  e.kind = kind;
  e.node = e.cluster = node;
  e.stage = 0;
  e.start = start;
  e.end = end;
  e.step = step;
  e.micro_batch = micro_batch;
  return e;
}

// `n` micro-batches of node `node` finishing evenly in (from, to].
void train(std::vector<Event>& ev, int node, int n, Seconds from, Seconds to) {
  for (int i = 1; i <= n; ++i) {
    const Seconds t = from + (to - from) * i / n;
    ev.push_back(span(EventKind::kBackward, node, t - 0.01, t, 0, i));
  }
}

// The model and data of both scenarios below; [data] stays open for their own keys.
const std::string kMlp = R"(seed = 3
[model]
head = "linear"
kind = "mlp"
hidden = [128, 128]
[data]
kind = "synthetic"
side = 8
classes = 10
batch_size = 32
)";

// A two-stage pipeline that evaluates 16 batches every 75 of its 300 steps.
const std::string kEvaluating = "name = \"steady\"\n" + kMlp + R"(test_samples = 512
[training]
algorithm = "ravnest"
lr = 0.05
steps = 300
eval_every = 75
[planner]
stage_layers = [3, 3]
[network]
model = "ideal"
[sim]
mode = "numeric"
[[devices]]
count = 2
tflops = 0.001
ram_gb = 8
up_mbps = 100
down_mbps = 100
latency_ms = 5
)";

// Two clusters of two stages that average every 20 of their 100 steps.
const std::string kAveraging = "name = \"steady-avg\"\n" + kMlp + R"([training]
algorithm = "ravnest"
lr = 0.05
steps = 100
average_every = 20
[planner]
method = "ga"
clusters = 2
[network]
model = "ideal"
[sim]
mode = "timing"
[[devices]]
count = 4
tflops = 0.001
ram_gb = 8
up_mbps = 10
down_mbps = 10
latency_ms = 5
)";

// `ravnest sim` of `scenario` (one simulation per process: SimGrid's engine runs once), its
// summary.json and plan.json.
struct Simulated {
  nlohmann::json summary;
  Plan plan;
};
Simulated simulate(const std::string& scenario, const std::vector<std::string>& overrides) {
  static int runs = 0;
  const std::filesystem::path d = test::fresh_dir("steady", std::to_string(runs++));
  std::ofstream(d / "s.toml") << scenario;
  std::vector<std::string> args{"sim", "s.toml", "--run-dir", "run"};
  for (const auto& o : overrides) args.insert(args.end(), {"--set", o});
  const test::Result r = test::ravnest(args, d);
  INFO(r.err);
  REQUIRE(r.status == 0);
  Simulated out{read_json_file((d / "run" / "summary.json").string()),
                plan_from_json(read_json_file((d / "run" / "plan.json").string()))};
  std::filesystem::remove_all(d);
  return out;
}

}  // namespace

TEST_CASE("the steady window spans whole averaging rounds", "[steady][output]") {
  // Two clusters: 10 micro-batches each in a second, then a 4 s averaging round, twice, then 10
  // more each that no round closes. Over whole periods: 20 micro-batches per 5 s. The second half
  // of the completions (the former window) would count 30 over the last 5.5 s, with one round in
  // it and the unclosed tail.
  std::vector<Event> ev;
  for (int c = 0; c < 2; ++c) {
    train(ev, c, 10, 0, 1);
    ev.push_back(span(EventKind::kAverage, c, 1, 5 - 0.1 * c, 0));
    train(ev, c, 10, 5, 6);
    ev.push_back(span(EventKind::kAverage, c, 6, 10 - 0.1 * c, 1));
    train(ev, c, 10, 10, 11);
  }
  const SteadyState w = steady_state(one_stage_clusters(2), ev);
  CHECK(w.basis == SteadyState::Basis::kAveragingRounds);
  REQUIRE(w.clusters.size() == 2);
  CHECK(w.of(0)->begin == 5);  // the end of cluster 0's round 0
  CHECK(w.of(1)->begin == Approx(4.9));
  CHECK(w.begin == Approx(4.9));  // the earliest of them
  CHECK(w.end == 10);
  CHECK(w.periods == 1);
  CHECK(w.micro_batches == 20);
  CHECK(w.training_rate(64) == Approx(20 * 64 / 5.0));
  CHECK(w.rate_with_evaluations(64) == Approx(20 * 64 / 5.0));
}

TEST_CASE("where rings end their rounds apart, each cluster's window is its own whole periods",
          "[steady][output]") {
  // Cluster 1's ring ends each round 3 s before cluster 0's (each ring waits only for its own
  // members): both train 10 micro-batches a second and average for 4 s, so each makes 10 per 5 s,
  // and the run ends with a round. Cluster 0: rounds end at 5, 10, 15; cluster 1 at 2, 7, 12.
  std::vector<Event> ev;
  for (int c = 0; c < 2; ++c) {
    const Seconds shift = c == 0 ? 0 : -3;
    for (int r = 0; r < 3; ++r) {
      train(ev, c, 10, 5 * r + shift, 5 * r + shift + 1);
      ev.push_back(span(EventKind::kAverage, c, 5 * r + shift + 1, 5 * r + shift + 5, r));
    }
  }
  const SteadyState w = steady_state(one_stage_clusters(2), ev);
  REQUIRE(w.clusters.size() == 2);
  CHECK(w.of(0)->micro_batches == 20);  // (5, 15]: its periods 2 and 3
  CHECK(w.of(1)->micro_batches == 20);  // (2, 12]
  CHECK(w.micro_batches == 40);
  CHECK(w.begin == 2);
  CHECK(w.end == 15);
  CHECK(w.training_rate(64) == Approx(2 * 20 * 64 / 10.0));
  // The control: one window for both, (5, 15] from the latest end of round 0 to that of round 2
  // (the former rule), counts cluster 1's period in (7, 8] alone: 30 of 40 (random-pool-2 of
  // bench/planner_fidelity.py: 41 of 60 micro-batches for 156 of its 192 clusters).
  int64_t one_window = 0;
  for (const auto& e : ev)
    if (e.kind == EventKind::kBackward && e.end > 5 && e.end <= 15) ++one_window;
  CHECK(one_window == 30);
}

TEST_CASE("without averaging the steady window spans optimizer steps after the first",
          "[steady][output]") {
  // One cluster; step k ends at 2k on node 0; one micro-batch done per step.
  std::vector<Event> ev;
  for (int k = 1; k <= 6; ++k) {
    ev.push_back(span(EventKind::kBackward, 0, 2 * k - 1, 2 * k - 0.5, k - 1, k - 1));
    ev.push_back(span(EventKind::kUpdate, 0, 2 * k - 0.5, 2.0 * k, k));
  }
  const SteadyState w = steady_state(one_stage_clusters(1), ev);
  CHECK(w.basis == SteadyState::Basis::kOptimizerSteps);
  CHECK(w.begin == 2);
  CHECK(w.end == 12);
  CHECK(w.periods == 5);
  CHECK(w.micro_batches == 5);
  CHECK(w.evaluation == 0);
  CHECK(w.training_rate(10) == Approx(5.0));

  SECTION("an evaluation's time and what finished in it are taken out of the training rate") {
    // Evaluation batches 0 and 1 (micro_batch -1, -2) from 5 to 6.5, scored at 7: the interval
    // (5, 7], in which micro-batch 2 finished (at 5.5).
    ev.push_back(span(EventKind::kForward, 0, 5, 6, 2, -1));
    ev.push_back(span(EventKind::kForward, 0, 6, 6.5, 2, -2));
    ev.push_back(span(EventKind::kEval, 0, 7, 7, 2));
    const SteadyState e = steady_state(one_stage_clusters(1), ev);
    CHECK(e.evaluation == Approx(2.0));
    CHECK(e.evaluations == 1);
    CHECK(e.evaluation_batches == 2);
    CHECK(e.micro_batches == 5);
    CHECK(e.training_micro_batches == 4);
    CHECK(e.training_rate(10) == Approx(40.0 / 8));
    CHECK(e.rate_with_evaluations(10) == Approx(50.0 / 10));
  }
  SECTION("a run that averaged once has no steady state: its steps would leave the averaging out") {
    std::vector<Event> once = ev;
    once.push_back(span(EventKind::kAverage, 0, 12, 20, 0));
    const SteadyState s = steady_state(one_stage_clusters(1), once);
    CHECK(s.empty());
    CHECK(s.training_rate(10) == 0);
  }
  SECTION("too short a run has no steady state") {
    std::vector<Event> one(ev.begin(), ev.begin() + 2);
    const SteadyState s = steady_state(one_stage_clusters(1), one);
    CHECK(s.empty());
    CHECK(std::string(basis_name(s.basis)) == "none");
    CHECK(s.training_rate(10) == 0);
  }
}

TEST_CASE("the plan predicts an evaluation's pause and the rate with evaluations",
          "[steady][planner]") {
  Plan p = one_stage_clusters(1);
  p.evaluation_fill_time = 0.5;
  p.evaluation_batch_time = 0.1;
  CHECK(p.evaluation_time(0) == 0);
  CHECK(p.evaluation_time(1) == Approx(0.5));
  CHECK(p.evaluation_time(11) == Approx(1.5));
  // 1,000 samples at 100/s = 10 s, and two evaluations of 11 batches: 13 s.
  CHECK(p.rate_with_evaluations(1000, 2, 11) == Approx(1000 / 13.0));
}

TEST_CASE("evaluations are timed apart: training alone runs as fast as without them",
          "[steady][sim]") {
  const Simulated run = simulate(kEvaluating, {});
  const auto& with = run.summary;
  const auto without = simulate(kEvaluating, {"training.eval_every=0"}).summary;
  const Plan& plan = run.plan;
  const auto& w = with["steady_window"];
  CHECK(w["basis"] == "optimizer steps");
  CHECK(w["evaluations"].get<int64_t>() == 3);  // at 75, 150 and 225; the final one after the end
  CHECK(w["evaluation_batches"].get<int64_t>() == 16);
  CHECK(without["steady_window"]["evaluations"].get<int64_t>() == 0);
  const double train = with["steady_samples_per_s"].get<double>(),
               plain = without["steady_samples_per_s"].get<double>(),
               whole = with["steady_samples_per_s_with_evaluations"].get<double>();
  INFO("training " << train << ", without evaluations " << plain << ", with them " << whole);
  // Taking the evaluations' time out, and what finished in it, leaves the rate of a run without
  // evaluations: 0.7% here (counting what finished in them too: 1.4%; taking out the busiest
  // node's evaluation forwards instead: 0.3%, but that misses an evaluation held up by a link, as
  // the quickstart's are).
  CHECK(train == Approx(plain).epsilon(0.02));
  CHECK(whole < 0.99 * train);
  // The planner's two figures against the simulator's.
  CHECK(plan.throughput == Approx(plain).epsilon(0.03));
  CHECK(w["predicted_samples_per_s_with_evaluations"].get<double>() == Approx(whole).epsilon(0.05));
}

TEST_CASE("averaging clusters: the steady window is whole rounds, as the planner predicts",
          "[steady][sim]") {
  const Simulated run = simulate(kAveraging, {});
  const auto& s = run.summary;
  const Plan& plan = run.plan;
  const auto& w = s["steady_window"];
  REQUIRE(plan.clusters.size() == 2);
  CHECK(w["basis"] == "averaging rounds");
  CHECK(w["periods"].get<int64_t>() == 4);             // rounds at 20, 40, ..., 100
  CHECK(w["micro_batches"].get<int64_t>() == 2 * 80);  // both clusters' steps 21-100
  // (The former window, the second half of the completions, gave 7,375 here against 6,589
  // predicted: 12% apart.)
  CHECK(s["steady_samples_per_s"].get<double>() == Approx(plan.throughput).epsilon(0.02));
}

TEST_CASE(
    "drained pipelines: each averaging period pays the pipeline's fill, as the planner "
    "predicts",
    "[steady][sim]") {
  // theory-quadratic: two clusters of four stages over 5 ms links, averaging every 5 updates: a
  // lone micro-batch's round trip (~83 ms) is over three periods (~25 ms), and the pipeline drains
  // before each averaging (algo/ravnest.cc), so the fill is paid every 5 micro-batches.
  const Simulated run =
      simulate(test::slurp(test::source_path("scenarios/theory-quadratic.toml")),
               {"sim.mode=\"timing\"", "planner.method=\"greedy\"", "training.steps=200"});
  const Plan& plan = run.plan;
  REQUIRE(plan.clusters.size() == 2);
  REQUIRE(plan.clusters[0].stages.size() == 4);
  const double steady = run.summary["steady_samples_per_s"].get<double>();
  CHECK(run.summary["steady_window"]["basis"] == "averaging rounds");
  CHECK(plan.throughput == Approx(steady).epsilon(0.02));
  // Negative control: the prediction without the fill (5 periods, then the averaging) is far off.
  const double e = 5, batch = 16;
  const double no_fill = 2 * batch * e / (e * plan.clusters[0].period + plan.averaging_time);
  CHECK(no_fill > 1.3 * steady);
}

TEST_CASE("averaging rings under tcp: each step held by the warm floor, as the planner predicts",
          "[steady][sim]") {
  // gpt-sort: four one-stage clusters over 50 Mbit/s links with a 40 ms round trip; each ring
  // step is one message too small to fill the path, so the simulator holds it by its warm floor.
  const std::vector<std::string> sets = {"sim.mode=\"timing\"", "planner.method=\"greedy\"",
                                         "training.steps=200"};
  std::string toml = test::slurp(test::source_path("scenarios/gpt-sort.toml"));
  const std::string profile = "\"../profiles/cpu.toml\"";  // relative to scenarios/
  REQUIRE(toml.find(profile) != std::string::npos);
  toml.replace(toml.find(profile), profile.size(),
               "\"" + test::source_path("profiles/cpu.toml") + "\"");
  const Simulated tcp = simulate(toml, sets);
  std::vector<std::string> ideal_sets = sets;
  ideal_sets.push_back("network.model=\"ideal\"");
  const Simulated ideal = simulate(toml, ideal_sets);
  const double round = tcp.summary["averaging"]["mean_round_s"].get<double>();
  const double bytes_only = ideal.summary["averaging"]["mean_round_s"].get<double>();
  INFO("tcp round " << round << " s (predicted " << tcp.plan.averaging_time << " s), ideal "
                    << bytes_only << " s");
  REQUIRE(tcp.plan.clusters.size() == 4);
  CHECK(tcp.plan.averaging_time == Approx(round).epsilon(0.05));
  CHECK(tcp.plan.throughput ==
        Approx(tcp.summary["steady_samples_per_s"].get<double>()).epsilon(0.05));
  // Negative control: the links' bytes alone (the ideal network's round) are far under it.
  CHECK(bytes_only < 0.8 * round);
}
