// Checkpoints and resume (core/checkpoint/, sim/sim_checkpoint.h, real/real_checkpoints.h): the
// file format and its bad input, the scenario's refusals, a simulation stopped after a checkpoint
// and resumed giving byte-identical outputs (numeric and timing, one cluster and several), and a
// real run resumed whose loss goes on from where it stopped.
#include <ATen/ATen.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <utility>

#include "algo/registry.h"
#include "catch.h"
#include "cli_support.h"
#include "core/checkpoint/checkpoint.h"
#include "core/error.h"
#include "core/output/run_output.h"
#include "core/scenario/scenario.h"
#include "snippets.h"

using namespace rv;
namespace fs = std::filesystem;

namespace {

// Two clusters of two stages (nodes 0-1, 2-3) and an idle node (4), on slow PCs: averaging every
// 20 updates, a checkpoint every 40.
const std::string kTwoClusters = std::string(R"(name = "ckpt"
)") + test::kDigitsMlp + R"([training]
optimizer = "adam"
lr = 0.003
steps = 120
eval_every = 40
average_every = 20
[checkpoint]
every = 40
[planner]
method = "manual"
[[planner.cluster]]
nodes = [0, 1]
[[planner.cluster]]
nodes = [2, 3]
[[devices]]
count = 5
up_mbps = 20
down_mbps = 50
latency_ms = 10
tflops = 0.001
)";

fs::path workdir(const std::string& name) {
  static int count = 0;  // sections of one test case run in one process
  return test::fresh_dir("rv-ckpt", name + "-" + std::to_string(count++));
}

std::vector<std::string> with_sets(std::vector<std::string> args,
                                   const std::vector<std::string>& sets) {
  for (const auto& s : sets) args.insert(args.end(), {"--set", s});
  return args;
}

// Every output file of a run folder but run.json (and the checkpoints), by name.
std::map<std::string, std::string> outputs(const fs::path& run) {
  std::map<std::string, std::string> out;
  for (const auto& e : fs::directory_iterator(run))
    if (e.is_regular_file() && e.path().filename() != "run.json")
      out[e.path().filename().string()] = test::slurp(e.path());
  return out;
}

// Stops `sets` after checkpoint `stop`, resumes it, and checks the resumed run's outputs (and its
// last checkpoint) byte for byte against an uninterrupted run's.
void check_stop_and_resume(const std::string& toml, const std::vector<std::string>& sets, int stop,
                           const std::vector<int>& trainers) {
  const fs::path d = workdir("sim");
  std::ofstream(d / "s.toml") << toml;
  const test::Result whole = test::ravnest(
      with_sets({"sim", "s.toml", "--run-dir", "whole", "--progress", "off"}, sets), d);
  REQUIRE(whole.status == 0);
  const test::Result stopped =
      test::ravnest(with_sets({"sim", "s.toml", "--run-dir", "stopped", "--progress", "off",
                               "--stop-after-checkpoint", std::to_string(stop)},
                              sets),
                    d);
  INFO(stopped.err);
  REQUIRE(stopped.status == 1);
  CHECK(stopped.err.find("stopped after checkpoint " + std::to_string(stop)) != std::string::npos);
  const auto point = last_checkpoint((d / "stopped" / "checkpoints").string());
  REQUIRE(point);
  CHECK(point->done == 40 * stop);
  CHECK(point->nodes == trainers);  // an idle node keeps nothing
  // Stopped on request, not failed: the reason says where, for --resume.
  const nlohmann::json stopped_run = nlohmann::json::parse(test::slurp(d / "stopped" / "run.json"));
  CHECK(stopped_run.at("status") == "stopped");
  CHECK(stopped_run.at("reason").get<std::string>().find(
            "stopped after checkpoint " + std::to_string(stop)) != std::string::npos);
  CHECK_FALSE(stopped_run.contains("error"));

  const test::Result resumed =
      test::ravnest({"sim", "--resume", "stopped", "--run-dir", "resumed", "--progress", "off"}, d);
  INFO(resumed.err);
  REQUIRE(resumed.status == 0);
  const auto a = outputs(d / "whole"), b = outputs(d / "resumed");
  REQUIRE(a.size() == b.size());
  for (const auto& [name, text] : a) {
    INFO(name);
    REQUIRE(b.count(name) == 1);
    CHECK(b.at(name) == text);
  }
  // The checkpoint both wrote last (after 80 updates; the resumed run writes it if it resumed
  // from an earlier one) holds the same bytes.
  if (stop == 1) {
    for (const auto& e : fs::directory_iterator(d / "whole" / "checkpoints" / "round-80")) {
      INFO(e.path());
      CHECK(test::slurp(e.path()) ==
            test::slurp(d / "resumed" / "checkpoints" / "round-80" / e.path().filename()));
    }
  }
  const auto run = nlohmann::json::parse(test::slurp(d / "resumed" / "run.json"));
  CHECK(run.at("resumed_from").at("run") == "stopped");
  CHECK(run.at("resumed_from").at("updates") == 40 * stop);
  fs::remove_all(d);
}

}  // namespace

