// Integration tests of the `ravnest` executable: exit statuses and messages for bad input (and no
// run folder left behind), byte-identical simulations, the real executor against the simulator,
// and a dead peer stopping a real run with a clear error.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <sstream>
#include <thread>

#include "catch.h"
#include "cli_support.h"
#include "snippets.h"

namespace fs = std::filesystem;
using namespace rv::test;

namespace {

// The child processes of `pid` (Linux: /proc/<pid>/task/<pid>/children).
std::vector<pid_t> children_of(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/task/" + std::to_string(pid) + "/children");
  std::vector<pid_t> out;
  for (pid_t c; in >> c;) out.push_back(c);
  return out;
}

// Waits (up to 60 s) until `pid` has `n` children that have run for `settle_ms` more.
std::vector<pid_t> wait_for_children(pid_t pid, size_t n, int settle_ms) {
  for (int i = 0; i < 3000; ++i) {
    if (children_of(pid).size() >= n) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(settle_ms));
  return children_of(pid);
}

// A fresh, empty working folder per test.
fs::path workdir(const std::string& name) { return rv::test::fresh_dir("rv-cli", name); }

void write(const fs::path& p, const std::string& text) { std::ofstream(p) << text; }

const char* const kSmall = rv::test::kSmallDigitsCnn;

// The values of the `kind` rows of a run folder's metrics.csv ("loss", "eval"), by node, step and
// micro-batch: what the maths produced, whatever the timing. Real runs carry events to rank 0 in
// this text, so both executors are compared in the same format.
std::map<std::string, std::string> values_of(const fs::path& run, const std::string& kind) {
  std::map<std::string, std::string> out;
  std::stringstream lines(slurp(run / "metrics.csv"));
  for (std::string line; std::getline(lines, line);) {
    std::vector<std::string> f;
    std::stringstream ss(line);
    for (std::string c; std::getline(ss, c, ',');) f.push_back(c);
    if (f.size() < 10 || f[0] != kind) continue;
    out[f[1] + "," + f[4] + "," + f[5]] =
        f[8] + "," + f[9];  // node,step,micro_batch -> loss,accuracy
  }
  return out;
}

bool has_run_folder(const fs::path& dir) {
  if (!fs::exists(dir / "runs")) return false;
  for (auto& e : fs::recursive_directory_iterator(dir / "runs"))
    if (e.is_regular_file()) return true;
  return false;
}

}  // namespace

TEST_CASE("bad input exits 2 with a message that says where, and writes no run folder", "[cli]") {
  fs::path d = workdir("bad");
  struct Case {
    std::string name, text;
    std::vector<std::string> extra;
    std::string expect;
  };
  std::vector<Case> cases = {
      {"unknown key",
       std::string(kSmall) + "[sim]\nmodes = \"timing\"\n",
       {},
       "key 'sim.modes': unknown key"},
      {"wrong type",
       "name = \"x\"\n[training]\nlr = \"fast\"\n[[devices]]\ncount = 2\n",
       {},
       "bad.toml:3: key 'training.lr': expected a number"},
      {"out of range",
       "name = \"x\"\n[[devices]]\ncount = 2\nram_gb = -1\n",
       {},
       "bad.toml:4: key 'devices[0].ram_gb'"},
      {"unknown dataset",
       "name = \"x\"\n[data]\nkind = \"cifar\"\n[[devices]]\ncount = 2\n",
       {},
       "key 'data.kind': unknown value 'cifar'"},
      {"missing dataset file",
       std::string(kSmall),
       {"--set", "data.path=/nonexistent/digits.csv.gz"},
       "/nonexistent/digits.csv.gz"},
      {"does not fit",
       "name = \"x\"\n[model]\nhead = \"linear\"\nhidden = [4096, 4096]\n[[devices]]\ncount = "
       "2\nram_gb = 0.01\n",
       {},
       "does not fit the cluster's RAM"},
      {"bad override", std::string(kSmall), {"--set", "training.steps=0"}, "key 'training.steps'"},
  };
  for (const auto& c : cases) {
    for (const char* cmd : {"sim", "real", "plan"}) {
      INFO(c.name << " with `ravnest " << cmd << "`");
      write(d / "bad.toml", c.text);
      std::vector<std::string> args = {cmd, "bad.toml"};
      args.insert(args.end(), c.extra.begin(), c.extra.end());
      Result r = ravnest(args, d);
      if (std::string(cmd) == "plan" && c.name == "missing dataset file") {
        CHECK(r.status == 0);  // planning does not read the data
        continue;
      }
      CHECK(r.status == 2);
      CHECK(r.err.find(c.expect) != std::string::npos);
      CHECK(r.err.find("error") != std::string::npos);
      CHECK_FALSE(has_run_folder(d));
    }
  }
  // c10d's own all-reduce exists only in the real executor.
  write(d / "bad.toml", kSmall);
  for (const char* executor : {"sim", "loopback"}) {
    INFO("allreduce = gloo with --executor " << executor);
    Result g =
        ravnest({"sim", "bad.toml", "--executor", executor, "--set", "training.allreduce=gloo"}, d);
    CHECK(g.status == 2);
    CHECK(g.err.find("key 'training.allreduce'") != std::string::npos);
    CHECK(g.err.find("only the real executor") != std::string::npos);
    CHECK_FALSE(has_run_folder(d));
  }
  // SimGrid's own options and platform files: refused before any folder, saying which.
  fs::copy_file(fs::path(RV_SOURCE_DIR) / "tests/data/lab_platform.xml", d / "lab.xml",
                fs::copy_options::overwrite_existing);
  const std::string lab =
      "name = \"lab\"\n[model]\nhead = \"linear\"\n[network]\nplatform = "
      "\"lab.xml\"\n[[devices]]\nname = \"a\"\n"
      "[[devices]]\nname = \"b\"\ncount = 3\n";
  write(d / "lab.toml", lab);
  const struct {
    std::vector<std::string> args;
    std::string expect;
  } engine_cases[] = {
      {{"sim", "bad.toml", "--cfg=network/TCP-gamma:x"},
       "SimGrid refused --cfg=network/TCP-gamma:x"},
      {{"sim", "bad.toml", "--cfg=contexts/factory:none-such"}, "valid factory"},
      {{"sim", "bad.toml", "--cfg=network/model:CM02"}, "network.model"},
      {{"sim", "bad.toml", "--log=root.thresh:loud"}, "--log=root.thresh:loud"},
      {{"sim", "bad.toml", "--executor", "loopback", "--cfg=network/TCP-gamma:1"},
       "only for --executor sim"},
      {{"sim", "lab.toml"}, "no host named \"b-2\""},
      {{"sim", "lab.toml", "--executor", "loopback"}, "network.platform"},
      {{"real", "lab.toml"},
       "key 'network.platform': a SimGrid platform file is for the simulator"},
  };
  for (const auto& c : engine_cases) {
    INFO(c.args[0] << " " << c.args[1] << " " << c.args.back());
    Result e = ravnest(c.args, d);
    CHECK(e.status == 2);
    CHECK(e.err.find(c.expect) != std::string::npos);
    CHECK_FALSE(has_run_folder(d));
  }
  // Faults aimed at a node the plan leaves idle would never act.
  write(d / "idle.toml",
        "name = \"idle\"\n[model]\nhead = \"linear\"\n[planner]\nmethod = \"manual\"\n"
        "[[planner.cluster]]\nnodes = [0, 1]\n[faults]\nnode = 2\ncrash_after_sends = 3\n"
        "[[devices]]\ncount = 3\n");
  for (const char* cmd : {"sim", "real"}) {
    INFO("faults on an idle node with `ravnest " << cmd << "`");
    Result f = ravnest({cmd, "idle.toml"}, d);
    CHECK(f.status == 2);
    CHECK(f.err.find("key 'faults.node': node 2 has no stage in the plan") != std::string::npos);
    CHECK_FALSE(has_run_folder(d));
  }
  Result r = ravnest({"sim", "missing.toml"}, d);
  CHECK(r.status == 2);
  CHECK(r.err.find("missing.toml: cannot open") != std::string::npos);
  r = ravnest({"sim"}, d);
  CHECK(r.status == 2);
  r = ravnest({"frobnicate"}, d);
  CHECK(r.status == 2);
  fs::remove_all(d);
}

TEST_CASE("the same scenario and seed give byte-identical simulation outputs", "[cli][sim]") {
  fs::path d = workdir("determinism");
  write(d / "s.toml", kSmall);
  for (const char* mode : {"numeric", "timing"}) {
    INFO(mode);
    Result a = ravnest({"sim", "s.toml", "--set", std::string("sim.mode=") + mode, "--run-dir",
                        std::string("a-") + mode},
                       d);
    Result b = ravnest({"sim", "s.toml", "--set", std::string("sim.mode=") + mode, "--run-dir",
                        std::string("b-") + mode},
                       d);
    REQUIRE(a.status == 0);
    REQUIRE(b.status == 0);
    for (const char* f :
         {"scenario.toml", "plan.json", "metrics.csv", "eval.csv", "summary.json", "trace.json"}) {
      INFO(f);
      std::string x = slurp(d / (std::string("a-") + mode) / f),
                  y = slurp(d / (std::string("b-") + mode) / f);
      CHECK(!x.empty());
      CHECK(x == y);
    }
  }
  fs::remove_all(d);
}

// Rows of a CSV file as maps from its header's names to the cells.
std::vector<std::map<std::string, std::string>> csv_rows(const fs::path& file) {
  std::stringstream lines(slurp(file));
  std::vector<std::string> header;
  std::vector<std::map<std::string, std::string>> rows;
  for (std::string line; std::getline(lines, line);) {
    std::vector<std::string> f;
    std::stringstream ss(line);
    for (std::string c; std::getline(ss, c, ',');) f.push_back(c);
    if (header.empty()) {
      header = f;
      continue;
    }
    std::map<std::string, std::string> row;
    for (size_t i = 0; i < header.size() && i < f.size(); ++i) row[header[i]] = f[i];
    rows.push_back(row);
  }
  return rows;
}

