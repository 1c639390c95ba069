// Real runs that lose a rank (real.on_peer_loss = "recover", issue 17 item 4): a rank killed at a
// random moment, its cluster sits out until the spare takes its stage and fetches its state, and
// the run finishes with its loss still falling; the loss of rank 0 (which gathers the run) ends
// the run with a clear error.
#include <signal.h>
#include <sys/types.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <thread>

#include "catch.h"
#include "cli_support.h"
#include "core/output/run_output.h"
#include "real/gloo_transport.h"
#include "snippets.h"

using namespace rv;
namespace fs = std::filesystem;

namespace {

// Two clusters of two stages (ranks 0-1, 2-3) and a spare (rank 4) on emulated home links.
const std::string kRecover = std::string(R"(name = "recover"
)") + test::kDigitsMlp + R"([training]
optimizer = "adam"
lr = 0.003
steps = 600
eval_every = 200
average_every = 20
[planner]
method = "manual"
[[planner.cluster]]
nodes = [0, 1]
[[planner.cluster]]
nodes = [2, 3]
[real]
on_peer_loss = "recover"
timeout_s = 20
[[devices]]
count = 5
up_mbps = 20
down_mbps = 50
latency_ms = 10
tflops = 0.001
)";

fs::path workdir(const std::string& name) { return test::fresh_dir("rv-recover", name); }

// The `ravnest node` process of rank `rank` whose parent is `launcher`, or -1.
pid_t rank_process(pid_t launcher, int rank) {
  for (const auto& e : fs::directory_iterator("/proc")) {
    const std::string name = e.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream stat(e.path() / "stat");
    std::string line;
    std::getline(stat, line);
    const size_t close = line.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream rest(line.substr(close + 2));
    char state = 0;
    pid_t ppid = -1;
    rest >> state >> ppid;
    if (ppid != launcher) continue;
    const std::string cmd = test::slurp(e.path() / "cmdline");
    if (cmd.find(std::string("node") + '\0') != std::string::npos &&
        cmd.find(std::string("--rank") + '\0' + std::to_string(rank) + '\0') != std::string::npos)
      return static_cast<pid_t>(std::stoi(name));
  }
  return -1;
}

int64_t rows_of_kind(const fs::path& csv, const std::string& kind) {
  std::ifstream in(csv);
  int64_t n = 0;
  for (std::string line; std::getline(in, line);)
    if (line.rfind(kind + ",", 0) == 0) ++n;
  return n;
}

void check_loss_falls(const std::vector<Event>& events, double killed_at);

// Signals one rank (never rank 0, which gathers the run) at a random moment of its training, and
// checks that the run finishes without it, its loss still falling.
void lose_a_rank(int signal, const std::vector<std::string>& sets) {
  const fs::path d = workdir("signal-" + std::to_string(signal));
  std::ofstream(d / "s.toml") << kRecover;
  std::random_device entropy;
  std::mt19937 rng(entropy());
  const int victim = std::uniform_int_distribution<int>(1, 3)(rng);
  const double after = std::uniform_real_distribution<double>(0.0, 3.0)(rng);
  INFO("signal " << signal << " to rank " << victim << ", " << after << " s after training began");
  std::vector<std::string> args = {"real", "s.toml", "--run-dir", "run", "--progress", "off"};
  for (const auto& s : sets) args.insert(args.end(), {"--set", s});
  const pid_t launcher = test::start_ravnest(args, d);
  // Training has begun once the live metrics show updates (they are flushed every second).
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (rows_of_kind(d / "run" / "metrics.csv", "update") < 10 &&
         std::chrono::steady_clock::now() < give_up)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  std::this_thread::sleep_for(std::chrono::duration<double>(after));
  const pid_t pid = rank_process(launcher, victim);
  REQUIRE(pid > 0);
  REQUIRE(::kill(pid, signal) == 0);
  const test::Result r = test::finish_ravnest(launcher, d);
  // What the run said beyond the expected loss and recovery first (a failure's cause, should a
  // log show only its first lines), then all of it.
  std::string unexpected;
  {
    std::istringstream lines(r.err);
    for (std::string line; std::getline(lines, line);)
      if (line.find("rank " + std::to_string(victim) + " was killed") == std::string::npos &&
          line !=
              "ravnest real: the run recovered from the loss of rank(s) " + std::to_string(victim))
        unexpected += line + "\n";
  }
  INFO("other output: " << unexpected);
  INFO(r.err);
  REQUIRE(r.status == 0);
  CHECK(r.err.find("the run recovered from the loss of rank(s) " + std::to_string(victim)) !=
        std::string::npos);

  const auto summary = nlohmann::json::parse(test::slurp(d / "run" / "summary.json"));
  const auto& churn = summary.at("churn");
  std::vector<int> left;
  for (const Event& e : read_events_csv((d / "run" / "metrics.csv").string()))
    if (e.kind == EventKind::kLeave) left.push_back(e.node);
  CHECK(left == std::vector<int>{victim});
  CHECK(churn.at("leaves") == 1);
  CHECK(churn.at("takeovers") == 1);  // the spare took the lost stage
  CHECK(churn.at("state_transfers").get<int>() >= 1);
  const std::vector<Event> events = read_events_csv((d / "run" / "metrics.csv").string());
  double killed_at = -1;
  for (const Event& e : events)
    if (e.kind == EventKind::kLeave) {
      CHECK(e.node == victim);
      killed_at = e.end;
    }
  REQUIRE(killed_at > 0);
  check_loss_falls(events, killed_at);
  CHECK(summary.at("final").at("test_accuracy").get<double>() > 0.85);
  fs::remove_all(d);
}

// The loss keeps falling: the last losses lie below those just before `killed_at`.
void check_loss_falls(const std::vector<Event>& events, double killed_at) {
  std::vector<std::pair<double, double>> losses;
  for (const Event& e : events)
    if (e.kind == EventKind::kLoss) losses.emplace_back(e.end, e.loss);
  std::sort(losses.begin(), losses.end());
  const auto kill =
      std::lower_bound(losses.begin(), losses.end(), std::make_pair(killed_at, -1e300));
  REQUIRE(kill - losses.begin() >= 20);
  REQUIRE(losses.end() - kill >= 40);
  auto mean = [](auto from, auto to) {
    double s = 0;
    for (auto it = from; it != to; ++it) s += it->second;
    return s / static_cast<double>(to - from);
  };
  const double before = mean(kill - 20, kill), last = mean(losses.end() - 20, losses.end());
  INFO("mean loss before the kill " << before << ", at the end " << last);
  CHECK(last < before);
}

}  // namespace

