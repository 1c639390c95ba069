// Churn: the schedule of departures and arrivals, the roster every node replays from it, and
// ravnest recovering in the simulator (a first, middle or last stage lost; a newcomer; a departure
// during an averaging and during a state transfer), against algorithms that stop, saying why.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <stdexcept>

#include "algo/pipeline_worker.h"
#include "algo/registry.h"
#include "algo/roster.h"
#include "catch.h"
#include "cli_support.h"
#include "core/churn/schedule.h"
#include "core/error.h"
#include "core/output/metrics.h"
#include "core/output/run_output.h"
#include "exec/wall_env.h"
#include "loopback/loopback.h"
#include "snippets.h"
#include "test_support.h"

using namespace rv;

namespace {

// Two clusters of three stages (nodes 0-2, 3-5) and a spare (node 6), on slow PCs: about 7
// simulated seconds, averaging every 20 updates.
const char* kChurn = R"(name = "churn"
seed = 5
[model]
head = "linear"
kind = "mlp"
hidden = [64, 64, 64]
[data]
kind = "digits"
batch_size = 32
[training]
optimizer = "adam"
lr = 0.003
steps = 200
eval_every = 100
average_every = 20
[planner]
method = "manual"
[[planner.cluster]]
nodes = [0, 1, 2]
[[planner.cluster]]
nodes = [3, 4, 5]
[churn]
detect_s = 0.5
[[devices]]
count = 7
up_mbps = 20
down_mbps = 50
latency_ms = 10
tflops = 0.001
)";

std::vector<ChurnEvent> all(ChurnSchedule s, size_t limit = 1000) {
  std::vector<ChurnEvent> out;
  while (out.size() < limit) {
    auto e = s.next();
    if (!e) break;
    out.push_back(*e);
  }
  return out;
}

std::vector<Event> of_kind(const std::vector<Event>& events, EventKind kind) {
  std::vector<Event> out;
  for (const Event& e : events)
    if (e.kind == kind) out.push_back(e);
  return out;
}

// A membership fed by hand, for the roster.
struct FakeMembership : Membership {
  std::vector<MemberEvent> log;
  std::vector<int64_t> seals;
  int64_t seal(int64_t round) override {
    while (static_cast<int64_t>(seals.size()) <= round)
      seals.push_back(static_cast<int64_t>(log.size()));
    return seals[static_cast<size_t>(round)];
  }
  int64_t sealed(int64_t round) const override {
    return round < static_cast<int64_t>(seals.size()) ? seals[static_cast<size_t>(round)] : -1;
  }
  std::vector<MemberEvent> events(size_t from) const override {
    return {log.begin() + static_cast<std::ptrdiff_t>(from), log.end()};
  }
};

Plan two_clusters_and_a_spare() {
  Plan p;
  p.nodes = 8;  // 0-2, 3-5: clusters; 6: spare; 7: arrives later
  for (int c = 0; c < 2; ++c) {
    ClusterPlan cp;
    for (int s = 0; s < 3; ++s) cp.stages.push_back({3 * c + s, 2 * s, 2 * s + 2});
    p.clusters.push_back(cp);
  }
  return p;
}

// `toml` with the overrides of array elements it does not have yet ("churn.event.1.at_s=2",
// "planner.cluster.2.nodes=[6, 7, 8]") appended as tables ([[churn.event]], ...), in index order;
// the other overrides are left in `overrides`.
std::string with_elements(std::string toml, std::vector<std::string>& overrides) {
  std::map<std::string, std::map<int, std::vector<std::string>>>
      added;  // table -> index -> "k = v"
  std::vector<std::string> rest;
  for (const std::string& o : overrides) {
    bool taken = false;
    for (const std::string table : {"churn.event", "planner.cluster"}) {
      if (o.rfind(table + ".", 0) != 0) continue;
      const size_t dot = o.find('.', table.size() + 1), eq = o.find('=');
      const int index = std::stoi(o.substr(table.size() + 1, dot - table.size() - 1));
      size_t have = 0;
      for (size_t at = toml.find("[[" + table + "]]"); at != std::string::npos;
           at = toml.find("[[" + table + "]]", at + 1))
        ++have;
      if (static_cast<size_t>(index) < have) break;
      added[table][index].push_back(o.substr(dot + 1, eq - dot - 1) + " = " + o.substr(eq + 1));
      taken = true;
    }
    if (!taken) rest.push_back(o);
  }
  for (const auto& [table, elements] : added)
    for (const auto& [index, lines] : elements) {
      toml += "\n[[" + table + "]]\n";
      for (const std::string& l : lines) toml += l + "\n";
    }
  overrides = rest;
  return toml;
}