TEST_CASE(
    "output.metrics = summary writes per-node totals equal to the events', and trace_nodes keeps "
    "whole clusters",
    "[cli][sim]") {
  fs::path d = workdir("summary_metrics");
  write(d / "s.toml", R"(name = "pool"
seed = 3
[model]
head = "linear"
kind = "mlp"
hidden = [256, 256, 256]
[data]
kind = "synthetic"
batch_size = 16
[training]
steps = 40
average_every = 10
eval_every = 0
[planner]
method = "greedy"
clusters = 3
[sim]
mode = "timing"
[[devices]]
name = "laptop"
count = 6
tflops = 0.05
ram_gb = 0.0018
up_mbps = 20
down_mbps = 100
latency_ms = 20
)");
  Result ev = ravnest({"sim", "s.toml", "--run-dir", "events"}, d);
  REQUIRE(ev.status == 0);
  Result su = ravnest({"sim", "s.toml", "--run-dir", "summary", "--set", "output.metrics=summary",
                       "--set", "output.trace_nodes=3"},
                      d);
  REQUIRE(su.status == 0);
  CHECK(fs::exists(d / "events" / "metrics.csv"));
  CHECK(!fs::exists(d / "events" / "node_metrics.csv"));
  CHECK(fs::exists(d / "summary" / "node_metrics.csv"));
  CHECK(!fs::exists(d / "summary" / "metrics.csv"));

  // The plan has several clusters of several stages, or the folding and the sampling test nothing.
  const auto plan = nlohmann::json::parse(slurp(d / "events" / "plan.json"));
  REQUIRE(plan["clusters"].size() >= 3);
  std::map<int, int> cluster_of;
  for (size_t c = 0; c < plan["clusters"].size(); ++c)
    for (const auto& st : plan["clusters"][c]["stages"])
      cluster_of[st["node"].get<int>()] = static_cast<int>(c);
  REQUIRE(cluster_of.size() >= 6);

  // Totals from every event of the events run against node_metrics.csv of the summary run (whose
  // untraced nodes kept their messages and waits as one total each).
  struct Totals {
    int64_t sends = 0, recvs = 0, forwards = 0, waits = 0;
    int64_t sent = 0;
    double wait_s = 0;
  };
  std::map<int, Totals> want;
  for (const auto& r : csv_rows(d / "events" / "metrics.csv")) {
    Totals& t = want[std::stoi(r.at("node"))];
    const std::string& k = r.at("kind");
    if (k == "send") {
      ++t.sends;
      t.sent += std::stoll(r.at("bytes"));
    }
    if (k == "recv") ++t.recvs;
    if (k == "forward") ++t.forwards;
    if (k == "wait") {
      ++t.waits;
      t.wait_s += std::stod(r.at("end_s")) - std::stod(r.at("start_s"));
    }
  }
  int rows = 0;
  for (const auto& r : csv_rows(d / "summary" / "node_metrics.csv")) {
    const int node = std::stoi(r.at("node"));
    INFO("node " << node);
    const Totals& t = want[node];
    CHECK(std::stoll(r.at("send_n")) == t.sends);
    CHECK(std::stoll(r.at("send_bytes")) == t.sent);
    CHECK(std::stoll(r.at("recv_n")) == t.recvs);
    CHECK(std::stoll(r.at("forward_n")) == t.forwards);
    CHECK(std::stoll(r.at("wait_n")) == t.waits);
    CHECK(std::fabs(std::stod(r.at("wait_s")) - t.wait_s) <= 1e-6 * (1 + t.waits));
    ++rows;
  }
  CHECK(rows == plan["nodes"].get<int>());
  CHECK(want[plan["clusters"][0]["stages"][0]["node"].get<int>()].sends > 0);

  // summary.json does not depend on what the run kept.
  auto summary = [&](const char* run) {
    auto j = nlohmann::json::parse(slurp(d / run / "summary.json"));
    j.erase("wall_seconds");
    return j.dump();
  };
  CHECK(summary("events") == summary("summary"));

  // trace.json: every node in the events run; in the summary run, whole clusters of at most 3
  // nodes.
  auto traced = [&](const char* run) {
    std::set<int> nodes;
    const auto trace = nlohmann::json::parse(slurp(d / run / "trace.json"));
    for (const auto& e : trace["traceEvents"])
      if (e["ph"] == "X") nodes.insert(e["tid"].get<int>());
    return nodes;
  };
  CHECK(traced("events").size() == cluster_of.size());
  const std::set<int> sampled = traced("summary");
  REQUIRE(!sampled.empty());
  CHECK(sampled.size() <= 3);
  for (const auto& [node, cluster] : cluster_of) {  // a node is shown exactly when its cluster is
    bool cluster_shown = false;
    for (int n : sampled) cluster_shown |= cluster_of.at(n) == cluster;
    INFO("node " << node << " cluster " << cluster);
    CHECK(cluster_shown == (sampled.count(node) == 1));
  }
  fs::remove_all(d);
}

TEST_CASE(
    "real processes, the simulator and the loopback agree on the plan and reach comparable loss",
    "[cli][real][conformance]") {
  fs::path d = workdir("real");
  write(d / "s.toml", kSmall);
  Result real = ravnest({"real", "s.toml", "--run-dir", "real"}, d);
  INFO(real.err);
  REQUIRE(real.status == 0);
  // Before training it said how this host computes against each working node's device
  // (exec/dilation.h host_check_text).
  INFO(real.out);
  CHECK(real.out.find("this host against the scenario's devices") != std::string::npos);
  CHECK(real.out.find(" ms modeled: ") != std::string::npos);
  Result sim = ravnest({"sim", "s.toml", "--run-dir", "sim"}, d);
  REQUIRE(sim.status == 0);
  Result loop = ravnest({"sim", "s.toml", "--executor", "loopback", "--run-dir", "loop"}, d);
  REQUIRE(loop.status == 0);
  auto json = [&](const std::string& run, const char* f) {
    return nlohmann::json::parse(slurp(d / run / f));
  };
  CHECK(json("real", "plan.json") == json("sim", "plan.json"));
  CHECK(json("loop", "plan.json") == json("sim", "plan.json"));
  for (const char* f : {"scenario.toml", "metrics.csv", "eval.csv", "summary.json", "trace.json"}) {
    CHECK(fs::file_size(d / "real" / f) > 0);
  }
  auto rs = json("real", "summary.json"), ss = json("sim", "summary.json");
  CHECK(rs["executor"] == "real");
  CHECK(rs["train_samples"] == ss["train_samples"]);
  const double ar = rs["final"]["test_accuracy"].get<double>(),
               as = ss["final"]["test_accuracy"].get<double>();
  INFO("real accuracy " << ar << ", sim accuracy " << as);
  CHECK(ar > 0.85);
  CHECK(std::abs(ar - as) <= 0.05);
  // Every real node measured its own peak memory.
  for (const auto& n : rs["per_node"]) CHECK(n["measured_peak_memory_bytes"].get<int64_t>() > 0);
  // Every real compute span carries its thread's CPU time, within the span; the simulator's none.
  // Every update of both (numeric) carries the squared norm of the gradient it applied.
  auto cpu_of_spans = [&](const std::string& run, int* with, int* spans) {
    std::istringstream rows(slurp(d / run / "metrics.csv"));
    std::string row;
    std::getline(rows, row);
    REQUIRE(row.size() > 26);
    CHECK(row.substr(row.size() - 26) == ",cpu_s,grad_norm2,device_s");
    while (std::getline(rows, row)) {
      std::vector<std::string> f;
      std::stringstream ss(row);
      for (std::string c; std::getline(ss, c, ',');) f.push_back(c);
      if (!row.empty() && row.back() == ',') f.push_back("");
      REQUIRE(f.size() == 17);
      CHECK(f[16].empty());    // device_s: no span of a CPU run has a GPU's kernel time
      if (f[0] == "update") {  // stage 1 holds no parameters (ReLU, pooling): its norm is 0
        REQUIRE_FALSE(f[15].empty());
        CHECK(std::stod(f[15]) >= 0);
        if (f[3] != "1") CHECK(std::stod(f[15]) > 0);
      }
      if (f[0] != "forward" && f[0] != "backward" && f[0] != "update") continue;
      ++*spans;
      if (f[14].empty()) continue;
      ++*with;
      const double cpu = std::stod(f[14]), wall = std::stod(f[7]) - std::stod(f[6]);
      CHECK(cpu >= 0);
      CHECK(cpu <= wall + 1e-3);  // one thread: no more CPU than wall time (clock ticks aside)
    }
  };
  int real_with = 0, real_spans = 0, sim_with = 0, sim_spans = 0;
  cpu_of_spans("real", &real_with, &real_spans);
  cpu_of_spans("sim", &sim_with, &sim_spans);
  CHECK(real_spans > 0);
  CHECK(real_with == real_spans);
  CHECK(sim_spans > 0);
  CHECK(sim_with == 0);
  // The plan says why, and the run folder keeps it.
  CHECK(!json("real", "plan.json")["reason"].get<std::string>().empty());
  fs::remove_all(d);
}

TEST_CASE(
    "a write to a pipe or connection whose reader is gone fails, it does not kill ravnest "
    "(SIGPIPE)",
    "[cli][faults]") {
  fs::path d = workdir("sigpipe");
  write(d / "s.toml", kSmall);
  int fds[2];
  REQUIRE(::pipe(fds) == 0);
  const pid_t pid = fork();
  if (pid == 0) {
    ::signal(SIGPIPE, SIG_DFL);  // as a shell starts it, whatever this test process inherited
    ::close(fds[0]);             // nobody will read what it writes
    ::dup2(fds[1], STDOUT_FILENO);
    FILE* e = freopen("/dev/null", "w", stderr);
    (void)e;
    if (chdir(d.c_str()) != 0) _exit(126);
    const std::string exe = std::string(RV_BINARY_DIR) + "/ravnest";
    execl(exe.c_str(), exe.c_str(), "plan", "s.toml", static_cast<char*>(nullptr));
    _exit(127);
  }
  ::close(fds[0]);
  ::close(fds[1]);
  int st = 0;
  REQUIRE(waitpid(pid, &st, 0) == pid);
  INFO((WIFSIGNALED(st) ? "killed by signal " + std::to_string(WTERMSIG(st))
                        : "exit " + std::to_string(WEXITSTATUS(st))));
  CHECK(WIFEXITED(st));
  CHECK(WEXITSTATUS(st) != 127);
}

TEST_CASE("a real node that dies makes the others stop with a clear error, not hang",
          "[cli][real][faults]") {
  fs::path d = workdir("crash");
  write(d / "s.toml", std::string(kSmall) + "[faults]\nnode = 1\ncrash_after_sends = 20\n");
  Result r = ravnest({"real", "s.toml", "--set", "real.timeout_s=10", "--run-dir", "run"}, d);
  INFO(r.err);
  CHECK(r.status == 1);
  CHECK(r.err.find("rank 1") != std::string::npos);
  // The run had started: its folder keeps the rows it had, marked failed with the reason.
  const nlohmann::json status = nlohmann::json::parse(slurp(d / "run" / "run.json"));
  CHECK(status["status"] == "failed");
  CHECK(status["error"].get<std::string>().find("rank 1") != std::string::npos);
  CHECK_FALSE(fs::exists(d / "run" / "summary.json"));
  fs::remove_all(d);
}