TEST_CASE("a node's state survives the file format and a damaged file is refused by name",
          "[checkpoint]") {
  NodeState s;
  s.node = 3;
  s.cluster = 1;
  s.stage = 0;
  s.done = 80;
  s.time = 12.5;
  s.version = 80;
  s.trained = 0;
  s.averagings = 4;
  s.peak_memory = 123456;
  s.stage_version = 80;
  s.optimizer_steps = 80;
  s.state = at::arange(0, 30, at::kFloat).reshape({3, 10}) / 7;
  Event e;
  e.kind = EventKind::kParams;
  e.node = 3;
  e.end = 1.25;
  e.values = {1.5f, -2.0f};
  s.events = {e, Event{}};
  const std::string bytes = encode_node_state(s);
  const NodeState back = decode_node_state(bytes, "n.state");
  CHECK(back.node == 3);
  CHECK(back.done == 80);
  CHECK(back.time == 12.5);
  CHECK(back.averagings == 4);
  CHECK(back.peak_memory == 123456);
  CHECK(at::equal(back.state, s.state));
  REQUIRE(back.events.size() == 2);
  CHECK(back.events[0].values == e.values);
  CHECK(back.events[0].end == 1.25);
  CHECK(back.events[1].kind == EventKind::kForward);

  NodeState timing = s;
  timing.state = at::Tensor();
  CHECK_FALSE(decode_node_state(encode_node_state(timing), "t.state").state.defined());

  auto refused = [&](const std::string& b) {
    try {
      decode_node_state(b, "bad.state");
    } catch (const InputError& err) {
      return std::string(err.what());
    }
    return std::string("accepted");
  };
  CHECK(refused(bytes.substr(0, bytes.size() - 3)).find("bad.state: malformed checkpoint") == 0);
  CHECK(refused("XXXXXXXX" + bytes.substr(8)).find("not a checkpoint file") != std::string::npos);
  CHECK(refused(bytes + "z").find("trailing bytes") != std::string::npos);
  // A tensor that claims more elements than the file holds (refused before any allocation).
  std::string big = bytes;
  const size_t dims_at = 8 + 3 * 4 + 8 * 8;  // magic, node/cluster/stage, eight 8-byte fields
  int64_t rows = int64_t{1} << 30;
  std::memcpy(big.data() + dims_at + 8, &rows, 8);
  CHECK(refused(big).find("malformed checkpoint") != std::string::npos);

  const LogState log{{e}, {Event{}, Event{}}};
  const LogState log_back = decode_log(encode_log(log), "events.state");
  CHECK(log_back.events.size() == 1);
  CHECK(log_back.totals.size() == 2);
  CHECK_THROWS_AS(decode_log(bytes, "events.state"), InputError);  // a node's file is not a log
}

