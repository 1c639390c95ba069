#include "real/launcher.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"
#include "core/output/live_run.h"
#include "core/output/provenance.h"
#include "core/output/run_output.h"
#include "emu/emulator_service.h"
#include "exec/wall_env.h"
#include "real/auth.h"
#include "real/auth_store.h"
#include "real/compute_device.h"
#include "real/kernel_network.h"
#include "real/node_process.h"

extern char** environ;

namespace rv {
namespace {

// Seconds granted beyond real.timeout_s to the ranks still running after one failed.
constexpr double kGraceMargin = 2.0;

std::string describe(int status) {
  if (WIFEXITED(status)) return "exited with status " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    const int sig = WTERMSIG(status);
    const char* name = strsignal(sig);
    return "was killed by signal " + std::to_string(sig) +
           (name ? std::string(" (") + name + ")" : "");
  }
  return "stopped with status " + std::to_string(status);
}

bool failed(int status) { return !WIFEXITED(status) || WEXITSTATUS(status) != 0; }

// SIGINT, SIGTERM and SIGHUP while a run is under way: the handler only notes the signal; the
// wait loop sees it, and the run ends by an exception (rv::Interrupted), so that every destructor
// runs: children killed, temporary folders removed, network namespaces deleted.
volatile sig_atomic_t g_signal = 0;
extern "C" void note_signal(int sig) { g_signal = sig; }

class SignalGuard {
 public:
  SignalGuard() {
    g_signal = 0;
    struct sigaction sa {};
    sa.sa_handler = note_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = 0;  // no SA_RESTART: a blocking call returns EINTR
    // A signal the caller ignores (nohup: SIGHUP) stays ignored, here and in the ranks.
    for (size_t i = 0; i < kSignals.size(); ++i) {
      sigaction(kSignals[i], nullptr, &old_[i]);
      if (old_[i].sa_handler != SIG_IGN) sigaction(kSignals[i], &sa, nullptr);
    }
  }
  ~SignalGuard() {
    for (size_t i = 0; i < kSignals.size(); ++i) sigaction(kSignals[i], &old_[i], nullptr);
  }
  SignalGuard(const SignalGuard&) = delete;
  SignalGuard& operator=(const SignalGuard&) = delete;
  static void check() {
    if (const int sig = g_signal; sig != 0) throw Interrupted(sig);
  }

 private:
  static constexpr std::array<int, 3> kSignals = {SIGINT, SIGTERM, SIGHUP};
  std::array<struct sigaction, 3> old_{};
};

// Whether process `pid` is stopped (SIGSTOP, SIGTSTP; or traced), from /proc/<pid>/stat.
bool is_stopped(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(in, line)) return false;
  const size_t paren = line.rfind(')');
  if (paren == std::string::npos || paren + 2 >= line.size()) return false;
  const char state = line[paren + 2];
  return state == 'T' || state == 't';
}

// The children of one run. The destructor kills and reaps whatever still runs, so no child outlives
// the launcher's scope, whatever is thrown.
class Children {
 public:
  ~Children() { kill_all(); }

  // `log`: a file for the child's standard output and error ("": this process's).
  void spawn(int rank, const std::string& exe, const std::vector<std::string>& args, char** env,
             const std::string& log = "") {
    std::vector<char*> argv;
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    pid_t pid = 0;
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    if (!log.empty()) {
      posix_spawn_file_actions_addopen(&actions, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                       0644);
      posix_spawn_file_actions_adddup2(&actions, 1, 2);
    }
    const int rc = posix_spawn(&pid, exe.c_str(), &actions, nullptr, argv.data(), env);
    posix_spawn_file_actions_destroy(&actions);
    if (rc != 0) {
      throw Error("cannot start " + exe + " for rank " + std::to_string(rank) + ": " +
                  std::strerror(rc));
    }
    running_[pid] = rank;
  }