TEST_CASE(
    "a real run's folder fills as it runs, from every rank, and a killed writer leaves it failed",
    "[cli][real][live]") {
  fs::path d = workdir("live_real");
  write(d / "s.toml",
        std::string(kSmall) + "[[devices]]\ncount = 1\n");  // 4 nodes: the plan uses several
  const pid_t pid =
      start_ravnest({"real", "s.toml", "--set", "training.steps=100000", "--run-dir", "run"}, d);
  // Rows of at least two nodes in metrics.csv while run.json says running (60 s at most).
  std::set<std::string> nodes;
  for (int i = 0; i < 600 && nodes.size() < 2; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    std::stringstream lines(slurp(d / "run" / "metrics.csv"));
    std::string line;
    std::getline(lines, line);  // the header
    while (std::getline(lines, line)) {
      const size_t a = line.find(','), b = line.find(',', a + 1);
      if (a != std::string::npos && b != std::string::npos && line.rfind("measured_memory", 0) != 0)
        nodes.insert(line.substr(a + 1, b - a - 1));
    }
  }
  REQUIRE(nodes.size() >= 2);
  CHECK(nlohmann::json::parse(slurp(d / "run" / "run.json"))["status"] == "running");
  // Kill rank 0, which writes the folder; the launcher marks it failed and keeps the rows.
  pid_t rank0 = -1;
  for (pid_t c : children_of(pid)) {
    std::string cmd = slurp("/proc/" + std::to_string(c) + "/cmdline");
    std::replace(cmd.begin(), cmd.end(), '\0', ' ');
    if (cmd.find(" --rank 0 ") != std::string::npos) rank0 = c;
  }
  REQUIRE(rank0 > 0);
  kill(rank0, SIGKILL);
  Result r = finish_ravnest(pid, d);
  INFO(r.err);
  CHECK(r.status == 1);
  const nlohmann::json status = nlohmann::json::parse(slurp(d / "run" / "run.json"));
  CHECK(status["status"] == "failed");
  CHECK(status["error"].get<std::string>().find("rank 0") != std::string::npos);
  // Whole rows only: every line has the header's number of fields.
  std::stringstream lines(slurp(d / "run" / "metrics.csv"));
  std::string header, line;
  std::getline(lines, header);
  const auto fields = std::count(header.begin(), header.end(), ',');
  int rows = 0;
  while (std::getline(lines, line)) {
    CHECK(std::count(line.begin(), line.end(), ',') == fields);
    ++rows;
  }
  CHECK(rows > 10);
  fs::remove_all(d);
}

TEST_CASE("sweep runs every combination, and checks every value before running any", "[cli]") {
  fs::path d = workdir("sweep");
  write(d / "s.toml", kSmall);
  Result r =
      ravnest({"sweep", "s.toml", "--set", "sim.mode=timing", "--set", "training.steps=20,40",
               "--set", "training.max_in_flight=1,3", "--out", "grid"},
              d);
  INFO(r.out << r.err);
  CHECK(r.status == 0);
  int folders = 0;
  for (auto& e : fs::directory_iterator(d / "grid"))
    folders += fs::exists(e.path() / "summary.json");
  CHECK(folders == 4);
  Result bad = ravnest({"sweep", "s.toml", "--set", "training.steps=20,-3", "--out", "bad"}, d);
  CHECK(bad.status == 2);
  CHECK(bad.err.find("training.steps") != std::string::npos);
  CHECK_FALSE(fs::exists(d / "bad"));
  fs::remove_all(d);
}

TEST_CASE("report: every option is the script's, and the script is found beside the binary",
          "[cli][report]") {
  const fs::path d = workdir("report_where");
  // The script's own help, through the command.
  Result help = ravnest({"report", "--help"}, d);
  CHECK(help.status == 0);
  CHECK(help.out.find("--out") != std::string::npos);
  CHECK(help.out.find("--title") != std::string::npos);
  // A bad option is the script's to refuse (exit 2, argparse's message).
  Result bad = ravnest({"report", "nowhere", "--no-such-option"}, d);
  CHECK(bad.status == 2);
  CHECK(bad.err.find("--no-such-option") != std::string::npos);
  // An installed tree (cmake --install's layout): bin/ravnest finds share/ravnest/report.py.
  fs::create_directories(d / "prefix" / "bin");
  fs::create_directories(d / "prefix" / "share" / "ravnest");
  fs::copy_file(fs::path(RV_BINARY_DIR) / "ravnest", d / "prefix" / "bin" / "ravnest");
  fs::copy_file(fs::path(RV_SOURCE_DIR) / "analysis" / "report.py",
                d / "prefix" / "share" / "ravnest" / "report.py");
  Result installed = finish_ravnest(
      start_ravnest({"report", "--help"}, d, {}, (d / "prefix" / "bin" / "ravnest").string()), d);
  CHECK(installed.status == 0);
  CHECK(installed.out.find("--title") != std::string::npos);
  // Without the script beside it: a clear error naming where it looked, not a compiled-in path.
  fs::remove(d / "prefix" / "share" / "ravnest" / "report.py");
  Result missing = finish_ravnest(
      start_ravnest({"report", "--help"}, d, {}, (d / "prefix" / "bin" / "ravnest").string()), d);
  CHECK(missing.status == 1);
  CHECK(missing.err.find("share/ravnest/report.py") != std::string::npos);
  CHECK(missing.err.find(RV_SOURCE_DIR) == std::string::npos);
  fs::remove_all(d);
}

TEST_CASE("sweep records a point the planner refuses, and the report shows why", "[cli][report]") {
  fs::path d = workdir("refused");
  write(d / "s.toml", kSmall);
  // 0.3 MiB per node: a three-stage pipeline fits, the whole model (0.38 MiB) does not.
  Result r = ravnest({"sweep", "s.toml", "--set", "sim.mode=timing", "--set", "training.steps=20",
                      "--set", "devices.0.ram_gb=0.0003", "--set", "training.max_in_flight=1",
                      "--set", "training.algorithm=ravnest,sync-dp", "--out", "grid"},
                     d);
  INFO(r.out << r.err);
  REQUIRE(r.status == 0);
  fs::path ok, no;  // the folders of the two points (every --set is an axis of the name)
  for (auto& e : fs::directory_iterator(d / "grid")) {
    if (e.path().string().find("algorithm-ravnest") != std::string::npos) ok = e.path();
    if (e.path().string().find("algorithm-sync-dp") != std::string::npos) no = e.path();
  }
  CHECK(fs::exists(ok / "summary.json"));
  REQUIRE(fs::exists(no / "refused.json"));
  CHECK_FALSE(fs::exists(no / "metrics.csv"));
  auto j = nlohmann::json::parse(slurp(no / "refused.json"));
  CHECK(j["algorithm"] == "sync-dp");
  CHECK(j["reason"].get<std::string>().find("sync-dp needs every node to hold the whole model") !=
        std::string::npos);
  CHECK(r.out.find("refused") != std::string::npos);
  Result rep = ravnest({"report", ok.string(), no.string(), "--out", (d / "rep").string()}, d);
  INFO(rep.err);
  REQUIRE(rep.status == 0);
  const std::string md = slurp(d / "rep" / "report.md");
  CHECK(md.find("Refused by the planner") != std::string::npos);
  CHECK(md.find("sync-dp needs every node to hold the whole model") != std::string::npos);
  fs::remove_all(d);
}

namespace {

// eval.csv's test losses, the distinct values at each step (clusters that hold one model: one).
std::map<std::string, std::set<std::string>> eval_losses_by_step(const fs::path& csv) {
  std::ifstream in(csv);
  std::string line;
  std::getline(in, line);
  std::map<std::string, std::set<std::string>> loss_by_step;
  while (std::getline(in, line)) {
    std::vector<std::string> f;
    std::stringstream ss(line);
    for (std::string c; std::getline(ss, c, ',');) f.push_back(c);
    REQUIRE(f.size() == 7);
    loss_by_step[f[3]].insert(f[5]);
  }
  return loss_by_step;
}

}  // namespace

TEST_CASE(
    "real processes in several clusters average to one model, by our rings or by c10d allreduce",
    "[cli][real][rings]") {
  const std::string allreduce = GENERATE("multi-ring", "single-ring", "gloo");
  INFO("allreduce " << allreduce);
  fs::path d = workdir("clusters");
  write(d / "s.toml", std::string(kSmall) + rv::test::kTwoClusters);
  // Our rings run through the network emulator (on by default); c10d's all-reduce runs outside it.
  Result real =
      ravnest({"real", "s.toml", "--set", "training.average_every=50", "--set",
               "training.allreduce=" + allreduce, "--set",
               std::string("real.emulate_network=") + (allreduce == "gloo" ? "false" : "true"),
               "--run-dir", "real"},
              d);
  INFO(real.err);
  REQUIRE(real.status == 0);
  // eval.csv: after each averaging both clusters score exactly the same model.
  const auto loss_by_step = eval_losses_by_step(d / "real" / "eval.csv");
  REQUIRE(loss_by_step.size() == 2);  // steps 100 and 200
  for (const auto& [step, losses] : loss_by_step) {
    INFO("step " << step);
    CHECK(losses.size() == 1);
  }
  auto s = nlohmann::json::parse(slurp(d / "real" / "summary.json"));
  CHECK(s["clusters"] == 2);
  CHECK(s["final"]["test_accuracy"].get<double>() > 0.85);
  CHECK(s["averaging"]["allreduce"] == allreduce);
  CHECK(s["averaging"]["rounds"] == 4);  // 200 updates, every 50
  CHECK(s["averaging"]["time_s_max_node"].get<double>() > 0);
  for (const auto& n : s["per_node"]) {
    CHECK(n["averagings"] == 4);
    CHECK(n["bytes_sent"].get<int64_t>() > 0);
  }
  fs::remove_all(d);
}