TEST_CASE("a real run goes on when a rank is killed at a random moment", "[real][recover]") {
  lose_a_rank(SIGKILL, {});
}

TEST_CASE("a real run goes on when a rank stops answering at a random moment", "[real][recover]") {
  // A stopped process keeps its connections open: its peers find it silent (no heartbeats) within
  // the timeout, and the launcher kills it once it has been stopped that long.
  lose_a_rank(SIGSTOP, {"real.timeout_s=4"});
}

TEST_CASE("a replacement process joins a running job and takes the lost stage",
          "[real][recover][join]") {
  // Two clusters of two stages and no spare: the lost stage waits for the replacement. The links
  // are not emulated (a replacement cannot share the launcher's emulator); the devices' speed is.
  const fs::path d = workdir("join");
  std::ofstream(d / "s.toml") << kRecover;
  const fs::path jd = d / "joiner";
  fs::create_directories(jd);
  // The run's secret, given to the launcher and to the replacement alike.
  std::random_device entropy;
  std::mt19937 rng(entropy());
  std::string secret;
  for (int i = 0; i < 32; ++i)
    secret += "0123456789abcdef"[std::uniform_int_distribution<int>(0, 15)(rng)];
  ::setenv("RAVNEST_SECRET", secret.c_str(), 1);
  const std::string port = std::to_string(free_loopback_port());
  const std::vector<std::string> sets = {
      "--set", "devices.0.count=4",          "--set", "devices.0.tflops=0.00004",
      "--set", "real.emulate_network=false", "--set", "real.emulate_speed=true",
      "--set", "real.master_port=" + port};
  std::vector<std::string> args = {"real", "s.toml", "--run-dir", "run", "--progress", "off"};
  args.insert(args.end(), sets.begin(), sets.end());
  const pid_t launcher = test::start_ravnest(args, d);
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (rows_of_kind(d / "run" / "metrics.csv", "update") < 10 &&
         std::chrono::steady_clock::now() < give_up)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  const int victim = std::uniform_int_distribution<int>(1, 3)(rng);
  INFO("rank " << victim << " killed and replaced");
  const pid_t pid = rank_process(launcher, victim);
  REQUIRE(pid > 0);
  REQUIRE(::kill(pid, SIGKILL) == 0);
  // The replacement: refused (exit 2) until the run has taken the rank for lost, then it joins.
  std::vector<std::string> join = {
      "node",         "../s.toml", "--join",        "--rank", std::to_string(victim),
      "--world-size", "4",         "--master-port", port,     "--progress",
      "off"};
  join.insert(join.end(), sets.begin(), sets.end());
  test::Result joined;
  for (int attempt = 0; attempt < 100; ++attempt) {
    joined = test::finish_ravnest(test::start_ravnest(join, jd), jd, 240);
    if (joined.status != 2 || joined.err.find("still in the run") == std::string::npos) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  INFO(joined.err);
  CHECK(joined.status == 0);
  const test::Result r = test::finish_ravnest(launcher, d, 120);
  INFO(r.err);
  REQUIRE(r.status == 0);

  const auto summary = nlohmann::json::parse(test::slurp(d / "run" / "summary.json"));
  const auto& churn = summary.at("churn");
  CHECK(churn.at("leaves") == 1);
  CHECK(churn.at("joins") == 1);
  CHECK(churn.at("takeovers") == 1);  // the replacement took the lost stage
  CHECK(churn.at("state_transfers").get<int>() >= 1);
  const std::vector<Event> events = read_events_csv((d / "run" / "metrics.csv").string());
  double left_at = -1, joined_at = -1;
  int64_t updates_after = 0;
  for (const Event& e : events) {
    if (e.kind == EventKind::kLeave) left_at = e.end;
    if (e.kind == EventKind::kJoin) {
      CHECK(e.node == victim);
      joined_at = e.end;
    }
  }
  REQUIRE(left_at > 0);
  CHECK(joined_at > left_at);
  for (const Event& e : events)
    if (e.kind == EventKind::kUpdate && e.node == victim && e.start > joined_at) ++updates_after;
  CHECK(updates_after >= 20);  // the replacement trained its stage (an averaging period at least)
  check_loss_falls(events, left_at);
  CHECK(summary.at("final").at("test_accuracy").get<double>() > 0.85);

  // A replacement is refused, saying why, where the run does not recover lost ranks.
  std::vector<std::string> refused = join;
  refused.insert(refused.end(), {"--set", "real.on_peer_loss=\"fail\""});
  const test::Result no = test::ravnest(refused, jd);
  CHECK(no.status == 2);
  CHECK(no.err.find("--join replaces a lost rank of a run that recovers") != std::string::npos);
  ::unsetenv("RAVNEST_SECRET");
  fs::remove_all(d);
}

TEST_CASE("a real run that loses rank 0 stops saying why", "[real][recover]") {
  const fs::path d = workdir("rank0");
  std::ofstream(d / "s.toml") << kRecover;
  const test::Result r =
      test::ravnest({"real", "s.toml", "--run-dir", "run", "--progress", "off", "--set",
                     "faults.node=0", "--set", "faults.crash_after_sends=50"},
                    d);
  CHECK(r.status == 1);
  CHECK(r.err.find("rank 0") != std::string::npos);
  CHECK(r.err.find("injected crash") != std::string::npos);
  const auto run = nlohmann::json::parse(test::slurp(d / "run" / "run.json"));
  CHECK(run.at("status") == "failed");
  fs::remove_all(d);
}

TEST_CASE("recovering is refused where the algorithm cannot", "[real][recover]") {
  const fs::path d = workdir("refused");
  std::ofstream(d / "s.toml") << kRecover;
  for (const auto& [set, what] : std::vector<std::pair<std::string, std::string>>{
           {"training.algorithm=\"gpipe\"", "cannot go on without a lost rank"},
           {"training.allreduce=\"single-ring\"", "needs \"multi-ring\""},
           {"training.averaging=\"overlapped\"", "needs \"bulk-sync\""}}) {
    INFO(set);
    const test::Result r = test::ravnest({"real", "s.toml", "--set", set}, d);
    CHECK(r.status == 2);
    CHECK(r.err.find(what) != std::string::npos);
  }
  fs::remove_all(d);
}