// The training losses of a run, in time order.
std::vector<double> training_losses(const std::vector<Event>& events) {
  std::vector<Event> l = of_kind(events, EventKind::kLoss);
  std::stable_sort(l.begin(), l.end(),
                   [](const Event& a, const Event& b) { return a.end < b.end; });
  std::vector<double> out;
  for (const Event& e : l) out.push_back(e.loss);
  return out;
}

// The mean of v over [from, to) as fractions of its length.
double mean_of(const std::vector<double>& v, double from, double to) {
  const auto a = static_cast<size_t>(from * v.size()), b = static_cast<size_t>(to * v.size());
  double sum = 0;
  for (size_t i = a; i < b; ++i) sum += v[i];
  return sum / static_cast<double>(b - a);
}

struct Ran {
  std::vector<Event> events;
  nlohmann::json summary;
  std::string trace;  // trace.json, with output.trace = true
};

// Runs `ravnest <command...> s.toml --run-dir run --progress off --set <overrides>` in a fresh
// folder holding `toml` as s.toml; `inspect` reads the folder before it goes. Returns the exit
// status; `err` gets stderr.
int run_ravnest(const std::vector<std::string>& command, std::vector<std::string> overrides,
                const std::string& toml, std::string* err,
                const std::function<void(const std::filesystem::path&)>& inspect = {}) {
  namespace fs = std::filesystem;
  static int count = 0;
  const fs::path dir = fs::temp_directory_path() /
                       ("rv-churn-" + std::to_string(::getpid()) + "-" + std::to_string(count++));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string text = with_elements(toml, overrides);
  std::ofstream(dir / "s.toml") << text;
  std::vector<std::string> args = command;
  args.insert(args.end(), {"s.toml", "--run-dir", "run", "--progress", "off"});
  for (const std::string& o : overrides) args.insert(args.end(), {"--set", o});
  const test::Result r = test::ravnest(args, dir);
  *err = r.err;
  if (inspect) inspect(dir);
  fs::remove_all(dir);
  return r.status;
}

// Runs `toml` with `overrides` by `ravnest sim` (SimGrid allows one simulation per process) and
// reads its run folder back. A run that fails throws std::runtime_error with its stderr.
Ran simulate_churn(std::vector<std::string> overrides, const std::string& toml = kChurn) {
  namespace fs = std::filesystem;
  Ran out;
  std::string err;
  const int status =
      run_ravnest({"sim"}, std::move(overrides), toml, &err, [&](const fs::path& dir) {
        if (fs::exists(dir / "run" / "metrics.csv")) {  // output.metrics = "summary" writes none
          std::ifstream metrics(dir / "run" / "metrics.csv");
          out.events = parse_events_csv(metrics, (dir / "run" / "metrics.csv").string());
        }
        if (fs::exists(dir / "run" / "summary.json"))
          out.summary = nlohmann::json::parse(test::slurp(dir / "run" / "summary.json"));
        if (fs::exists(dir / "run" / "trace.json"))
          out.trace = test::slurp(dir / "run" / "trace.json");
      });
  if (status != 0)
    throw std::runtime_error("ravnest sim exit " + std::to_string(status) + ": " + err);
  return out;
}

}  // namespace