TEST_CASE("the last complete checkpoint is found and incomplete ones are not", "[checkpoint]") {
  const fs::path d = workdir("dir");
  NodeState s;
  s.node = 0;
  s.done = 40;
  write_node_state(d.string(), s);
  CHECK_FALSE(last_checkpoint(d.string()));  // written, not complete
  complete_checkpoint(d.string(), CheckpointInfo{40, 3.5, {0}, ""});
  s.done = 80;
  write_node_state(d.string(), s);  // the next one, still incomplete
  auto c = last_checkpoint(d.string());
  REQUIRE(c);
  CHECK(c->done == 40);
  CHECK(c->time == 3.5);
  CHECK(read_node_state(node_state_file(c->folder, 0)).done == 40);
  complete_checkpoint(d.string(), CheckpointInfo{80, 7.0, {0}, ""});
  c = last_checkpoint(d.string());
  REQUIRE(c);
  CHECK(c->done == 80);
  CHECK_FALSE(fs::exists(d / "round-40"));  // completing one removes the others
  std::ofstream(d / "round-80" / "complete.json") << "{\"done\": ";
  CHECK_THROWS_AS(last_checkpoint(d.string()), InputError);
  fs::remove_all(d);
}

TEST_CASE("the scenario refuses checkpoints it cannot take", "[checkpoint]") {
  auto problem = [](const std::vector<std::string>& sets) {
    try {
      check_checkpoint_support(parse_scenario(kTwoClusters, "s.toml", sets));
    } catch (const ScenarioError& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  CHECK(problem({"checkpoint.every=30"}).find("not a multiple of training.average_every (20)") !=
        std::string::npos);
  CHECK(problem({"training.averaging=\"overlapped\""}).find("bulk-synchronous") !=
        std::string::npos);
  CHECK(problem({"churn.leave_per_hour=1"}).find("[churn]") != std::string::npos);
  CHECK(problem({"checkpoint.every=0", "churn.leave_per_hour=1"}) == "accepted");

  const fs::path d = workdir("refused");
  std::ofstream(d / "s.toml") << kTwoClusters;
  const test::Result gpipe =
      test::ravnest({"sim", "s.toml", "--set", "training.algorithm=\"gpipe\""}, d);
  CHECK(gpipe.status == 2);
  CHECK(gpipe.err.find("takes no checkpoints") != std::string::npos);
  const test::Result loop = test::ravnest({"sim", "s.toml", "--executor", "loopback"}, d);
  CHECK(loop.status == 2);
  CHECK(loop.err.find("the loopback executor takes none") != std::string::npos);
  fs::remove_all(d);
}

TEST_CASE("resuming refuses what it cannot continue with exit 2", "[checkpoint][cli]") {
  const fs::path d = workdir("resume-bad");
  std::ofstream(d / "s.toml") << kTwoClusters;
  fs::create_directories(d / "empty");
  auto run = [&](const std::vector<std::string>& args) { return test::ravnest(args, d); };
  const test::Result none = run({"sim", "--resume", "empty"});
  CHECK(none.status == 2);
  CHECK(none.err.find("not a run folder") != std::string::npos);
  const test::Result both = run({"sim", "s.toml", "--resume", "empty"});
  CHECK(both.status == 2);
  CHECK(both.err.find("give no scenario file") != std::string::npos);
  const test::Result neither = run({"sim"});
  CHECK(neither.status == 2);

  REQUIRE(run({"sim", "s.toml", "--run-dir", "a", "--progress", "off", "--set",
               "checkpoint.every=0", "--set", "training.steps=40"})
              .status == 0);
  const test::Result untaken = run({"sim", "--resume", "a"});
  CHECK(untaken.status == 2);
  CHECK(untaken.err.find("took no checkpoints") != std::string::npos);

  REQUIRE(
      run({"sim", "s.toml", "--run-dir", "b", "--progress", "off", "--stop-after-checkpoint", "1"})
          .status == 1);
  // A damaged state file: refused, naming it, before the folder it would write is made.
  const fs::path state = d / "b" / "checkpoints" / "round-40" / "node-2.state";
  const std::string bytes = test::slurp(state);
  std::ofstream(state, std::ios::binary | std::ios::trunc) << bytes.substr(0, bytes.size() / 2);
  const test::Result damaged = run({"sim", "--resume", "b", "--run-dir", "c"});
  CHECK(damaged.status == 2);
  CHECK(damaged.err.find("node-2.state: malformed checkpoint") != std::string::npos);
  CHECK_FALSE(fs::exists(d / "c"));
  fs::remove_all(d);
}

TEST_CASE("a simulation stopped after a checkpoint and resumed gives byte-identical outputs",
          "[checkpoint][sim]") {
  SECTION("numeric, two clusters") { check_stop_and_resume(kTwoClusters, {}, 1, {0, 1, 2, 3}); }
  SECTION("numeric, one cluster of three stages (its pipeline drains at the checkpoint)") {
    std::string one = kTwoClusters;
    const std::string clusters =
        "[[planner.cluster]]\nnodes = [0, 1]\n[[planner.cluster]]\nnodes = [2, 3]\n";
    one.replace(one.find(clusters), clusters.size(), "[[planner.cluster]]\nnodes = [1, 2, 3]\n");
    check_stop_and_resume(one, {}, 2, {1, 2, 3});
  }
  SECTION("timing mode, two clusters, summary metrics") {
    check_stop_and_resume(kTwoClusters, {"sim.mode=\"timing\"", "output.metrics=\"summary\""}, 2,
                          {0, 1, 2, 3});
  }
}

TEST_CASE("a real run stopped after a checkpoint resumes where it stopped", "[checkpoint][real]") {
  const fs::path d = workdir("real");
  std::ofstream(d / "s.toml") << kTwoClusters;
  const std::vector<std::string> sets = {"real.emulate_network=false"};
  const test::Result stopped =
      test::ravnest(with_sets({"real", "s.toml", "--run-dir", "stopped", "--progress", "off",
                               "--stop-after-checkpoint", "1"},
                              sets),
                    d);
  INFO(stopped.err);
  REQUIRE(stopped.status == 1);
  const auto point = last_checkpoint((d / "stopped" / "checkpoints").string());
  REQUIRE(point);
  CHECK(point->done == 40);
  // Rank 0 marked its folder stopped, and the launcher left that as it was.
  CHECK(nlohmann::json::parse(test::slurp(d / "stopped" / "run.json")).at("status") == "stopped");
  const test::Result resumed = test::ravnest(
      {"real", "--resume", "stopped", "--run-dir", "resumed", "--progress", "off"}, d);
  INFO(resumed.err);
  REQUIRE(resumed.status == 0);
  const std::vector<Event> events = read_events_csv((d / "resumed" / "metrics.csv").string());
  // Every update exactly once per training node: none before the checkpoint was done again.
  std::map<int, std::set<int64_t>> steps;
  int64_t updates = 0;
  for (const Event& e : events)
    if (e.kind == EventKind::kUpdate) {
      ++updates;
      CHECK(steps[e.node].insert(e.step).second);
    }
  CHECK(updates == 4 * 120);
  // The loss goes on from where it stopped: the losses after the checkpoint start near those
  // before it, well below the run's first ones.
  std::vector<std::pair<double, double>> losses;
  for (const Event& e : events)
    if (e.kind == EventKind::kLoss) losses.emplace_back(e.end, e.loss);
  std::sort(losses.begin(), losses.end());
  REQUIRE(losses.size() == 2 * 120);
  auto mean = [&](size_t from, size_t n) {
    double s = 0;
    for (size_t i = from; i < from + n; ++i) s += losses[i].second;
    return s / static_cast<double>(n);
  };
  const double first = mean(0, 10);
  size_t after = 0;
  while (after < losses.size() && losses[after].first <= point->time) ++after;
  REQUIRE(after + 10 <= losses.size());
  CHECK(after == 2 * 40);  // the prefix: both clusters' first 40 losses, all before the checkpoint
  CHECK(mean(after, 10) < first - 0.5);
  const auto run = nlohmann::json::parse(test::slurp(d / "resumed" / "run.json"));
  CHECK(run.at("status") == "complete");
  CHECK(run.at("resumed_from").at("updates") == 40);
  fs::remove_all(d);
}