TEST_CASE(
    "diloco, local-sgd and pipedream as real processes: after every exchange both clusters hold "
    "one model",
    "[cli][real][diloco][pipedream]") {
  const std::string algorithm = GENERATE("diloco", "local-sgd", "pipedream");
  INFO(algorithm);
  fs::path d = workdir("outer");
  write(d / "s.toml", std::string(kSmall) + rv::test::kTwoClusters);
  Result real = ravnest(
      {"real", "s.toml", "--set", "training.algorithm=\"" + algorithm + "\"", "--set",
       "training.optimizer=\"adamw\"", "--set", "training.average_every=50", "--run-dir", "real"},
      d);
  INFO(real.err);
  REQUIRE(real.status == 0);
  // eval.csv: both clusters score the same model after each exchange (steps 100 and 200).
  const auto loss_by_step = eval_losses_by_step(d / "real" / "eval.csv");
  REQUIRE(loss_by_step.size() == 2);
  for (const auto& [step, losses] : loss_by_step) {
    INFO("step " << step);
    CHECK(losses.size() == 1);
  }
  auto s = nlohmann::json::parse(slurp(d / "real" / "summary.json"));
  CHECK(s["algorithm"] == algorithm);
  CHECK(s["averaging"]["rounds"] == 4);
  CHECK(s["final"]["test_accuracy"].get<double>() > 0.85);
  fs::remove_all(d);
}

// Synchronous algorithms: no timing enters the maths, so a real run and a loopback run that reduce
// in the same order give the same model bit for bit. Our rings reduce in ring order in both
// executors. c10d's all-reduce (the loopback has none: it runs our multi-ring) reduces in its own
// order; with two clusters every sum has two terms, and a + b == b + a exactly, so that case is
// exact too. (tests/test_gloo_transport.cc holds c10d's sums over more ranks to the error bound of
// any summation order.)
TEST_CASE("sync-dp and gpipe across clusters: real processes equal the loopback run",
          "[cli][real][rings]") {
  struct Case {
    std::string algorithm, allreduce;
    int nodes;
  };
  const Case c = GENERATE(Case{"sync-dp", "multi-ring", 3}, Case{"sync-dp", "gloo", 2},
                          Case{"gpipe", "single-ring", 3});
  INFO(c.algorithm << " with " << c.allreduce << " on " << c.nodes << " nodes");
  fs::path d = workdir("synchronous");
  write(d / "s.toml", std::string(kSmall) + (c.algorithm == "gpipe" ? rv::test::kTwoClusters : ""));
  const std::vector<std::string> set = {"--set", "training.algorithm=" + c.algorithm,
                                        "--set", "training.steps=30",
                                        "--set", "training.eval_every=0",
                                        "--set", "devices.0.count=" + std::to_string(c.nodes)};
  auto args = [&](std::vector<std::string> a, const std::string& allreduce,
                  const std::string& dir) {
    a.insert(a.end(), set.begin(), set.end());
    a.insert(a.end(), {"--set", "training.allreduce=" + allreduce, "--run-dir", dir});
    if (allreduce == "gloo") a.insert(a.end(), {"--set", "real.emulate_network=false"});
    return a;
  };
  Result real = ravnest(args({"real", "s.toml"}, c.allreduce, "real"), d);
  INFO(real.err);
  REQUIRE(real.status == 0);
  const std::string ours = c.allreduce == "gloo" ? "multi-ring" : c.allreduce;
  Result loop = ravnest(args({"sim", "s.toml", "--executor", "loopback"}, ours, "loop"), d);
  INFO(loop.err);
  REQUIRE(loop.status == 0);
  auto a = nlohmann::json::parse(slurp(d / "real" / "summary.json"));
  CHECK(a["clusters"].get<int>() == (c.algorithm == "gpipe" ? 2 : c.nodes));
  CHECK(a["averaging"]["rounds"] == 30);
  // Every training loss of every node and step, and the final evaluation, are the same values.
  const auto losses = values_of(d / "real", "loss"), evals = values_of(d / "real", "eval");
  CHECK(losses.size() == static_cast<size_t>(30 * (c.algorithm == "gpipe" ? 2 * 4 : c.nodes)));
  CHECK(losses == values_of(d / "loop", "loss"));
  CHECK(!evals.empty());
  CHECK(evals == values_of(d / "loop", "eval"));
  fs::remove_all(d);
}

TEST_CASE("the network emulator refuses what it cannot honour, before any process starts",
          "[cli][real][emu]") {
  fs::path d = workdir("emulate");
  write(d / "s.toml", std::string(kSmall) + rv::test::kTwoClusters);
  struct Case {
    std::vector<std::string> args;
    std::string says;
  };
  const std::vector<Case> cases = {
      // c10d's all-reduce moves bytes the user-space shaper never sees.
      {{"real", "s.toml", "--set", "training.allreduce=gloo"}, "key 'training.allreduce'"},
      {{"real", "s.toml", "--set", "real.emulate_network=false", "--set", "real.shaper=kernel"},
       "key 'real.shaper'"},
      // A rank started by hand has no launcher to share an emulator with.
      {{"node", "s.toml", "--set", "real.emulate_network=true", "--rank", "0", "--world-size", "6"},
       "key 'real.emulate_network'"},
      {{"real", "s.toml", "--set", "real.emulate_network=yes"}, "expected \"auto\", true or false"},
  };
  for (const Case& c : cases) {
    INFO(c.args[0] << " " << c.args[3]);
    Result r = ravnest(c.args, d);
    CHECK(r.status == 2);
    CHECK(r.err.find(c.says) != std::string::npos);
    CHECK_FALSE(has_run_folder(d));
  }
  fs::remove_all(d);
}

// The network namespaces on this machine (`ip netns list`), or nothing if none can be listed.
std::set<std::string> namespaces() {
  std::set<std::string> out;
  FILE* p = popen("ip netns list 2>/dev/null", "r");
  if (p == nullptr) return out;
  char line[512];
  while (fgets(line, sizeof line, p) != nullptr) {
    std::string s(line);
    out.insert(s.substr(0, s.find_first_of(" \n")));
  }
  pclose(p);
  return out;
}

bool netns_mounted() { return std::system("grep -q ' /run/netns ' /proc/self/mountinfo") == 0; }

// Whether this machine lets a run make network namespaces (root, iproute2). Leaves /run/netns as
// it found it (`ip netns add` mounts it on itself).
bool can_make_namespaces() {
  const bool mounted = netns_mounted();
  const std::string probe = "rvprobe" + std::to_string(getpid());
  if (std::system(("ip netns add " + probe + " >/dev/null 2>&1").c_str()) != 0) return false;
  const bool ok = std::system(("ip netns delete " + probe + " >/dev/null 2>&1").c_str()) == 0;
  if (!mounted && netns_mounted()) std::system("umount /run/netns >/dev/null 2>&1");
  return ok;
}

// Two machines, the way PyTorch users start them (torchrun's --nnodes, --node-rank,
// --rdzv-endpoint): two network namespaces joined by a veth pair stand for them, each with its
// own address; each runs `ravnest real` for its share of the ranks, each rank logs to a file.
TEST_CASE(
    "ravnest real on two machines: each starts its share of the ranks and they meet at machine 0",
    "[cli][real][root]") {
  if (!can_make_namespaces()) {
    std::cout << "SKIPPED: cannot create a network namespace here (`ip netns add` needs root)\n";
    return;
  }
  const bool mounted_before = netns_mounted();
  const std::string tag = std::to_string(getpid() % 100000);
  const std::string ns0 = "rvm0-" + tag, ns1 = "rvm1-" + tag, if0 = "rvm0x" + tag,
                    if1 = "rvm1x" + tag;
  auto sh = [](const std::string& cmd) {
    return std::system((cmd + " >/dev/null 2>&1").c_str()) == 0;
  };
  // Inside a namespace through nsenter, as the kernel shaper does (`ip -n` and `ip netns exec`
  // remount / and /sys, which a chroot does not allow).
  const std::string nsenter = "/usr/bin/nsenter";
  if (!fs::exists(nsenter)) {
    std::cout << "SKIPPED: no nsenter (util-linux)\n";
    return;
  }
  auto in = [&](const std::string& ns, const std::string& cmd) {
    return nsenter + " --net=/run/netns/" + ns + " -- " + cmd;
  };
  // The namespaces (and the veth pair in them) go whatever happens below.
  struct Cleanup {
    std::string ns0, ns1;
    bool mounted_before;
    ~Cleanup() {
      (void)std::system(("ip netns delete " + ns0 + " >/dev/null 2>&1").c_str());
      (void)std::system(("ip netns delete " + ns1 + " >/dev/null 2>&1").c_str());
      if (!mounted_before && netns_mounted())
        (void)std::system("umount /run/netns >/dev/null 2>&1");
    }
  } cleanup{ns0, ns1, mounted_before};
  REQUIRE(sh("ip netns add " + ns0));
  REQUIRE(sh("ip netns add " + ns1));
  REQUIRE(sh("ip link add " + if0 + " type veth peer name " + if1));
  REQUIRE(sh("ip link set " + if0 + " netns " + ns0 + " && ip link set " + if1 + " netns " + ns1));
  REQUIRE(sh(in(ns0, "ip addr add 10.231.7.1/24 dev " + if0) + " && " +
             in(ns1, "ip addr add 10.231.7.2/24 dev " + if1)));
  REQUIRE(
      sh(in(ns0, "ip link set " + if0 + " up") + " && " + in(ns1, "ip link set " + if1 + " up")));
  REQUIRE(sh(in(ns0, "ip link set lo up") + " && " + in(ns1, "ip link set lo up")));
  fs::path d = workdir("machines");
  const std::string scenario = std::string(kSmall) + "[[devices]]\ncount = 2\n";  // 5 nodes: 2 + 3
  const std::string secret = "RAVNEST_SECRET=machines-test-secret-" + tag;
  auto start = [&](int k, const std::string& ns, const std::string& ifname,
                   std::vector<std::string> extra) {
    const fs::path m = d / ("m" + std::to_string(k));
    fs::create_directories(m);
    write(m / "s.toml", scenario);
    std::vector<std::string> args = {"--net=/run/netns/" + ns,
                                     "--",
                                     "env",
                                     "GLOO_SOCKET_IFNAME=" + ifname,
                                     secret,
                                     std::string(RV_BINARY_DIR) + "/ravnest",
                                     "real",
                                     "s.toml",
                                     "--set",
                                     "training.steps=40",
                                     "--nnodes",
                                     "2",
                                     "--node-rank",
                                     std::to_string(k),
                                     "--rdzv-endpoint",
                                     "10.231.7.1:29731"};
    args.insert(args.end(), extra.begin(), extra.end());
    return start_ravnest(args, m, {}, nsenter);
  };
  const pid_t m0 = start(0, ns0, if0, {"--run-dir", "run"});
  const pid_t m1 = start(1, ns1, if1, {});
  const Result r0 = finish_ravnest(m0, d / "m0"), r1 = finish_ravnest(m1, d / "m1");
  INFO("machine 0: " << r0.out << r0.err << "\nmachine 1: " << r1.out << r1.err);
  CHECK(r0.status == 0);
  CHECK(r1.status == 0);
  CHECK(r1.out.find("ranks 2..4 of this machine (node rank 1) finished") != std::string::npos);
  // Machine 0's rank 0 wrote the whole run: every rank's events.
  const nlohmann::json summary = nlohmann::json::parse(slurp(d / "m0" / "run" / "summary.json"));
  CHECK(summary["nodes"] == 5);
  CHECK(nlohmann::json::parse(slurp(d / "m0" / "run" / "run.json"))["status"] == "complete");
  std::set<std::string> nodes;
  std::stringstream lines(slurp(d / "m0" / "run" / "metrics.csv"));
  std::string line;
  std::getline(lines, line);
  while (std::getline(lines, line))
    nodes.insert(
        line.substr(line.find(',') + 1, line.find(',', line.find(',') + 1) - line.find(',') - 1));
  CHECK(nodes.size() == 5);
  // One log file per rank, on the machine that ran it.
  for (int r : {0, 1})
    CHECK(fs::exists(d / "m0" / "ravnest-logs" / ("rank-" + std::to_string(r) + ".log")));
  for (int r : {2, 3, 4})
    CHECK(fs::exists(d / "m1" / "ravnest-logs" / ("rank-" + std::to_string(r) + ".log")));
  CHECK_FALSE(fs::exists(d / "m1" / "run"));
  // What each machine needs is checked before any rank starts: the shared secret, the endpoint.
  Result no_secret =
      ravnest({"real", "m0/s.toml", "--nnodes", "2", "--rdzv-endpoint", "127.0.0.1:29732"}, d);
  CHECK(no_secret.status == 2);
  CHECK(no_secret.err.find("RAVNEST_SECRET") != std::string::npos);
  Result no_endpoint = ravnest({"real", "m0/s.toml", "--nnodes", "2"}, d);
  CHECK(no_endpoint.status == 2);
  CHECK(no_endpoint.err.find("--rdzv-endpoint") != std::string::npos);
  Result bad_rank = ravnest(
      {"real", "m0/s.toml", "--nnodes", "2", "--node-rank", "2", "--rdzv-endpoint", "127.0.0.1:1"},
      d);
  CHECK(bad_rank.status == 2);
  CHECK(bad_rank.err.find("--node-rank 2") != std::string::npos);
  fs::remove_all(d);
}