TEST_CASE("churn schedule: timed departures, arrivals and drawn sessions, the same every time",
          "[churn]") {
  std::vector<std::string> o = {"churn.event.0.at_s=3", "churn.event.0.leave=2",
                                "churn.event.1.at_s=1", "churn.event.1.leave=4",
                                "churn.event.2.at_s=2", "churn.event.2.leave=4"};
  Scenario s = parse_scenario(with_elements(kChurn, o), "t.toml", o);
  auto events = all(ChurnSchedule(s));
  // In time order; node 4's second departure is void (it is gone already).
  REQUIRE(events.size() == 2);
  CHECK(events[0].node == 4);
  CHECK(events[0].at == 1);
  CHECK_FALSE(events[0].join);
  CHECK(events[1].node == 2);
  CHECK(events[1].at == 3);

  // Drawn sessions: exponential, mean 1 / rate; with rejoin_s a node comes back that long after.
  Scenario d = parse_scenario(kChurn, "t.toml", {"churn.leave_per_hour=3600", "churn.rejoin_s=2"});
  auto drawn = all(ChurnSchedule(d), 20000);
  REQUIRE(drawn.size() == 20000);
  const bool same = drawn == all(ChurnSchedule(d), 20000);
  CHECK(same);
  std::map<int, double> left_at;
  double session_sum = 0;
  int sessions = 0;
  std::map<int, double> joined_at;
  for (const ChurnEvent& e : drawn) {
    if (e.join) {
      REQUIRE(left_at.count(e.node));
      CHECK(e.at == Approx(left_at[e.node] + 2));
      joined_at[e.node] = e.at;
    } else {
      session_sum += e.at - (joined_at.count(e.node) ? joined_at[e.node] : 0.0);
      ++sessions;
      left_at[e.node] = e.at;
    }
  }
  for (size_t i = 1; i < drawn.size(); ++i) CHECK(drawn[i - 1].at <= drawn[i].at);
  // 1 per hour per second of rate 3600/h: mean session 1 s, within 5% over ~10,000 sessions.
  CHECK(session_sum / sessions == Approx(1.0).epsilon(0.05));
  // Another seed, other sessions.
  Scenario other = d;
  other.seed = 6;
  const bool differ = !(all(ChurnSchedule(other), 50) == all(ChurnSchedule(d), 50));
  CHECK(differ);
}

TEST_CASE(
    "churn keys: later groups come last, departures name a node, recovery needs the multi-ring",
    "[churn]") {
  const std::string late =
      std::string(kChurn) + "[[devices]]\nname = \"late\"\ncount = 2\njoin_at_s = 30\n";
  Scenario s = parse_scenario(late, "t.toml");
  CHECK(s.node_count() == 9);
  CHECK(s.initial_node_count() == 7);
  CHECK(s.churn.enabled(s.devices));
  // The planner plans without the later nodes, and the plan names the whole pool.
  test::Prepared p = test::prepare(late, {"planner.method=greedy", "planner.clusters=2"}, false);
  CHECK(p.plan.nodes == 9);
  for (const auto& c : p.plan.clusters)
    for (const auto& st : c.stages) CHECK(st.node < 7);
  // A later group before one present from the start.
  const std::string early =
      std::string(kChurn) +
      "[[devices]]\nname = \"late\"\njoin_at_s = 30\n[[devices]]\nname = \"x\"\n";
  CHECK_THROWS_WITH(parse_scenario(early, "t.toml"),
                    Catch::Contains("devices[2]") && Catch::Contains("come after"));
  std::vector<std::string> no_leave = {"churn.event.0.at_s=3"};
  CHECK_THROWS_WITH(parse_scenario(with_elements(kChurn, no_leave), "t.toml"),
                    Catch::Contains("churn.event[0].leave") && Catch::Contains("missing"));
  std::vector<std::string> outside = {"churn.event.0.at_s=3", "churn.event.0.leave=7"};
  CHECK_THROWS_WITH(parse_scenario(with_elements(kChurn, outside), "t.toml"),
                    Catch::Contains("no node 7 in a pool of 7"));
  Scenario ring = parse_scenario(kChurn, "t.toml",
                                 {"churn.leave_per_hour=1", "training.allreduce=single-ring"});
  CHECK_THROWS_WITH(check_churn_support(ring),
                    Catch::Contains("training.allreduce") && Catch::Contains("multi-ring"));
  Scenario over =
      parse_scenario(kChurn, "t.toml", {"churn.leave_per_hour=1", "training.averaging=overlapped"});
  CHECK_THROWS_WITH(check_churn_support(over), Catch::Contains("bulk-sync"));
  // Without churn, any all-reduce goes.
  CHECK_NOTHROW(
      check_churn_support(parse_scenario(kChurn, "t.toml", {"training.allreduce=single-ring"})));
}