  bool empty() const { return running_.empty(); }
  // The running ranks whose processes are stopped now.
  std::vector<int> stopped_ranks() const {
    std::vector<int> r;
    for (const auto& [pid, rank] : running_)
      if (is_stopped(pid)) r.push_back(rank);
    return r;
  }
  std::vector<int> running_ranks() const {
    std::vector<int> r;
    for (const auto& [pid, rank] : running_) r.push_back(rank);
    return r;
  }

  // Reaps one child: blocks (block = true) or not; returns {rank, status}, or rank -1 if none.
  // Children of this process that are not ours are reaped and ignored (the CLI has none).
  std::pair<int, int> reap(bool block) {
    for (;;) {
      int status = 0;
      const pid_t pid = waitpid(-1, &status, block ? 0 : WNOHANG);
      if (pid == 0) return {-1, 0};
      if (pid < 0) {
        if (errno == EINTR) continue;
        running_.clear();  // ECHILD: nothing left to wait for
        return {-1, 0};
      }
      auto it = running_.find(pid);
      if (it == running_.end()) continue;
      const int rank = it->second;
      running_.erase(it);
      return {rank, status};
    }
  }

  // Kills rank `rank` (it is reaped like any child that ends).
  void kill_rank(int rank) {
    for (const auto& [pid, r] : running_)
      if (r == rank) kill(pid, SIGKILL);
  }

  void kill_all() {
    for (const auto& [pid, rank] : running_) kill(pid, SIGKILL);
    for (const auto& [pid, rank] : running_) {
      while (waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
      }
    }
    running_.clear();
  }

 private:
  std::map<pid_t, int> running_;  // pid -> rank
};

// A temporary file (or folder), removed at the end of the scope.
class TempPath {
 public:
  explicit TempPath(bool folder) {
    std::string pattern = (std::filesystem::temp_directory_path() / "ravnest-real-XXXXXX").string();
    if (folder) {
      if (mkdtemp(pattern.data()) == nullptr) {
        throw Error(std::string("cannot create a temporary folder: ") + std::strerror(errno));
      }
    } else {
      const int fd = mkstemp(pattern.data());
      if (fd < 0) {
        throw Error(std::string("cannot create a temporary file: ") + std::strerror(errno));
      }
      ::close(fd);
    }
    path_ = pattern;
  }
  ~TempPath() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// What a failed child left in the status folder (see node_process.h): class and message.
struct ChildReport {
  std::string kind;  // input | peer | error, or "" if it left nothing (e.g. killed by a signal)
  std::string message;
};

ChildReport read_report(const std::string& dir, int rank) {
  ChildReport r;
  std::ifstream in(std::filesystem::path(dir) / ("rank-" + std::to_string(rank)));
  if (!in) return r;
  std::getline(in, r.kind);
  std::getline(in, r.message);
  return r;
}

std::string seconds_str(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", s);
  return buf;
}

}  // namespace

std::pair<int, int> ranks_of_machine(int world, int nnodes, int node_rank) {
  const auto at = [&](int k) { return static_cast<int>(static_cast<int64_t>(world) * k / nnodes); };
  return {at(node_rank), at(node_rank + 1)};
}

namespace {

// "HOST:PORT" (a bracketed IPv6 "[::1]:PORT" too) of --rdzv-endpoint.
std::pair<std::string, int> parse_endpoint(const std::string& endpoint) {
  const size_t colon = endpoint.rfind(':');
  std::string host = colon == std::string::npos ? "" : endpoint.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']')
    host = host.substr(1, host.size() - 2);
  const std::string port_text = colon == std::string::npos ? "" : endpoint.substr(colon + 1);
  int port = 0;
  const bool digits =
      !port_text.empty() && port_text.size() <= 5 &&
      std::all_of(port_text.begin(), port_text.end(), [](char c) { return c >= '0' && c <= '9'; });
  if (digits) port = std::stoi(port_text);
  if (host.empty() || !digits || port < 1 || port > 65535)
    throw InputError("--rdzv-endpoint " + endpoint +
                     ": expected HOST:PORT, an address of machine 0 and a port 1-65535");
  return {host, port};
}

}  // namespace