// c10d's all-reduce moves its bytes where only the kernel can shape them. With two ranks every sum
// has two terms, so the real run equals the loopback's multi-ring exactly (see above).
TEST_CASE("the kernel shaper runs each node in a namespace of its own, c10d's all-reduce included",
          "[cli][real][emu][root]") {
  if (!can_make_namespaces()) {
    std::cout << "SKIPPED: cannot create a network namespace here (`ip netns add` needs root)\n";
    return;
  }
  fs::path d = workdir("kernel");
  write(d / "s.toml", kSmall);
  const std::vector<std::string> set = {
      "--set", "training.algorithm=sync-dp", "--set", "training.steps=30",
      "--set", "training.eval_every=0",      "--set", "devices.0.count=2"};
  auto args = [&](std::vector<std::string> a, const std::string& allreduce,
                  const std::string& dir) {
    a.insert(a.end(), set.begin(), set.end());
    a.insert(a.end(), {"--set", "training.allreduce=" + allreduce, "--run-dir", dir});
    return a;
  };
  const std::set<std::string> before = namespaces();
  const bool mounted_before = netns_mounted();
  std::vector<std::string> real_args = args({"real", "s.toml"}, "gloo", "real");
  real_args.insert(real_args.end(), {"--set", "real.shaper=kernel"});
  Result real = ravnest(real_args, d);
  INFO(real.err);
  REQUIRE(real.status == 0);
  CHECK(namespaces() == before);  // the run removed what it made
  CHECK(netns_mounted() == mounted_before);
  // The links' latency (10 ms a device) was on the packet path: each node's delay lines, up and
  // down, passed its packets, and none was left running.
  const nlohmann::json path = nlohmann::json::parse(slurp(d / "real" / "kernel_network.json"));
  CHECK(path["delay_lines"].size() == 4u);
  for (const auto& line : path["delay_lines"]) {
    CHECK(line["delay_ms"] == 10.0);
    CHECK(line["passed"].get<double>() > 0);
  }
  CHECK(std::system("grep -qsx rv-delay-line /proc/[0-9]*/comm") != 0);
  Result loop = ravnest(args({"sim", "s.toml", "--executor", "loopback"}, "multi-ring", "loop"), d);
  REQUIRE(loop.status == 0);
  const auto losses = values_of(d / "real", "loss");
  CHECK(losses.size() == 60u);
  CHECK(losses == values_of(d / "loop", "loss"));
  CHECK(values_of(d / "real", "eval") == values_of(d / "loop", "eval"));
  fs::remove_all(d);
}

TEST_CASE("calibrate writes this host's profile, which a device can then use", "[cli][compute]") {
  fs::path d = workdir("calibrate");
  write(d / "s.toml", kSmall);
  Result cal = ravnest({"calibrate", "--quick", "--threads", "1", "--out", "host.toml"}, d);
  INFO(cal.err);
  REQUIRE(cal.status == 0);
  CHECK(cal.out.find("matmul") != std::string::npos);
  // A convolution of an image's channels is timed as a first layer: its backward is the weights'
  // gradient alone (as many flops as its forward), any other's both gradients (twice).
  {
    const std::regex conv_case(
        R"(^(forward|backward)\s+conv\s+(conv3x3 \S+( \(first\))?)\s+(\S+))");
    std::map<std::string, std::pair<double, double>> flops;  // case -> (forward, backward)
    std::istringstream out(cal.out);
    for (std::string line; std::getline(out, line);) {
      std::smatch m;
      if (line.find("fixed cost") != std::string::npos || !std::regex_search(line, m, conv_case))
        continue;
      auto& f = flops[m[2].str()];
      (m[1] == "forward" ? f.first : f.second) = std::stod(m[4].str());
    }
    int first = 0;
    for (const auto& [name, f] : flops) {
      INFO(name);
      const bool is_first = name.find("(first)") != std::string::npos;
      first += is_first;
      CHECK(f.second == Approx((is_first ? 1 : 2) * f.first).epsilon(1e-3));
    }
    CHECK(first >= 1);
    CHECK(flops.size() > static_cast<size_t>(first));
  }
  const std::string profile = slurp(d / "host.toml");
  CHECK(profile.find("peak_tflops = ") != std::string::npos);
  CHECK(profile.find("threads = 1") != std::string::npos);
  // Its fixed costs are the ones measured as a network runs its layers (each between the others),
  // the median per pass and kind of the printed cases; its memory bandwidth and cache go together.
  // The same cases with the core's caches emptied before each give the first operation's cost: per
  // pass and kind, what their median takes more than the network's (none below 0).
  auto per_kind = [&](const std::string& label) {
    std::map<std::string, std::vector<double>> got;
    std::istringstream out(cal.out);
    for (std::string line; std::getline(out, line);) {
      if (line.find(label) == std::string::npos) continue;
      std::istringstream f(line);
      std::string pass, kind, layer,
          dims;  // a case is named by its layer and its input's dimensions
      double flops = 0, intensity = 0, us = 0;
      f >> pass >> kind >> layer >> dims >> flops >> intensity >> us;
      // Per operation: a backward of a matmul or a convolution is two (work.h: input and weights);
      // a dropout is three each way (its mask, product and scaling).
      const bool two = pass == "backward" && (kind == "matmul" || kind == "conv");
      got[pass + "." + kind].push_back(kind == "random" ? us / 3 : two ? us / 2 : us);
    }
    return got;
  };
  auto median3 = [](std::vector<double> v) {
    REQUIRE(v.size() == 3);
    std::sort(v.begin(), v.end());
    return v[1];
  };
  std::map<std::string, std::vector<double>> network = per_kind("(fixed cost, in a network)");
  const std::map<std::string, std::vector<double>> emptied =
      per_kind("(fixed cost, in a network, caches emptied)");
  CHECK(network.size() == 12);  // 2 passes x 6 kinds, dropout's random kind among them
  REQUIRE(emptied.size() == 12);
  {
    std::vector<double> first(12,
                              0.0);  // as the profile lists them: forward, then backward, by kind
    const size_t at = profile.find("first_op_us = [[");
    if (at != std::string::npos) {
      std::string list = profile.substr(at + 16, profile.find("]]", at) - at - 16);
      std::replace(list.begin(), list.end(), ']', ' ');
      std::replace(list.begin(), list.end(), '[', ' ');
      std::replace(list.begin(), list.end(), ',', ' ');
      std::istringstream f(list);
      for (double& v : first) REQUIRE(f >> v);
    }
    const char* kinds[] = {"matmul", "conv", "norm", "pool", "elementwise", "random"};
    for (int i = 0; i < 12; ++i) {
      const std::string key = std::string(i < 6 ? "forward." : "backward.") + kinds[i % 6];
      INFO(key);
      const double more = median3(emptied.at(key)) - median3(network[key]);
      CHECK(first[static_cast<size_t>(i)] == Approx(std::max(0.0, more)).margin(0.02));
    }
  }
  {
    std::istringstream in(profile);
    std::string pass;
    int compared = 0;
    for (std::string line; std::getline(in, line);) {
      if (line.rfind("[", 0) == 0) pass = line.substr(1, line.find(']') - 1);
      const size_t eq = line.find(" = [");
      if (pass.empty() || eq == std::string::npos) continue;
      std::vector<double> v = network[pass + "." + line.substr(0, eq)];
      REQUIRE(v.size() == 3);
      std::sort(v.begin(), v.end());
      // The table prints microseconds to 0.01 (halved for a backward of two operations), the
      // profile to four digits: both rounded.
      CHECK(std::stod(line.substr(eq + 4)) == Approx(v[1]).epsilon(1e-3).margin(0.01));
      ++compared;
    }
    CHECK(compared == 12);
  }
  CHECK((profile.find("memory_gbps = ") != std::string::npos) ==
        (profile.find("cache_mib = ") != std::string::npos));
  // A device described by it: the plan's stage times change, and a bad path is refused (exit 2).
  Result peak = ravnest({"plan", "s.toml"}, d);
  Result calibrated = ravnest({"plan", "s.toml", "--set", "devices.0.profile=\"host.toml\""}, d);
  INFO(calibrated.err);
  REQUIRE(peak.status == 0);
  REQUIRE(calibrated.status == 0);
  CHECK(calibrated.out != peak.out);
  Result missing = ravnest({"plan", "s.toml", "--set", "devices.0.profile=\"nope.toml\""}, d);
  CHECK(missing.status == 2);
  CHECK(missing.err.find("devices[0].profile") != std::string::npos);
  fs::remove_all(d);
}