TEST_CASE("roster: spares take lost stages, newcomers fill waiting ones, rounds see one membership",
          "[churn]") {
  const Plan plan = two_clusters_and_a_spare();
  FakeMembership m;
  Roster r(plan, 7);
  r.update(m);
  CHECK(r.role_of(6).stage == -1);
  CHECK(r.role_of(4).cluster == 1);
  CHECK(r.any_up());
  // Round 0 sealed with nothing: both clusters.
  m.seal(0);
  r.update(m);
  CHECK(r.view(0) == std::vector<int>{0, 1});
  // Node 4 leaves: the spare takes its stage at once; cluster 1 is down.
  m.log.push_back({4, false, 1.0});
  r.update(m);
  CHECK(r.down(1));
  CHECK_FALSE(r.down(0));
  CHECK(r.role_of(6).cluster == 1);
  CHECK(r.role_of(6).stage == 1);
  CHECK(r.role_of(3).next == 6);
  CHECK(r.role_of(5).prev == 6);
  REQUIRE(r.takeovers().size() == 1);
  CHECK(r.takeovers()[0].replaced == 4);
  CHECK(r.round_counting(0) == 1);  // the next round to be sealed counts it
  // Round 1 counts it: cluster 1 sits out, and is whole, so it is rebuilt after round 1.
  m.seal(1);
  r.update(m);
  CHECK(r.view(1) == std::vector<int>{0});
  CHECK(r.rebuilt_after(1, 1));
  CHECK_FALSE(r.down(1));
  CHECK(r.assignment_at(1)[1] == std::vector<int>{3, 6, 5});
  // Node 1 leaves with no spare left: its stage waits; node 7 arrives and takes it.
  m.log.push_back({1, false, 2.0});
  m.seal(2);
  r.update(m);
  CHECK(r.view(2) == std::vector<int>{1});
  CHECK_FALSE(r.rebuilt_after(0, 2));  // not whole
  CHECK(r.assignment_at(2)[0] == std::vector<int>{0, -1, 2});
  m.log.push_back({7, true, 3.0});
  r.update(m);
  CHECK(r.role_of(7).cluster == 0);
  CHECK(r.role_of(7).stage == 1);
  CHECK(r.round_counting(2) == 3);
  m.seal(3);
  r.update(m);
  CHECK(r.rebuilt_after(0, 3));
  // Both clusters down at once: nothing is left up.
  m.log.push_back({0, false, 4.0});
  m.log.push_back({3, false, 4.0});
  r.update(m);
  CHECK_FALSE(r.any_up());
  // Every roster fed the same log agrees.
  Roster again(plan, 7);
  again.update(m);
  CHECK(again.assignment() == r.assignment());
  for (int64_t k = 0; k < 4; ++k) CHECK(again.view(k) == r.view(k));
}

// A Compute for timing mode: no maths, no time.
struct NoCompute : Compute {
  bool numeric() const override { return false; }
  Seconds run(const Work&, SavedActivations, const std::function<void()>&) override { return kNaN; }
};