std::string run_real(const Scenario& scenario, const LaunchOptions& options) {
  const int world = scenario.node_count();
  if (world < 1) throw InputError(scenario.source + ": the scenario has no nodes");
  // Several machines (--nnodes): this one's share of the ranks, the rendezvous at machine 0.
  const bool spread = options.machines.nnodes > 1;
  if (options.machines.nnodes < 1 || options.machines.nnodes > world)
    throw InputError("--nnodes " + std::to_string(options.machines.nnodes) +
                     ": between 1 and the scenario's " + std::to_string(world) + " nodes");
  if (options.machines.node_rank < 0 || options.machines.node_rank >= options.machines.nnodes)
    throw InputError("--node-rank " + std::to_string(options.machines.node_rank) +
                     ": between 0 and --nnodes - 1");
  if (spread && options.machines.rdzv_endpoint.empty())
    throw InputError("--nnodes " + std::to_string(options.machines.nnodes) +
                     ": give --rdzv-endpoint HOST:PORT, machine 0's address");
  if (!spread && !options.machines.rdzv_endpoint.empty())
    throw InputError(
        "--rdzv-endpoint: only with --nnodes 2 or more (one machine meets at real.master_addr)");
  const auto [first_rank, last_rank] =
      ranks_of_machine(world, options.machines.nnodes, options.machines.node_rank);
  for (int r = first_rank; r < last_rank; ++r)
    compute_device(scenario, r);  // real.device: refused before any start
  const bool has_rank0 = first_rank == 0;
  std::pair<std::string, int> endpoint;
  if (spread) endpoint = parse_endpoint(options.machines.rdzv_endpoint);
  // Spread over machines, every one needs the run's secret (real/auth.h): read it before any
  // process starts. On one machine it is new for the run, unless the environment gives one (so that
  // a replacement, `ravnest node --join`, can prove it too).
  const bool given_secret = auth::secret_in_environment();
  const std::string shared_secret =
      spread || given_secret ? auth::secret_from_environment() : std::string();
  SignalGuard signals;
  const std::string run_path =
      options.run_path.empty() ? new_run_path(scenario, "real") : options.run_path;
  TempPath result(false);
  TempPath status_dir(true);

  // The network emulator every node's sends go through (real.emulate_network): the user-space
  // star, or the kernel's shaped links with the latencies in user space.
  if (!scenario.network.platform.empty())
    throw ScenarioError(
        scenario.where("network.platform"), "network.platform",
        "a SimGrid platform file is for the simulator (ravnest sim): real runs emulate the "
        "devices' own links");
  const bool emulate = emulates_network(scenario, !spread);
  if (emulate && scenario.real.shaper == Shaper::kKernel &&
      scenario.network.topology == Topology::kRegions)
    throw ScenarioError(
        scenario.where("real.shaper"), "real.shaper",
        "the kernel shaper builds a star only: use shaper = \"user\" under network.topology = "
        "\"regions\" (its emulator shares each link between regions among the processes)");
  std::optional<KernelNetwork> kernel;
  if (emulate && scenario.real.shaper == Shaper::kKernel) kernel.emplace(scenario);
  // (Under the kernel shaper each receiver adds the links' latency itself: emu/arrival_latency.h.)
  WallClock emulator_clock;
  std::optional<EmulatorServer> emulator;
  if (emulate && !kernel) {
    emulator.emplace((std::filesystem::path(status_dir.path()) / "emulator.sock").string(),
                     links_of(scenario), emulator_clock);
    emulator->start();
  }
  // Every rank is on this machine: the scenario's address (127.0.0.1 by default) must be one of
  // its own, or the store cannot bind it.
  const std::string master_addr = kernel   ? kernel->address_of(0)
                                  : spread ? endpoint.first
                                           : scenario.real.master_addr;
  // The run's secret (real/auth.h), new for this run unless given, in a file only this user can
  // read (the status folder is private too: mkdtemp makes it 0700).
  const std::string secret = spread || given_secret ? shared_secret : auth::new_secret();
  const std::string secret_file = (std::filesystem::path(status_dir.path()) / "secret").string();
  auth::write_secret_file(secret_file, secret);
  // The rendezvous store: served here, on a port bound before any rank starts (0: whatever the
  // system gives), so that no other process can take it in between. Under the kernel shaper,
  // rank 0 hosts it in its own network namespace, where no other process runs, at the scenario's
  // port (29500 for 0).
  std::optional<AuthStoreServer> store;
  int port = spread                           ? endpoint.second
             : scenario.real.master_port != 0 ? scenario.real.master_port
                                              : 29500;
  if (!kernel && has_rank0) {
    store.emplace(secret, master_addr, spread ? endpoint.second : scenario.real.master_port);
    port = store->port();
  }

  // The children's environment: ours, plus the launcher's pid (they die with it).
  std::vector<std::string> env_strings;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    const std::string var(*e);
    auto is = [&](const char* name) { return var.rfind(std::string(name) + "=", 0) == 0; };
    if (!is(kLauncherPidEnv) && !is(kStatusDirEnv) && !is(kEmulatorSocketEnv) &&
        !is(kStoreHostedEnv) && !is(auth::kSecretEnv) && !is(auth::kSecretFileEnv) &&
        !is(kCommandLineEnv)) {
      env_strings.push_back(var);
    }
  }
  env_strings.push_back(std::string(kLauncherPidEnv) + "=" + std::to_string(getpid()));
  env_strings.push_back(std::string(kCommandLineEnv) + "=" +
                        this_command_line());  // rank 0 records it
  env_strings.push_back(std::string(kStatusDirEnv) + "=" + status_dir.path());
  env_strings.push_back(std::string(auth::kSecretFileEnv) + "=" + secret_file);
  if (store) env_strings.push_back(std::string(kStoreHostedEnv) + "=1");
  if (!spread) {
    env_strings.push_back(std::string(kAllRanksHereEnv) + "=1");
  } else {
    // This machine's cores are shared among its own ranks (as torchrun's LOCAL_WORLD_SIZE says).
    env_strings.erase(
        std::remove_if(env_strings.begin(), env_strings.end(),
                       [](const std::string& v) { return v.rfind("LOCAL_WORLD_SIZE=", 0) == 0; }),
        env_strings.end());
    env_strings.push_back("LOCAL_WORLD_SIZE=" + std::to_string(last_rank - first_rank));
  }
  if (emulator) env_strings.push_back(std::string(kEmulatorSocketEnv) + "=" + emulator->path());
  if (kernel) {
    // Gloo binds each node's own interface (one name in every namespace).
    env_strings.erase(
        std::remove_if(env_strings.begin(), env_strings.end(),
                       [](const std::string& v) { return v.rfind("GLOO_SOCKET_IFNAME=", 0) == 0; }),
        env_strings.end());
    env_strings.push_back(std::string("GLOO_SOCKET_IFNAME=") + KernelNetwork::kInterface);
  }
  std::vector<char*> env;
  for (auto& s : env_strings) env.push_back(s.data());
  env.push_back(nullptr);

  Children children;
  if (!options.machines.log_dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(options.machines.log_dir, ec);
    if (ec)
      throw InputError(options.machines.log_dir + ": cannot make the log folder: " + ec.message());
  }
  for (int rank = first_rank; rank < last_rank; ++rank) {
    std::vector<std::string> args = {options.self_exe, "node", options.scenario_path};
    for (const auto& o : options.overrides) args.insert(args.end(), {"--set", o});
    args.insert(args.end(), options.node_args.begin(), options.node_args.end());
    args.insert(args.end(), {"--rank", std::to_string(rank), "--world-size", std::to_string(world),
                             "--master-addr", master_addr, "--master-port", std::to_string(port),
                             "--timeout", seconds_str(scenario.peer_timeout_s())});
    // Every rank appends its rows to the run folder as it goes; rank 0 makes it and finishes it
    // (on machine 0: the other machines' ranks hand their rows to rank 0 at the end).
    if (has_rank0) args.insert(args.end(), {"--run-path", run_path});
    if (rank == 0)
      args.insert(args.end(), {"--result-file", result.path(), "--progress", options.progress});
    if (kernel) {
      const std::vector<std::string> wrapped = kernel->wrap(rank, args);
      children.spawn(rank, wrapped[0], wrapped, env.data());
    } else {
      children.spawn(rank, options.self_exe, args, env.data(),
                     options.machines.log_dir.empty()
                         ? std::string()
                         : (std::filesystem::path(options.machines.log_dir) /
                            ("rank-" + std::to_string(rank) + ".log"))
                               .string());
    }
  }

  // Wait for all; after the first failure, the others get timeout_s to notice and stop, and
  // those still running a while after the last one ended (half the timeout, at least the grace
  // margin: ranks that lost a peer end at about the same moment) are taken for stopped or hung.
  std::vector<std::pair<int, int>> failures;  // (rank, wait status), in the order they ended
  std::chrono::steady_clock::time_point deadline, last_end;
  const auto settle = std::chrono::milliseconds(static_cast<int64_t>(
      std::max(kGraceMargin, std::min(scenario.peer_timeout_s(), 1e7) / 2) * 1000));
  // A rank stopped (SIGSTOP, SIGTSTP) for longer than the timeout is taken for gone even when no
  // rank can notice (all of them stopped): the launcher never waits forever.
  const auto timeout = std::chrono::milliseconds(
      static_cast<int64_t>(std::min(scenario.peer_timeout_s(), 1e7) * 1000));
  std::map<int, std::chrono::steady_clock::time_point> stopped_since;
  std::vector<int> stopped;  // ranks stopped for longer than the timeout
  // real.on_peer_loss = "recover": a rank other than 0 that ends badly (not on bad input) is lost,
  // and the run goes on without it.
  const bool recover = scenario.real.on_peer_loss == PeerLoss::kRecover;
  std::vector<int> lost;
  auto next_probe = std::chrono::steady_clock::now();
  while (!children.empty()) {
    try {
      SignalGuard::check();
    } catch (const Interrupted& e) {
      // The ranks go first, so that rank 0 writes no more; the folder keeps its rows, marked.
      children.kill_all();
      mark_run(run_path, "interrupted", e.what());
      throw;
    }
    const std::pair<int, int> r = children.reap(false);
    if (r.first < 0) {
      if (children.empty()) break;
      const auto now = std::chrono::steady_clock::now();
      if (!failures.empty() && (now >= deadline || now >= last_end + settle)) break;
      if (now >= next_probe) {
        next_probe = now + std::chrono::milliseconds(250);
        const std::vector<int> now_stopped = children.stopped_ranks();
        for (auto it = stopped_since.begin(); it != stopped_since.end();) {
          if (std::find(now_stopped.begin(), now_stopped.end(), it->first) == now_stopped.end())
            it = stopped_since.erase(it);
          else
            ++it;
        }
        for (int rank : now_stopped) {
          const auto since = stopped_since.emplace(rank, now).first->second;
          if (now - since < timeout) continue;
          if (recover && rank != 0) {
            // Recovering: the others have taken it for lost (its heartbeats stopped); it goes.
            children.kill_rank(rank);
            stopped_since.erase(rank);
          } else {
            stopped.push_back(rank);
          }
        }
        if (!stopped.empty()) break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      continue;
    }
    last_end = std::chrono::steady_clock::now();
    if (!failed(r.second)) continue;
    if (recover && r.first != 0 && read_report(status_dir.path(), r.first).kind != "input" &&
        !(WIFEXITED(r.second) && WEXITSTATUS(r.second) == 2)) {
      lost.push_back(r.first);
      std::cerr << "ravnest real: rank " << r.first << " " << describe(r.second)
                << "; the run goes on without it\n";
      continue;
    }
    if (failures.empty()) {
      // timeout_s, plus a margin for the ranks' own timeouts, which began a little later.
      deadline = std::chrono::steady_clock::now() +
                 std::chrono::milliseconds(static_cast<int64_t>(
                     (std::min(scenario.peer_timeout_s(), 1e7) + kGraceMargin) * 1000));
    }
    failures.push_back(r);
  }
  std::string killed;
  for (int rank : children.running_ranks()) {
    killed += (killed.empty() ? "" : ", ") + std::to_string(rank);
  }
  children.kill_all();

  if (failures.empty() && !stopped.empty()) {
    std::string which;
    for (int rank : stopped) which += (which.empty() ? "" : ", ") + std::to_string(rank);
    mark_run_failed(
        run_path,
        "rank(s) " + which + " stayed stopped for more than the timeout; every rank was killed");
    throw PeerError("real run failed: rank(s) " + which +
                    " stayed stopped (a stop signal) for more than the timeout of " +
                    seconds_str(scenario.peer_timeout_s()) +
                    " s, and no rank ended; every rank was killed");
  }
  if (!failures.empty()) {
    // The root cause: the first rank to fail on its own (not with a PeerError, which a lost or
    // silent peer causes); if every rank failed with one, the first to end.
    size_t root = 0;
    std::vector<ChildReport> reports;
    for (const auto& f : failures) reports.push_back(read_report(status_dir.path(), f.first));
    for (size_t i = 0; i < failures.size(); ++i) {
      if (reports[i].kind != "peer") {
        root = i;
        break;
      }
    }
    const auto [rank, status] = failures[root];
    std::string what;
    if (reports[root].kind == "peer" && !killed.empty()) {
      // Every rank that ended lost a peer, and some never ended: those are the cause (stopped or
      // hung), not the first rank to notice.
      what = "real run failed: rank(s) " + killed +
             " stopped answering (stopped or hung; killed); the "
             "others lost them: rank " +
             std::to_string(rank) + " " + describe(status);
      killed.clear();
    } else {
      what = "real run failed: rank " + std::to_string(rank) + " " + describe(status);
    }
    if (!reports[root].message.empty()) what += ": " + reports[root].message;
    if (emulator && !emulator->error().empty()) what += " (" + emulator->error() + ")";
    if (failures.size() > 1) {
      std::string others;
      for (size_t i = 0; i < failures.size(); ++i) {
        if (i != root) others += (others.empty() ? "" : ", ") + std::to_string(failures[i].first);
      }
      what += " (rank(s) " + others + " stopped as well)";
    }
    if (!killed.empty()) what += "; rank(s) " + killed + " were still running and were killed";
    // A run that finished before the failure keeps its folder (rank 0 wrote it, and marked it).
    std::string finished;
    std::getline(std::ifstream(result.path()) >> std::ws, finished);
    if (!finished.empty() && std::filesystem::exists(finished))
      what += "; the run had finished: its folder is kept, marked with " +
              std::string(kShutdownMark) + ": " + finished;
    // The folder of a run that did not finish says why (its writer, rank 0, may have been killed
    // and left "running", or have said only that it lost a peer).
    if (finished.empty()) mark_run_failed(run_path, what);
    if (reports[root].kind == "input" || (WIFEXITED(status) && WEXITSTATUS(status) == 2)) {
      throw InputError(what);
    }
    throw PeerError(what);
  }
  if (!lost.empty()) {
    std::string which;
    for (int rank : lost) which += (which.empty() ? "" : ", ") + std::to_string(rank);
    std::cerr << "ravnest real: the run recovered from the loss of rank(s) " << which << "\n";
  }
  if (!has_rank0) return "";
  std::ifstream in(result.path());
  std::string path;
  std::getline(in, path);
  if (path.empty()) throw Error("real run: rank 0 finished without naming its run folder");
  return path;
}

}  // namespace rv