TEST_CASE("calibrate --from fits a device's published timings, bad input exits 2",
          "[cli][compute]") {
  fs::path d = workdir("calibrate-from");
  const std::string gpu = std::string(RV_SOURCE_DIR) + "/profiles/published/gtx-1080-ti.csv";
  Result fit = ravnest({"calibrate", "--from", gpu, "--peak-tflops", "11.34", "--memory-gbps",
                        "484", "--out", "gpu.toml"},
                       d);
  INFO(fit.err);
  REQUIRE(fit.status == 0);
  const std::string profile = slurp(d / "gpu.toml");
  CHECK(profile.find("peak_tflops = 11.34") != std::string::npos);
  CHECK(profile.find("published timings, not this host") != std::string::npos);
  // The shipped profile is what profiles/published/make.sh makes of the same file.
  CHECK(profile == slurp(fs::path(RV_SOURCE_DIR) / "profiles" / "gtx-1080-ti.toml"));
  write(d / "bad.csv",
        std::string(
            "pass,kind,case,ops,flops,bytes,seconds,fixed_cost\nforward,matmul,g,1,x,1,1,0\n"));
  Result bad = ravnest({"calibrate", "--from", "bad.csv", "--peak-tflops", "10"}, d);
  CHECK(bad.status == 2);
  CHECK(bad.err.find("bad.csv:2: flops must be a number") != std::string::npos);
  Result stray = ravnest({"calibrate", "--peak-tflops", "10"}, d);
  CHECK(stray.status == 2);
  CHECK(stray.err.find("go with --from") != std::string::npos);
  fs::remove_all(d);
}

TEST_CASE("overlapped averaging is faster than bulk-synchronous in simulation",
          "[cli][sim][rings]") {
  fs::path d = workdir("overlap");
  write(d / "s.toml", std::string(kSmall) + rv::test::kTwoClusters);
  auto time_of = [&](const std::string& mode) {
    Result r =
        ravnest({"sim", "s.toml", "--set", "sim.mode=timing", "--set", "training.average_every=20",
                 "--set", "training.averaging=" + mode, "--run-dir", mode},
                d);
    REQUIRE(r.status == 0);
    return nlohmann::json::parse(slurp(d / mode / "summary.json"))["time_s"].get<double>();
  };
  const double bulk = time_of("bulk-sync"), overlapped = time_of("overlapped");
  INFO("bulk-sync " << bulk << " s, overlapped " << overlapped << " s");
  CHECK(overlapped < bulk);
  fs::remove_all(d);
}

namespace {

const char* kTiny = R"(name = "tiny"
seed = 3
[model]
head = "linear"
kind = "mlp"
hidden = [64, 32]
[data]
kind = "digits"
batch_size = 32
[training]
steps = 80
eval_every = 40
[planner]
method = "manual"
[network]
model = "ideal"
[real]
timeout_s = 30
[[devices]]
count = 2
tflops = 0.02
up_mbps = 50
down_mbps = 50
latency_ms = 2
)";

double ratio_error(double a, double b) { return std::exp(std::abs(std::log(a / b))) - 1; }

}  // namespace

TEST_CASE("validate runs the scenario simulated and emulated, dilated, and compares them",
          "[cli][real][validate]") {
  fs::path d = workdir("validate");
  write(d / "s.toml", kTiny);
  Result r = ravnest({"validate", "s.toml", "--dilation", "2", "--quick-calibration", "--run-dir",
                      "v", "--progress", "off"},
                     d);
  INFO(r.out << r.err);
  REQUIRE(r.status == 0);
  CHECK(r.out.find("validate folder: ") != std::string::npos);
  const auto v = nlohmann::json::parse(slurp(d / "v" / "validate.json"));
  const auto sim = nlohmann::json::parse(slurp(d / "v" / "sim" / "summary.json"));
  const auto real = nlohmann::json::parse(slurp(d / "v" / "real" / "summary.json"));
  CHECK(v["dilation"].get<double>() == 2);
  CHECK(slurp(d / "v" / "sim" / "scenario.toml").find("dilation = 2") != std::string::npos);
  CHECK(slurp(d / "v" / "real" / "scenario.toml").find("emulate_speed = true") !=
        std::string::npos);
  CHECK(v["same_plan"].get<bool>());
  // The host's demand was measured for both working nodes, whatever dilation was given.
  REQUIRE(v["host"]["nodes"].size() == 2);
  for (const auto& n : v["host"]["nodes"]) CHECK(n["host_ms"].get<double>() > 0);
  CHECK(v["host"]["late_within_share"].get<double>() >= 0);
  // Each figure is the two summaries' own, with its error.
  bool seen = false;
  for (const auto& f : v["figures"])
    if (f["figure"] == "steady_samples_per_s") {
      seen = true;
      CHECK(f["sim"].get<double>() == sim["steady_samples_per_s"].get<double>());
      CHECK(f["real"].get<double>() == real["steady_samples_per_s"].get<double>());
      CHECK(f["error"].get<double>() ==
            Approx(ratio_error(sim["steady_samples_per_s"].get<double>(),
                               real["steady_samples_per_s"].get<double>())));
    }
  CHECK(seen);
  // Message sizes and counts do not depend on timing: both runs moved the same bytes.
  for (size_t i = 0; i < 2; ++i) {
    CHECK(v["per_node"][i]["bytes_sent"]["sim"] == v["per_node"][i]["bytes_sent"]["real"]);
    CHECK(v["per_node"][i]["bytes_received"]["sim"] == v["per_node"][i]["bytes_received"]["real"]);
  }
  const std::string md = slurp(d / "v" / "validate.md");
  CHECK(md.rfind("# Validation: tiny (ravnest)", 0) == 0);
  CHECK(v["verdict"].get<std::string>().find("(dilation 2)") != std::string::npos);
  // The two agreements, named apart.
  CHECK(v["agreement"] == "executors");
  CHECK(md.find("## Executor agreement") != std::string::npos);
  CHECK(md.find("## Model against hardware") != std::string::npos);
  const auto& hw = v["model_against_hardware"];
  CHECK(hw["agreement"] == "hardware");
  CHECK(r.out.find("model against hardware: ") != std::string::npos);
  if (::geteuid() != 0) {
    // Without root there is no real TCP to measure: said, not faked with the user-space shaper.
    CHECK_FALSE(hw["measured"].get<bool>());
    CHECK(hw["why"].get<std::string>().find("not root") != std::string::npos);
  } else {
    REQUIRE(hw["measured"].get<bool>());
    // The real run took nothing from the model; the simulation took this host's calibration.
    const std::string real_toml = slurp(d / "v" / "hardware" / "real" / "scenario.toml");
    CHECK(real_toml.find("emulate_speed = false") != std::string::npos);
    CHECK(real_toml.find("shaper = \"kernel\"") != std::string::npos);
    CHECK(real_toml.find("dilation = 1") != std::string::npos);
    CHECK(slurp(d / "v" / "hardware" / "sim" / "scenario.toml").find("host.toml") !=
          std::string::npos);
    CHECK(fs::exists(d / "v" / "hardware" / "real" / "kernel_network.json"));
    CHECK(hw["compute_ratio"].get<double>() > 0);
    // The host calibrated again after the real run, and its drift measured on the run's spans.
    CHECK(fs::exists(d / "v" / "hardware" / "host-after.toml"));
    CHECK(hw["host_drift"].get<double>() > 0);
    CHECK(hw["host"]["peak_tflops_after"].get<double>() > 0);
    bool samples = false;
    for (const auto& f : hw["figures"])
      samples = samples || (f["figure"] == "steady_samples_per_s" && f["error"].is_number());
    CHECK(samples);
    CHECK(hw["verdict"].get<std::string>().find("calibration") != std::string::npos);
  }
  fs::remove_all(d);
}

TEST_CASE("validate runs again, dilated more, when the real run did not keep up",
          "[cli][real][validate]") {
  fs::path d = workdir("validate_retry");
  write(d / "s.toml", kTiny);
  // Stages of a few milliseconds here (longer than a late span's 1 ms of slack), on devices modeled
  // 50 times faster than kTiny's (and links fast enough that the dilated run stays short), and
  // almost no headroom: the first dilation is far too small for the host.
  Result r = ravnest({"validate",    "s.toml",
                      "--set",       "model.hidden=[1024, 1024, 1024]",
                      "--set",       "data.batch_size=128",
                      "--set",       "devices.0.tflops=1",
                      "--set",       "devices.0.up_mbps=10000",
                      "--set",       "devices.0.down_mbps=10000",
                      "--set",       "training.steps=30",
                      "--headroom",  "0.01",
                      "--agreement", "executors",
                      "--run-dir",   "v",
                      "--progress",  "off"},
                     d);
  INFO(r.out << r.err);
  REQUIRE(r.status == 0);
  const auto v = nlohmann::json::parse(slurp(d / "v" / "validate.json"));
  const auto& attempts = v["host"]["attempts"];
  if (attempts.empty()) {
    // A host so slow that keeping up would need more than kMaxDilation: the runs stay, and say so.
    bool said = false;
    for (const auto& n : v["notes"])
      said = said || n.get<std::string>().find("above the limit") != std::string::npos;
    CHECK(said);
    CHECK(v["late_fraction"].get<double>() > 0.05);
  } else {
    REQUIRE(attempts.size() == 1);
    CHECK(attempts[0]["late_fraction"].get<double>() > 0.05);
    CHECK(v["dilation"].get<double>() > attempts[0]["dilation"].get<double>());
    CHECK(v["host"]["chosen"].get<double>() == v["dilation"].get<double>());
    CHECK(r.out.find("the real run again at") != std::string::npos);
    // The folder holds the second attempt's runs only.
    const std::string toml = slurp(d / "v" / "sim" / "scenario.toml");
    const size_t at = toml.find("\ndilation = ");
    REQUIRE(at != std::string::npos);
    CHECK(std::stod(toml.substr(at + 12)) == Approx(v["dilation"].get<double>()));
  }
  fs::remove_all(d);
}