TEST_CASE("churn: a replacement's first messages are kept though this node has not yet heard of it",
          "[churn]") {
  // Clusters {0, 1} and {2, 3}. Node 2 left; node 3 last took its role while stage 0 waited for a
  // node (prev -1). Node 2's replacement joins, round 0 is sealed, and the replacement (which
  // heard of the seal first: the real membership is polled) sends its first forward of period 1
  // before node 3's notice arrives. Node 3 must keep it: dropped, both ends would wait forever.
  const test::Prepared p =
      test::prepare(std::string("name = \"early\"\n") + test::kDigitsMlp +
                        "[sim]\nmode = \"timing\"\n[training]\nsteps = 40\naverage_every = 20\n"
                        "[planner]\nmethod = \"manual\"\n[[planner.cluster]]\nnodes = [0, 1]\n"
                        "[[planner.cluster]]\nnodes = [2, 3]\n[[devices]]\ncount = 4\n",
                    {}, false);
  const RunSpec spec = p.spec();
  FakeMembership members;
  members.log.push_back({2, false, 1.0});
  LoopbackHub hub(4, 5.0);
  LoopbackTransport transport(hub, 3);
  WallClock clock;
  NoCompute compute;
  EventLog log;
  NodeEnv env{transport, clock, compute, log};
  env.membership = &members;
  PipelineWorker w(env, spec, 3, p.scenario.training, 2);
  w.recovering(true);
  w.refresh();
  w.set_role(w.roster()->role_of(3));
  REQUIRE(w.role().cluster == 1);
  REQUIRE(w.role().prev == -1);
  w.set_period(0, true);  // cluster 1 sits round 0 out

  members.log.push_back({2, true, 2.0});  // the replacement; node 3 gets no notice of it yet
  members.seal(0);
  auto forward = [](int src, int64_t id) {
    Message m;
    m.kind = MsgKind::kForward;
    m.src = src;
    m.id = id;
    m.bytes = kHeaderBytes;
    return m;
  };
  hub.put(3, forward(0, 20));  // not a neighbour, now or later: dropped
  hub.put(3, forward(2, 5));   // the old node 2's, of the period given up: dropped
  hub.put(3, forward(2, 20));  // the replacement's, of period 1: kept
  const std::optional<Message> got = w.try_recv();
  REQUIRE(got.has_value());
  CHECK(got->src == 2);
  CHECK(got->id == 20);
  CHECK_FALSE(w.try_recv().has_value());
}

TEST_CASE("churn: ravnest loses a first, a middle or a last stage, and the spare takes it over",
          "[churn][sim]") {
  const Ran base = simulate_churn({});
  for (int lost : {3, 4, 5}) {
    INFO("node " << lost << " leaves at 1 s");
    const std::vector<std::string> leave = {"churn.event.0.at_s=1",
                                            "churn.event.0.leave=" + std::to_string(lost)};
    const Ran run = simulate_churn(leave);
    INFO(run.summary.dump(2));
    // The spare took the lost stage, in cluster 1.
    const auto assigns = of_kind(run.events, EventKind::kAssign);
    REQUIRE(assigns.size() == 1);
    CHECK(assigns[0].node == 6);
    CHECK(assigns[0].peer == lost);
    CHECK(assigns[0].cluster == 1);
    CHECK(assigns[0].stage == lost - 3);
    CHECK(assigns[0].end == Approx(1.5));  // churn.detect_s after the departure
    // What was in flight in cluster 1 was dropped, recorded by the survivors that held it (when
    // the first stage is lost, the survivors finish what they hold: its backwards die with it).
    const auto drops = of_kind(run.events, EventKind::kDrop);
    if (lost != 3) CHECK_FALSE(drops.empty());
    for (const Event& d : drops) {
      CHECK(d.cluster == 1);
      CHECK(d.node != lost);
      CHECK(d.end == Approx(1.5));
    }
    CHECK(run.summary["churn"]["dropped_micro_batches"].get<int64_t>() == static_cast<int64_t>([&] {
            std::set<int64_t> ids;
            for (const Event& d : drops) ids.insert(d.micro_batch);
            return ids.size();
          }()));
    // Each of the cluster's nodes (the spare among them) fetched its state after a round it sat
    // out.
    const auto transfers = of_kind(run.events, EventKind::kTransfer);
    std::set<int> fetched;
    for (const Event& t : transfers) {
      fetched.insert(t.node);
      CHECK(t.bytes > 0);
    }
    std::set<int> cluster1 = {3, 4, 5, 6};
    cluster1.erase(lost);
    CHECK(fetched == cluster1);
    CHECK_FALSE(of_kind(run.events, EventKind::kOut).empty());
    // The run went on: the spare trained its stage, the last eval is as good as without churn.
    int spare_updates = 0;
    for (const Event& e : of_kind(run.events, EventKind::kUpdate)) spare_updates += e.node == 6;
    CHECK(spare_updates > 50);
    const std::vector<double> losses = training_losses(run.events);
    REQUIRE(losses.size() > 100);
    CHECK(mean_of(losses, 0, 0.2) > 2 * mean_of(losses, 0.8, 1.0));
    CHECK(run.summary["final"]["test_accuracy"].get<double>() >
          base.summary["final"]["test_accuracy"].get<double>() - 0.05);
    CHECK(run.summary["churn"]["leaves"] == 1);
    CHECK(run.summary["churn"]["takeovers"] == 1);
    CHECK(run.summary["churn"]["samples_lost"].get<int64_t>() > 0);
    CHECK(run.summary["train_samples"].get<int64_t>() <
          base.summary["train_samples"].get<int64_t>());
    // Simulated: the same scenario gives the same events.
    const Ran again = simulate_churn(leave);
    CHECK(events_csv(again.events) == events_csv(run.events));
  }
  CHECK_FALSE(base.summary.contains("churn"));
}

TEST_CASE("churn: a newcomer takes the stage that waited for it", "[churn][sim]") {
  const std::string late =
      std::string(kChurn) +
      "[[devices]]\nname = \"late\"\ncount = 1\njoin_at_s = 3\nup_mbps = 20\ndown_mbps = 50\n"
      "latency_ms = 10\ntflops = 0.001\n";
  // No spare: devices[0] has 6 nodes; node 6 arrives at 3 s.
  const Ran run = simulate_churn(
      {"devices.0.count=6", "churn.event.0.at_s=1", "churn.event.0.leave=4", "output.trace=true"},
      late);
  INFO(run.summary.dump(2));
  const auto joins = of_kind(run.events, EventKind::kJoin);
  REQUIRE(joins.size() == 1);
  CHECK(joins[0].node == 6);
  CHECK(joins[0].end == 3);
  const auto assigns = of_kind(run.events, EventKind::kAssign);
  REQUIRE(assigns.size() == 1);
  CHECK(assigns[0].node == 6);
  CHECK(assigns[0].peer == -1);  // it took a stage that was waiting
  CHECK(assigns[0].stage == 1);
  CHECK(assigns[0].end == 3);
  // Cluster 1 sat out every round from its loss until the newcomer had fetched its state.
  std::set<int64_t> out_rounds;
  for (const Event& e : of_kind(run.events, EventKind::kOut)) out_rounds.insert(e.step);
  CHECK(out_rounds.size() >= 2);
  double fetched = 0;
  for (const Event& t : of_kind(run.events, EventKind::kTransfer))
    if (t.node == 6) fetched = t.end;
  CHECK(fetched > 3);
  int updates = 0;
  for (const Event& e : of_kind(run.events, EventKind::kUpdate))
    if (e.node == 6) {
      CHECK(e.start >= fetched);
      ++updates;
    }
  CHECK(updates > 20);
  CHECK(run.summary["churn"]["joins"] == 1);
  CHECK(run.summary["final"]["test_accuracy"].get<double>() > 0.85);
  // The time cluster 1 went without finishing a micro-batch: at least from the loss to the
  // newcomer's arrival.
  CHECK(run.summary["churn"]["cluster_seconds_without_progress"].get<double>() > 2.0);
  // The trace marks the departure and the arrival across every row, the rest on its node's.
  const nlohmann::json trace = nlohmann::json::parse(run.trace);
  std::set<std::string> churn_names;
  for (const auto& e : trace["traceEvents"])
    if (e.value("cat", "") == "churn") churn_names.insert(e["name"].get<std::string>());
  CHECK(churn_names.count("leave node 4") == 1);
  CHECK(churn_names.count("join node 6") == 1);
  CHECK(churn_names.count("out") == 1);
  CHECK(churn_names.count("drop") == 1);
}