TEST_CASE("validate refuses a run this host cannot keep up with, naming the --set that shrinks it",
          "[cli][validate]") {
  fs::path d = workdir("validate_refused");
  write(d / "s.toml", kTiny);
  Result r = ravnest({"validate", "s.toml", "--set", "devices.0.tflops=1e5"}, d);
  CHECK(r.status == 2);
  CHECK(r.err.find("cannot keep up") != std::string::npos);
  CHECK(r.err.find("--set devices.0.tflops=") != std::string::npos);
  CHECK_FALSE(has_run_folder(d));
  Result given = ravnest({"validate", "s.toml", "--set", "dilation=3"}, d);
  CHECK(given.status == 2);
  CHECK(given.err.find("--dilation") != std::string::npos);
  fs::remove_all(d);
}

namespace {

// A quadratic with known constants (d = 16, L = 1, sigma^2 = 1) on a 2-stage ravnest pipeline,
// inside the bound's conditions: measured/bound about 0.3 (docs/theory.md), far enough under 1
// that scheduling cannot flip it.
const char* kQuadratic = R"(name = "quadratic"
seed = 4
[model]
kind = "blocks"
blocks = 4
[data]
kind = "quadratic"
features = 16
eig_min = 0.05
eig_max = 1.0
sigma2 = 1.0
batch_size = 8
[training]
steps = 200
lr = 0.2
eval_every = 0
[planner]
method = "manual"
[network]
model = "ideal"
[real]
timeout_s = 30
[[devices]]
count = 2
tflops = 0.01
up_mbps = 1000
down_mbps = 1000
latency_ms = 0.1
)";

}  // namespace

TEST_CASE("theory measures a quadratic run on every executor under its bound",
          "[cli][theory][real]") {
  fs::path d = workdir("theory");
  write(d / "q.toml", kQuadratic);
  for (const std::string executor : {"sim", "loopback", "real"}) {
    INFO(executor);
    const std::vector<std::string> args =
        executor == "loopback"
            ? std::vector<std::string>{"sim",       "q.toml", "--executor", "loopback",
                                       "--run-dir", executor, "--progress", "off"}
            : std::vector<std::string>{executor, "q.toml",     "--run-dir",
                                       executor, "--progress", "off"};
    Result run = ravnest(args, d);
    INFO(run.out << run.err);
    REQUIRE(run.status == 0);
    CHECK(fs::exists(d / executor / "params.csv"));
    Result r = ravnest({"theory", executor, "--no-plot"}, d);
    INFO(r.out << r.err);
    REQUIRE(r.status == 0);
    const auto t = nlohmann::json::parse(slurp(d / executor / "theory.json"));
    CHECK(t["applies"].get<bool>());
    CHECK(t["inputs"]["updates"].get<int64_t>() == 200);
    CHECK(t["inputs"]["clusters"].get<int64_t>() == 1);
    CHECK(t["inputs"]["batch"].get<int64_t>() == 8);
    CHECK(t["inputs"]["smoothness"].get<double>() == 1.0);
    CHECK(t["inputs"]["staleness"].get<int64_t>() >= 1);  // two stages: the first one's updates lag
    CHECK(t["ratio"].get<double>() > 0);
    CHECK(t["ratio"].get<double>() <= 0.5);
    CHECK(r.out.find("Theorem 1 of docs/theory.md (every cluster descends one objective)") !=
          std::string::npos);
    CHECK(r.out.find("meet its condition") != std::string::npos);
    // theory.csv: K rows, the running mean ending at the measured value.
    const std::string csv = slurp(d / executor / "theory.csv");
    CHECK(std::count(csv.begin(), csv.end(), '\n') == 201);
  }
  fs::remove_all(d);
}

TEST_CASE("theory flags a run outside the conditions and refuses a run it cannot measure",
          "[cli][theory]") {
  fs::path d = workdir("theory_flags");
  write(d / "q.toml", kQuadratic);
  Result run = ravnest({"sim", "q.toml", "--set", "training.lr=1.5", "--set", "training.steps=40",
                        "--run-dir", "big", "--progress", "off"},
                       d);
  REQUIRE(run.status == 0);
  Result r = ravnest({"theory", "big", "--no-plot"}, d);
  INFO(r.out << r.err);
  REQUIRE(r.status == 0);
  const auto t = nlohmann::json::parse(slurp(d / "big" / "theory.json"));
  CHECK_FALSE(t["applies"].get<bool>());
  CHECK_FALSE(t["bound"]["holds"].get<bool>());
  CHECK(r.out.find("the bound does not apply: the step-size condition fails") != std::string::npos);
  // A timing-mode run computes no gradients: exit status 2, and why.
  write(d / "tiny.toml", kTiny);
  REQUIRE(ravnest({"sim", "tiny.toml", "--set", "training.steps=4", "--set", "sim.mode=\"timing\"",
                   "--run-dir", "nn", "--progress", "off"},
                  d)
              .status == 0);
  Result nn = ravnest({"theory", "nn"}, d);
  CHECK(nn.status == 2);
  CHECK(nn.err.find("numeric mode") != std::string::npos);
  CHECK_FALSE(fs::exists(d / "nn" / "theory.json"));
  fs::remove_all(d);
}

namespace {

// The negative controls of docs/theory.md: the logistic problem with a feature mean (so that its
// classes are not mirror images), split by class between two 2-stage clusters that average every
// update, inside Theorem 2's condition. Without a fault, measured/bound is about 0.06.
const char* kNonIid = R"(name = "control"
seed = 3
[model]
kind = "blocks"
blocks = 4
[data]
kind = "logistic"
features = 16
feature_mean = 1.0
partition = "by-class"
batch_size = 128
[training]
steps = 300
lr = 1.0
max_in_flight = 2
average_every = 1
eval_every = 0
[planner]
method = "manual"
[[planner.cluster]]
nodes = [0, 1]
stage_layers = [2, 3]
[[planner.cluster]]
nodes = [2, 3]
stage_layers = [2, 3]
[network]
model = "ideal"
[real]
timeout_s = 60
[[devices]]
count = 4
tflops = 0.01
up_mbps = 1000
down_mbps = 1000
latency_ms = 0.1
)";

// RAVNEST_FAULT for the ravnest processes this test starts (they inherit it); cleared after.
struct FaultFor {
  explicit FaultFor(const std::string& fault) { ::setenv("RAVNEST_FAULT", fault.c_str(), 1); }
  ~FaultFor() { ::unsetenv("RAVNEST_FAULT"); }
};

std::vector<std::string> run_args(const std::string& executor, const std::string& dir) {
  if (executor == "loopback")
    return {"sim", "s.toml", "--executor", "loopback", "--run-dir", dir, "--progress", "off"};
  return {executor, "s.toml", "--run-dir", dir, "--progress", "off"};
}

}  // namespace

TEST_CASE("theory catches a broken all-reduce on non-iid data on every executor",
          "[cli][theory][controls][real]") {
  fs::path d = workdir("control_allreduce");
  write(d / "s.toml", kNonIid);
  for (const std::string executor : {"sim", "loopback", "real"}) {
    for (const bool broken : {false, true}) {
      const std::string dir = executor + (broken ? "-broken" : "-sound");
      INFO(dir);
      {
        FaultFor fault(broken ? "allreduce-own" : "");
        Result run = ravnest(run_args(executor, dir), d);
        INFO(run.out << run.err);
        REQUIRE(run.status == 0);
      }
      Result r = ravnest({"theory", dir, "--no-plot"}, d);
      INFO(r.out << r.err);
      const auto t = nlohmann::json::parse(slurp(d / dir / "theory.json"));
      CHECK(t["applies"].get<bool>());  // inside Theorem 2's condition either way
      CHECK(t["bound"]["theorem"].get<int>() == 2);
      CHECK(t["inputs"]["dissimilarity"].get<double>() > 0);
      if (broken) {
        CHECK(r.status == 1);
        CHECK(t["violated"].get<bool>());
        CHECK(t["ratio"].get<double>() > 1.5);
        CHECK(r.out.find("VIOLATED: the measured mean squared gradient norm") != std::string::npos);
        CHECK(r.err.find("1 of 1 run(s) violate") != std::string::npos);
      } else {
        CHECK(r.status == 0);
        CHECK_FALSE(t["violated"].get<bool>());
        CHECK(t["ratio"].get<double>() < 0.3);
      }
    }
  }
  fs::remove_all(d);
}

TEST_CASE("theory catches staleness beyond the configuration from the run's records",
          "[cli][theory][controls][real]") {
  fs::path d = workdir("control_staleness");
  write(d / "s.toml", kNonIid);
  for (const std::string executor : {"sim", "loopback", "real"}) {
    for (const bool broken : {false, true}) {
      const std::string dir = executor + (broken ? "-broken" : "-sound");
      INFO(dir);
      {
        FaultFor fault(broken ? "in-flight+3" : "");
        std::vector<std::string> args = run_args(executor, dir);
        args.insert(args.end(), {"--set", "training.average_every=8"});
        Result run = ravnest(args, d);
        INFO(run.out << run.err);
        REQUIRE(run.status == 0);
      }
      Result r = ravnest({"theory", dir, "--no-plot"}, d);
      INFO(r.out << r.err);
      const auto t = nlohmann::json::parse(slurp(d / dir / "theory.json"));
      CHECK(t["inputs"]["staleness_limit"].get<int64_t>() == 1);  // max_in_flight = 2
      if (broken) {
        // T is the records' (beyond the limit), so the bound itself stays correct; the mismatch is
        // what is caught.
        CHECK(t["inputs"]["staleness"].get<int64_t>() > 1);
        CHECK(r.status == 1);
        CHECK(r.out.find("more than the configuration allows") != std::string::npos);
      } else {
        CHECK(t["inputs"]["staleness"].get<int64_t>() == 1);
        CHECK(r.status == 0);
        CHECK_FALSE(t["violated"].get<bool>());
      }
    }
  }
  // A fault this build does not know is refused before anything is written.
  FaultFor fault("allreduce-none");
  Result bad = ravnest(run_args("sim", "bad"), d);
  CHECK(bad.status == 2);
  CHECK(bad.err.find("RAVNEST_FAULT: unknown fault \"allreduce-none\"") != std::string::npos);
  CHECK_FALSE(fs::exists(d / "bad"));
  fs::remove_all(d);
}