TEST_CASE("churn: a departure during an averaging gives up only the rings it was in",
          "[churn][sim]") {
  // Without churn, node 1's first averaging (with node 4: the rings of stage 1) runs over ~0.716 s
  // to ~0.779 s; node 4 leaves a quarter of the way in, before it has sent its last part. (By the
  // middle it has sent everything: the tcp model's warm floor holds the last part to ~0.779 s, and
  // what a departed node was sending stays on the wire, sim/sim_churn.h.)
  const Ran base = simulate_churn({});
  double start = -1, end = -1;
  for (const Event& e : of_kind(base.events, EventKind::kAverage))
    if (e.node == 1 && e.step == 0) {
      start = e.start;
      end = e.end;
    }
  REQUIRE(start > 0);
  const double at = start + (end - start) / 4;
  const Ran run =
      simulate_churn({"churn.event.0.at_s=" + std::to_string(at), "churn.event.0.leave=4"});
  INFO(run.summary.dump(2));
  // Node 1 waited for node 4 until the notice, then gave the ring up and went on.
  bool gave_up = false;
  for (const Event& e : of_kind(run.events, EventKind::kAverage))
    if (e.node == 1 && e.step == 0) gave_up = e.end == Approx(at + 0.5);
  CHECK(gave_up);
  // The other stages' averagings of round 0 did not involve node 4 and ended as without churn.
  for (const Event& e : of_kind(run.events, EventKind::kAverage))
    if (e.step == 0 && (e.node == 0 || e.node == 2))
      for (const Event& b : of_kind(base.events, EventKind::kAverage))
        if (b.step == 0 && b.node == e.node) CHECK(e.end == b.end);
  CHECK(of_kind(run.events, EventKind::kAssign).size() == 1);
  CHECK(run.summary["final"]["test_accuracy"].get<double>() > 0.85);
}

TEST_CASE("churn: a donor that leaves during a transfer is replaced by another cluster's node",
          "[churn][sim]") {
  // Three clusters; cluster 1 loses node 4 and fetches from cluster 2 (the next after its own)
  // after the round it sits out.
  const std::vector<std::string> three = {"devices.0.count=10", "planner.cluster.2.nodes=[6, 7, 8]",
                                          "churn.event.0.at_s=1", "churn.event.0.leave=4"};
  const Ran first = simulate_churn(three);
  double asked = -1;
  for (const Event& t : of_kind(first.events, EventKind::kTransfer))
    if (t.node == 9) asked = t.start;  // the spare (node 9) took node 4's stage
  REQUIRE(asked > 0);
  // Node 7 (cluster 2's stage 1, the donor of that stage) leaves just before the request reaches
  // it: it never answers, and the spare asks cluster 0's node 1 once it hears of it.
  std::vector<std::string> again = three;
  again.push_back("churn.event.1.at_s=" + std::to_string(asked));
  again.push_back("churn.event.1.leave=7");
  const Ran run = simulate_churn(again);
  INFO(run.summary.dump(2));
  std::map<int, int> asked_of;  // node -> state requests sent to it by node 9
  for (const Event& e : of_kind(run.events, EventKind::kSend))
    if (e.node == 9 && e.micro_batch >= 0 && e.bytes == kHeaderBytes) ++asked_of[e.peer];
  CHECK(asked_of[1] == 1);
  CHECK(asked_of[7] == 1);
  double fetched = -1;
  for (const Event& t : of_kind(run.events, EventKind::kTransfer))
    if (t.node == 9) fetched = t.end;
  CHECK(fetched > asked + 0.5);  // after the notice of node 7's departure
  CHECK(run.summary["churn"]["leaves"] == 2);
  CHECK(run.summary["final"]["test_accuracy"].get<double>() > 0.85);
}

TEST_CASE("churn: algorithms that cannot recover, and a run with no cluster left, stop and say why",
          "[churn][sim]") {
  for (const char* algo : {"gpipe", "sync-dp"}) {
    INFO(algo);
    const std::vector<std::string> o = {std::string("training.algorithm=") + algo,
                                        "churn.event.0.at_s=1", "churn.event.0.leave=1"};
    CHECK_THROWS_WITH(simulate_churn(o),
                      Catch::Contains(std::string(algo) + " cannot go on without node 1") &&
                          Catch::Contains("only ravnest recovers"));
  }
  // Both clusters lose a node before either is rebuilt.
  CHECK_THROWS_WITH(
      simulate_churn({"churn.event.0.at_s=1", "churn.event.0.leave=4", "churn.event.1.at_s=1.1",
                      "churn.event.1.leave=1"}),
      Catch::Contains("every cluster has lost a node") && Catch::Contains("no cluster is left"));
}

TEST_CASE(
    "churn: drawn sessions over many rounds, in timing mode, end with every node accounted for",
    "[churn][sim]") {
  // Three clusters and three spares; sessions of 3 minutes on average, nodes back 10 s after.
  const Ran run = simulate_churn({"devices.0.count=12", "planner.cluster.2.nodes=[6, 7, 8]",
                                  "sim.mode=timing", "training.steps=2000",
                                  "churn.leave_per_hour=20", "churn.rejoin_s=10", "seed=1"});
  INFO(run.summary.dump(2));
  const auto& c = run.summary["churn"];
  CHECK(c["leaves"].get<int>() >= 3);
  CHECK(c["joins"].get<int>() >= 1);
  CHECK(c["takeovers"].get<int>() >= 1);
  CHECK(c["state_transfers"].get<int>() >= 3);
  // Lost samples are the planned less the trained, and every cluster's last round was trained.
  CHECK(c["samples_lost"].get<int64_t>() ==
        c["planned_samples"].get<int64_t>() - run.summary["train_samples"].get<int64_t>());
  CHECK(run.summary["train_samples"].get<int64_t>() > c["planned_samples"].get<int64_t>() / 2);
}

TEST_CASE("churn: the shipped scenario runs 120 PCs through its sessions to the end",
          "[churn][sim][slow]") {
  std::ifstream in(test::source_path("scenarios/churn.toml"));
  std::stringstream text;
  text << in.rdbuf();
  const Ran run = simulate_churn({}, text.str());
  INFO(run.summary.dump(2));
  const auto& c = run.summary["churn"];
  CHECK(run.summary["nodes"] == 120);
  CHECK(run.summary["clusters"].get<int>() >= 8);
  CHECK(c["leaves"].get<int>() >= 50);
  CHECK(c["joins"].get<int>() >= 20);
  CHECK(c["takeovers"].get<int>() >= 20);
  CHECK(c["state_transfers"].get<int>() >= c["takeovers"].get<int>());
  CHECK(c["samples_lost"].get<int64_t>() > 0);
  CHECK(c["samples_lost"].get<int64_t>() < c["planned_samples"].get<int64_t>() / 2);
}

TEST_CASE("churn: the executors that do not play it refuse it, before any run", "[churn][cli]") {
  const std::vector<std::string> leave = {"churn.event.0.at_s=1", "churn.event.0.leave=4"};
  std::string err;
  bool folder = true;
  auto no_folder = [&](const std::filesystem::path& dir) {
    folder = std::filesystem::exists(dir / "run");
  };
  CHECK(run_ravnest({"sim", "--executor", "loopback"}, leave, kChurn, &err, no_folder) == 2);
  CHECK(err.find("key 'churn'") != std::string::npos);
  CHECK(err.find("the loopback executor runs every node") != std::string::npos);
  CHECK_FALSE(folder);
  folder = true;
  CHECK(run_ravnest({"real"}, leave, kChurn, &err, no_folder) == 2);
  CHECK(err.find("the real executor runs every node") != std::string::npos);
  CHECK_FALSE(folder);
  // And an all-reduce that cannot re-form, with churn, is refused by every command.
  CHECK(run_ravnest({"sim"}, {"churn.leave_per_hour=1", "training.allreduce=single-ring"}, kChurn,
                    &err, no_folder) == 2);
  CHECK(err.find("churn needs \"multi-ring\"") != std::string::npos);
}