TEST_CASE("theory flags a non-iid run whose step is outside the condition",
          "[cli][theory][controls]") {
  fs::path d = workdir("control_step");
  write(d / "s.toml", kNonIid);
  for (const std::string lr : {"1.0", "3.0"}) {
    INFO(lr);
    std::vector<std::string> args = run_args("sim", "lr" + lr);
    args.insert(args.end(), {"--set", "training.lr=" + lr});
    REQUIRE(ravnest(args, d).status == 0);
    Result r = ravnest({"theory", "lr" + lr, "--no-plot"}, d);
    INFO(r.out << r.err);
    CHECK(r.status == 0);  // flagged, not violated: the bound makes no claim there
    const auto t = nlohmann::json::parse(slurp(d / ("lr" + lr) / "theory.json"));
    const bool outside = lr == "3.0";  // L ~ 0.47: L eta = 1.4 > 1
    CHECK(t["bound"]["holds"].get<bool>() == !outside);
    CHECK(t["applies"].get<bool>() == !outside);
    CHECK((r.out.find("the bound does not apply: the step-size condition fails") !=
           std::string::npos) == outside);
    // The paper's condition is printed beside ours either way.
    CHECK(r.out.find("the paper's condition 2 eta L T^2 / (C N_m)") != std::string::npos);
    CHECK(t["paper"]["a1_a3"].get<std::string>().find("not computable") != std::string::npos);
  }
  fs::remove_all(d);
}

TEST_CASE("theory estimates a neural network's constants and labels its bound a shape",
          "[cli][theory]") {
  fs::path d = workdir("theory_nn");
  write(d / "tiny.toml", kTiny);
  REQUIRE(
      ravnest({"sim", "tiny.toml", "--set", "training.steps=30", "--set", "training.eval_every=0",
               "--set", "training.momentum=0", "--run-dir", "nn", "--progress", "off"},
              d)
          .status == 0);
  Result r = ravnest({"theory", "nn", "--out", "nn/report"}, d);
  INFO(r.out << r.err);
  REQUIRE(r.status == 0);
  const auto t = nlohmann::json::parse(slurp(d / "nn" / "theory.json"));
  CHECK(t["estimated"].get<bool>());
  CHECK_FALSE(t["applies"].get<bool>());  // estimates are never a guarantee
  CHECK(t["estimates"]["smoothness"].get<double>() > 0);
  CHECK(t["estimates"]["sigma2"].get<double>() > 0);
  CHECK(t["estimates"]["gap"].get<double>() > 0);
  CHECK(t["estimates"]["batch"].get<int64_t>() == 32);
  CHECK(t["inputs"]["smoothness"].get<double>() == t["estimates"]["smoothness"].get<double>());
  CHECK(t["inputs"]["updates"].get<int64_t>() == 30);
  // The measured side: each update's applied gradient norm less sigma^2 / N (sigma^2 between the
  // checkpoints' values), K rows.
  CHECK(t["estimates"]["noise_removed"].get<double>() > 0);
  CHECK(t["estimates"]["noise_removed"].get<double>() <=
        t["estimates"]["sigma2"].get<double>() / t["inputs"]["batch"].get<double>());
  const std::string csv = slurp(d / "nn" / "theory.csv");
  CHECK(std::count(csv.begin(), csv.end(), '\n') == 31);
  CHECK(r.out.find("estimates (the largest over an SGD replay of 30 updates)") !=
        std::string::npos);
  CHECK(t["estimates"]["points"].size() == 5);  // updates 0, 7, 15, 22, 30
  CHECK(t["estimates"]["points"][4]["update"].get<int64_t>() == 30);
  CHECK(r.out.find("not a guarantee") != std::string::npos);
  CHECK(fs::exists(d / "nn" / "report" / "theory.png"));
  fs::remove_all(d);
}

TEST_CASE("ranks, world sizes and ports from the environment are parsed strictly", "[cli][input]") {
  fs::path d = workdir("strict_env");
  write(d / "s.toml", kSmall);
  struct Case {
    const char* var;
    const char* value;
    std::string says;
  };
  const std::vector<Case> cases = {
      {"RANK", "4294967297", "environment variable RANK='4294967297' is out of range"},
      {"RANK", "1x", "environment variable RANK='1x' is not a decimal integer"},
      {"WORLD_SIZE", "-3", "environment variable WORLD_SIZE='-3' is out of range"},
      {"MASTER_PORT", "70000", "environment variable MASTER_PORT='70000' is out of range"},
  };
  for (const Case& c : cases) {
    INFO(c.var << "=" << c.value);
    ::setenv("RANK", "0", 1);
    ::setenv("WORLD_SIZE", "2", 1);
    ::setenv(c.var, c.value, 1);
    Result r = ravnest({"node", "s.toml"}, d);
    ::unsetenv("RANK");
    ::unsetenv("WORLD_SIZE");
    ::unsetenv("MASTER_PORT");
    CHECK(r.status == 2);
    CHECK(r.err.find(c.says) != std::string::npos);
  }
  fs::remove_all(d);
}

TEST_CASE("plan --out replaces a plan whole or leaves the older one", "[cli][input]") {
  fs::path d = workdir("plan_out");
  write(d / "s.toml", kSmall);
  Result r = ravnest({"plan", "s.toml", "--out", "p.json"}, d);
  REQUIRE(r.status == 0);
  const std::string first = slurp(d / "p.json");
  CHECK(first.find("\"clusters\"") != std::string::npos);
  // The temporary name taken: the write fails (exit 1), the older plan stays, nothing is left.
  write(d / "p.json", "older\n");
  fs::create_directories(d / "sub");
  r = ravnest({"plan", "s.toml", "--out", "sub/missing/p.json"}, d);
  CHECK(r.status == 1);
  CHECK(r.err.find("sub/missing/p.json: cannot write") != std::string::npos);
  CHECK(slurp(d / "p.json") == "older\n");
  CHECK(fs::is_empty(d / "sub"));
  // A name that would leave output.dir is refused before anything is written.
  r = ravnest({"sim", "s.toml", "--set", "name=..", "--set", "output.dir=out"}, d);
  CHECK(r.status == 2);
  CHECK(r.err.find("key 'name'") != std::string::npos);
  CHECK_FALSE(fs::exists(d / "out"));
  fs::remove_all(d);
}

TEST_CASE("real: SIGTERM or SIGINT ends a run with its ranks and its temporary files",
          "[cli][real][signal]") {
  for (const int sig : {SIGTERM, SIGINT}) {
    INFO("signal " << sig);
    fs::path d = workdir("signal");
    fs::path tmp = d / "tmp";
    fs::create_directories(tmp);
    write(d / "s.toml", std::string(kSmall) + rv::test::kTwoClusters);
    const pid_t pid = start_ravnest(
        {"real", "s.toml", "--set", "training.steps=100000", "--progress", "off"}, d, tmp);
    const std::vector<pid_t> ranks = wait_for_children(pid, 3, 1500);
    REQUIRE(ranks.size() == 3);
    REQUIRE(!fs::is_empty(tmp));  // the launcher's status folder (the secret, the emulator socket)
    kill(pid, sig);
    const Result r = finish_ravnest(pid, d);
    CHECK(r.status == 128 + sig);  // the signal's own status, after the clean-up
    CHECK(r.err.find("interrupted by signal " + std::to_string(sig)) != std::string::npos);
    CHECK(fs::is_empty(tmp));
    for (pid_t c : ranks) CHECK((kill(c, 0) != 0 && errno == ESRCH));
    // The run had started: its folder (if rank 0 had made it yet) keeps its rows, marked
    // interrupted (not failed: nothing in the run went wrong).
    if (has_run_folder(d)) {
      for (auto& e : fs::recursive_directory_iterator(d / "runs")) {
        if (e.path().filename() != "run.json") continue;
        const nlohmann::json status = nlohmann::json::parse(slurp(e.path()));
        CHECK(status["status"] == "interrupted");
        CHECK(status["reason"].get<std::string>().find("interrupted by signal") !=
              std::string::npos);
        CHECK_FALSE(status.contains("error"));
        CHECK_FALSE(fs::exists(e.path().parent_path() / "summary.json"));
      }
    }
    fs::remove_all(d);
  }
}

TEST_CASE("real: ranks all stopped at once are found by the launcher within the timeout",
          "[cli][real][signal]") {
  fs::path d = workdir("allstopped");
  fs::path tmp = d / "tmp";
  fs::create_directories(tmp);
  write(d / "s.toml", std::string(kSmall) + rv::test::kTwoClusters);
  const pid_t pid = start_ravnest({"real", "s.toml", "--set", "training.steps=100000", "--set",
                                   "real.timeout_s=3", "--progress", "off"},
                                  d, tmp);
  const std::vector<pid_t> ranks = wait_for_children(pid, 3, 1500);
  REQUIRE(ranks.size() == 3);
  for (pid_t c : ranks) kill(c, SIGSTOP);  // no rank can notice: only the launcher can
  const Result r = finish_ravnest(pid, d);
  CHECK(r.status == 1);
  CHECK(r.err.find("stayed stopped") != std::string::npos);
  CHECK(r.err.find("rank(s) 0, 1, 2") != std::string::npos);
  CHECK(fs::is_empty(tmp));
  fs::remove_all(d);
}

TEST_CASE("node: a rank started by hand without the run's secret is refused (exit 2)",
          "[cli][real][auth]") {
  fs::path d = workdir("nosecret");
  write(d / "s.toml", std::string(kSmall) + rv::test::kTwoClusters);
  ::unsetenv("RAVNEST_SECRET");
  ::unsetenv("RAVNEST_SECRET_FILE");
  const Result r =
      ravnest({"node", "s.toml", "--rank", "0", "--world-size", "3", "--master-port", "29999"}, d);
  CHECK(r.status == 2);
  CHECK(r.err.find("no run secret") != std::string::npos);
  CHECK(r.err.find("RAVNEST_SECRET_FILE") != std::string::npos);
  fs::remove_all(d);
}

TEST_CASE("a test's deadline ends what it started with every process that started, SIGTERM or not",
          "[cli][signal]") {
  // A program that ignores SIGTERM, as a hung launcher may, and starts a child that ignores it too:
  // past the deadline both get SIGKILL, by their process group, so no child outlives the test.
  const fs::path d = rv::test::fresh_dir("rv-cli", "deadline");
  const pid_t pid =
      start_ravnest({"-c", "trap '' TERM; sleep 1000 & echo $! > child; wait"}, d, {}, "/bin/sh");
  pid_t child = 0;
  for (int i = 0; i < 500 && child == 0; ++i) {
    std::ifstream in(d / "child");
    if (!(in >> child)) child = 0;
    if (child == 0) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  REQUIRE(child > 0);
  const Result r = finish_ravnest(pid, d, 0.5);
  CHECK(r.status == 124);
  CHECK(r.err.find("killed") != std::string::npos);
  bool gone = false;  // reparented and reaped: a zombie may linger for a moment
  for (int i = 0; i < 200 && !gone; ++i) {
    gone = ::kill(child, 0) != 0 && errno == ESRCH;
    if (!gone) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  CHECK(gone);
  if (!gone) ::kill(child, SIGKILL);
  fs::remove_all(d);
}
