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
#include <tuple>
#include <vector>

#include "core/error.h"
#include "core/output/live_run.h"
#include "core/output/provenance.h"
#include "core/output/run_output.h"
#include "core/spawn.h"
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
    pid_t pid = 0;
    try {
      pid = spawn_process(exe, args, {.output_file = log, .env = env});
    } catch (const Error& e) {
      throw Error(std::string(e.what()) + " (rank " + std::to_string(rank) + ")");
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
  RankFailure kind = RankFailure::kNone;
  std::string message;
};

ChildReport read_report(const std::string& dir, int rank) {
  ChildReport r;
  std::ifstream in(std::filesystem::path(dir) / ("rank-" + std::to_string(rank)));
  if (!in) return r;
  std::string kind;
  std::getline(in, kind);
  // A word this launcher does not know (another version's rank) counts as an error.
  r.kind = choice_of<RankFailure>(kind).value_or(RankFailure::kError);
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

// The ranks, comma-separated.
std::string rank_list(const std::vector<int>& ranks) {
  std::string list;
  for (int rank : ranks) list += (list.empty() ? "" : ", ") + std::to_string(rank);
  return list;
}

// This machine's share of the run (Machines): its ranks and, spread over several machines, the
// rendezvous at machine 0.
struct MachineShare {
  bool spread = false;  // --nnodes 2 or more
  int first_rank = 0;   // this machine starts ranks [first_rank, last_rank)
  int last_rank = 0;
  bool has_rank0 = false;
  std::pair<std::string, int> endpoint;  // --rdzv-endpoint's host and port (spread only)
};

// Checks the options of several machines and this machine's ranks' real.device before any
// process starts; rv::InputError naming the option otherwise.
MachineShare machine_share(const Scenario& scenario, const Machines& machines) {
  const int world = scenario.node_count();
  if (world < 1) throw InputError(scenario.source + ": the scenario has no nodes");
  MachineShare share;
  share.spread = machines.nnodes > 1;
  if (machines.nnodes < 1 || machines.nnodes > world)
    throw InputError("--nnodes " + std::to_string(machines.nnodes) +
                     ": between 1 and the scenario's " + std::to_string(world) + " nodes");
  if (machines.node_rank < 0 || machines.node_rank >= machines.nnodes)
    throw InputError("--node-rank " + std::to_string(machines.node_rank) +
                     ": between 0 and --nnodes - 1");
  if (share.spread && machines.rdzv_endpoint.empty())
    throw InputError("--nnodes " + std::to_string(machines.nnodes) +
                     ": give --rdzv-endpoint HOST:PORT, machine 0's address");
  if (!share.spread && !machines.rdzv_endpoint.empty())
    throw InputError(
        "--rdzv-endpoint: only with --nnodes 2 or more (one machine meets at real.master_addr)");
  std::tie(share.first_rank, share.last_rank) =
      ranks_of_machine(world, machines.nnodes, machines.node_rank);
  for (int r = share.first_rank; r < share.last_rank; ++r)
    compute_device(scenario, r);  // real.device: refused before any start
  share.has_rank0 = share.first_rank == 0;
  if (share.spread) share.endpoint = parse_endpoint(machines.rdzv_endpoint);
  return share;
}

// Whether every node's sends go through the network emulator (real.emulate_network): the
// user-space star, or the kernel's shaped links with the latencies in user space. rv::ScenarioError
// for a network a real run cannot emulate.
bool check_emulation(const Scenario& scenario, bool spread) {
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
  return emulate;
}

// What this machine's ranks share, made before any of them starts, in the order of the members
// (and destroyed in reverse): the network emulator (`emulate`), the run's secret in a file of the
// status folder, and the rendezvous store.
struct Services {
  Services(const Scenario& scenario, const MachineShare& share, bool emulate,
           const std::string& status_dir, const std::string& shared_secret, bool given_secret);

  std::optional<KernelNetwork> kernel;  // real.shaper = "kernel"
  WallClock emulator_clock;
  std::optional<EmulatorServer> emulator;  // the user-space shaper's
  std::string master_addr;                 // where the ranks meet
  std::string secret_file;
  // Served here unless rank 0 hosts it (the kernel shaper) or another machine holds rank 0.
  std::optional<AuthStoreServer> store;
  int port = 0;  // the store's
};

Services::Services(const Scenario& scenario, const MachineShare& share, bool emulate,
                   const std::string& status_dir, const std::string& shared_secret,
                   bool given_secret) {
  if (emulate && scenario.real.shaper == Shaper::kKernel) kernel.emplace(scenario);
  if (emulate && !kernel) {
    emulator.emplace((std::filesystem::path(status_dir) / "emulator.sock").string(),
                     links_of(scenario), emulator_clock);
    emulator->start();
  }
  // Every rank is on this machine: the scenario's address (127.0.0.1 by default) must be one of
  // its own, or the store cannot bind it.
  master_addr = kernel         ? kernel->address_of(0)
                : share.spread ? share.endpoint.first
                               : scenario.real.master_addr;
  // The run's secret (real/auth.h), new for this run unless given, in a file only this user can
  // read (the status folder is private too: mkdtemp makes it 0700).
  const std::string secret = share.spread || given_secret ? shared_secret : auth::new_secret();
  secret_file = (std::filesystem::path(status_dir) / "secret").string();
  auth::write_secret_file(secret_file, secret);
  // The rendezvous store: served here, on a port bound before any rank starts (0: whatever the
  // system gives), so that no other process can take it in between. Under the kernel shaper,
  // rank 0 hosts it in its own network namespace, where no other process runs, at the scenario's
  // port (29500 for 0).
  port = share.spread                     ? share.endpoint.second
         : scenario.real.master_port != 0 ? scenario.real.master_port
                                          : 29500;
  if (!kernel && share.has_rank0) {
    store.emplace(secret, master_addr,
                  share.spread ? share.endpoint.second : scenario.real.master_port);
    port = store->port();
  }
}

// The children's environment: ours, plus the launcher's pid (they die with it), the status
// folder, the secret's file, and what the ranks of this machine share.
std::vector<std::string> child_environment(const MachineShare& share, const Services& services,
                                           const std::string& status_dir) {
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
  env_strings.push_back(std::string(kStatusDirEnv) + "=" + status_dir);
  env_strings.push_back(std::string(auth::kSecretFileEnv) + "=" + services.secret_file);
  if (services.store) env_strings.push_back(std::string(kStoreHostedEnv) + "=1");
  if (!share.spread) {
    env_strings.push_back(std::string(kAllRanksHereEnv) + "=1");
  } else {
    // This machine's cores are shared among its own ranks (as torchrun's LOCAL_WORLD_SIZE says).
    env_strings.erase(
        std::remove_if(env_strings.begin(), env_strings.end(),
                       [](const std::string& v) { return v.rfind("LOCAL_WORLD_SIZE=", 0) == 0; }),
        env_strings.end());
    env_strings.push_back("LOCAL_WORLD_SIZE=" + std::to_string(share.last_rank - share.first_rank));
  }
  if (services.emulator)
    env_strings.push_back(std::string(kEmulatorSocketEnv) + "=" + services.emulator->path());
  if (services.kernel) {
    // Gloo binds each node's own interface (one name in every namespace).
    env_strings.erase(
        std::remove_if(env_strings.begin(), env_strings.end(),
                       [](const std::string& v) { return v.rfind("GLOO_SOCKET_IFNAME=", 0) == 0; }),
        env_strings.end());
    env_strings.push_back(std::string("GLOO_SOCKET_IFNAME=") + KernelNetwork::kInterface);
  }
  return env_strings;
}

// Where the ranks of a run write what the launcher reads: rank 0's run folder and the file where
// it names it, and the status folder of failed ranks' reports (node_process.h).
struct RunFiles {
  std::string run_path;
  std::string result;
  std::string status_dir;
};

// Rank `rank`'s `ravnest node` command line.
std::vector<std::string> rank_command(int rank, const Scenario& scenario,
                                      const LaunchOptions& options, const MachineShare& share,
                                      const Services& services, const RunFiles& files) {
  std::vector<std::string> args = {options.self_exe, "node", options.scenario_path};
  for (const auto& o : options.overrides) args.insert(args.end(), {"--set", o});
  args.insert(args.end(), options.node_args.begin(), options.node_args.end());
  args.insert(args.end(), {"--rank", std::to_string(rank), "--world-size",
                           std::to_string(scenario.node_count()), "--master-addr",
                           services.master_addr, "--master-port", std::to_string(services.port),
                           "--timeout", seconds_str(scenario.peer_timeout_s())});
  // Every rank appends its rows to the run folder as it goes; rank 0 makes it and finishes it
  // (on machine 0: the other machines' ranks hand their rows to rank 0 at the end).
  if (share.has_rank0) args.insert(args.end(), {"--run-path", files.run_path});
  if (rank == 0)
    args.insert(args.end(),
                {"--result-file", files.result, "--progress", name_of(options.progress)});
  return args;
}

// Makes the log folder (--log-dir), if any, then starts this machine's ranks, in rank order.
void start_ranks(Children& children, const Scenario& scenario, const LaunchOptions& options,
                 const MachineShare& share, const Services& services, const RunFiles& files,
                 char** env) {
  if (!options.machines.log_dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(options.machines.log_dir, ec);
    if (ec)
      throw InputError(options.machines.log_dir + ": cannot make the log folder: " + ec.message());
  }
  for (int rank = share.first_rank; rank < share.last_rank; ++rank) {
    const std::vector<std::string> args =
        rank_command(rank, scenario, options, share, services, files);
    if (services.kernel) {
      const std::vector<std::string> wrapped = services.kernel->wrap(rank, args);
      children.spawn(rank, wrapped[0], wrapped, env);
    } else {
      children.spawn(rank, options.self_exe, args, env,
                     options.machines.log_dir.empty()
                         ? std::string()
                         : (std::filesystem::path(options.machines.log_dir) /
                            ("rank-" + std::to_string(rank) + ".log"))
                               .string());
    }
  }
}

// How this machine's ranks ended.
struct Ending {
  std::vector<std::pair<int, int>> failures;  // (rank, wait status), in the order they ended
  std::vector<int> stopped;                   // ranks stopped for longer than the timeout
  std::vector<int> lost;  // recovering: ranks that ended badly, which the run went on without
};

// Waits for the children of a run. After the first failure, the others get timeout_s to notice
// and stop, and those still running a while after the last one ended (half the timeout, at least
// the grace margin: ranks that lost a peer end at about the same moment) are taken for stopped or
// hung. A rank stopped (SIGSTOP, SIGTSTP) for longer than the timeout is taken for gone even when
// no rank can notice (all of them stopped): the launcher never waits forever. Under
// real.on_peer_loss = "recover", a rank other than 0 that ends badly (not on bad input) is lost,
// and the run goes on without it.
class RankWaiter {
 public:
  RankWaiter(Children& children, const Scenario& scenario, const RunFiles& files)
      : children_(children),
        files_(files),
        peer_timeout_s_(scenario.peer_timeout_s()),
        settle_(std::chrono::milliseconds(static_cast<int64_t>(
            std::max(kGraceMargin, std::min(peer_timeout_s_, 1e7) / 2) * 1000))),
        timeout_(
            std::chrono::milliseconds(static_cast<int64_t>(std::min(peer_timeout_s_, 1e7) * 1000))),
        recover_(scenario.real.on_peer_loss == PeerLoss::kRecover) {}

  // Returns once every child ended, or the ones left are to be killed. rv::Interrupted on a
  // signal (SignalGuard), once the children are killed and the run folder marked.
  Ending wait() {
    while (!children_.empty()) {
      check_signal();
      const std::pair<int, int> r = children_.reap(false);
      if (r.first >= 0) {
        ended(r.first, r.second);
        continue;
      }
      if (children_.empty() || done_waiting()) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return std::move(out_);
  }

 private:
  using TimePoint = std::chrono::steady_clock::time_point;

  void check_signal() {
    try {
      SignalGuard::check();
    } catch (const Interrupted& e) {
      // The ranks go first, so that rank 0 writes no more; the folder keeps its rows, marked.
      children_.kill_all();
      mark_run(files_.run_path, "interrupted", e.what());
      throw;
    }
  }

  // Rank `rank` ended with wait status `status`.
  void ended(int rank, int status) {
    last_end_ = std::chrono::steady_clock::now();
    if (!failed(status)) return;
    if (recover_ && rank != 0 && read_report(files_.status_dir, rank).kind != RankFailure::kInput &&
        !(WIFEXITED(status) && WEXITSTATUS(status) == 2)) {
      out_.lost.push_back(rank);
      std::cerr << "ravnest real: rank " << rank << " " << describe(status)
                << "; the run goes on without it\n";
      return;
    }
    if (out_.failures.empty()) {
      // timeout_s, plus a margin for the ranks' own timeouts, which began a little later.
      deadline_ = std::chrono::steady_clock::now() +
                  std::chrono::milliseconds(
                      static_cast<int64_t>((std::min(peer_timeout_s_, 1e7) + kGraceMargin) * 1000));
    }
    out_.failures.emplace_back(rank, status);
  }

  // No rank ended just now: whether to stop waiting (after a failure, at the deadline or once
  // the others settled; or a rank stayed stopped too long). Looks for stopped ranks every 250 ms.
  bool done_waiting() {
    const auto now = std::chrono::steady_clock::now();
    if (!out_.failures.empty() && (now >= deadline_ || now >= last_end_ + settle_)) return true;
    if (now < next_probe_) return false;
    next_probe_ = now + std::chrono::milliseconds(250);
    probe_stopped(now);
    return !out_.stopped.empty();
  }

  // Notes which ranks are stopped now, and since when; those stopped longer than the timeout
  // are killed (recovering, but rank 0) or added to out_.stopped.
  void probe_stopped(TimePoint now) {
    const std::vector<int> now_stopped = children_.stopped_ranks();
    for (auto it = stopped_since_.begin(); it != stopped_since_.end();) {
      if (std::find(now_stopped.begin(), now_stopped.end(), it->first) == now_stopped.end())
        it = stopped_since_.erase(it);
      else
        ++it;
    }
    for (int rank : now_stopped) {
      const auto since = stopped_since_.emplace(rank, now).first->second;
      if (now - since < timeout_) continue;
      if (recover_ && rank != 0) {
        // Recovering: the others have taken it for lost (its heartbeats stopped); it goes.
        children_.kill_rank(rank);
        stopped_since_.erase(rank);
      } else {
        out_.stopped.push_back(rank);
      }
    }
  }

  Children& children_;
  const RunFiles& files_;
  const double peer_timeout_s_;
  const std::chrono::milliseconds settle_;
  const std::chrono::milliseconds timeout_;
  const bool recover_;
  Ending out_;
  TimePoint deadline_, last_end_;
  TimePoint next_probe_ = std::chrono::steady_clock::now();
  std::map<int, TimePoint> stopped_since_;
};

// Ranks stopped for longer than the timeout, and no rank ended: marks the run folder and throws
// rv::PeerError.
[[noreturn]] void throw_stopped(const std::vector<int>& stopped, const Scenario& scenario,
                                const std::string& run_path) {
  const std::string which = rank_list(stopped);
  mark_run_failed(run_path, "rank(s) " + which +
                                " stayed stopped for more than the timeout; every rank was killed");
  throw PeerError("real run failed: rank(s) " + which +
                  " stayed stopped (a stop signal) for more than the timeout of " +
                  seconds_str(scenario.peer_timeout_s()) +
                  " s, and no rank ended; every rank was killed");
}

// The error of a run in which ranks failed, naming the root cause: the first rank to fail on its
// own (not with a PeerError, which a lost or silent peer causes); if every rank failed with one,
// the first to end. `killed`: the ranks still running, killed. Marks the run folder failed unless
// the run had finished, and throws rv::InputError if the root cause was bad input, else
// rv::PeerError.
[[noreturn]] void throw_failure(const std::vector<std::pair<int, int>>& failures,
                                std::string killed, const RunFiles& files,
                                const EmulatorServer* emulator) {
  size_t root = 0;
  std::vector<ChildReport> reports;
  for (const auto& f : failures) reports.push_back(read_report(files.status_dir, f.first));
  for (size_t i = 0; i < failures.size(); ++i) {
    if (reports[i].kind != RankFailure::kPeer) {
      root = i;
      break;
    }
  }
  const auto [rank, status] = failures[root];
  std::string what;
  if (reports[root].kind == RankFailure::kPeer && !killed.empty()) {
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
    std::vector<int> others;
    for (size_t i = 0; i < failures.size(); ++i)
      if (i != root) others.push_back(failures[i].first);
    what += " (rank(s) " + rank_list(others) + " stopped as well)";
  }
  if (!killed.empty()) what += "; rank(s) " + killed + " were still running and were killed";
  // A run that finished before the failure keeps its folder (rank 0 wrote it, and marked it).
  std::string finished;
  std::getline(std::ifstream(files.result) >> std::ws, finished);
  if (!finished.empty() && std::filesystem::exists(finished))
    what += "; the run had finished: its folder is kept, marked with " +
            std::string(kShutdownMark) + ": " + finished;
  // The folder of a run that did not finish says why (its writer, rank 0, may have been killed
  // and left "running", or have said only that it lost a peer).
  if (finished.empty()) mark_run_failed(files.run_path, what);
  if (reports[root].kind == RankFailure::kInput ||
      (WIFEXITED(status) && WEXITSTATUS(status) == 2)) {
    throw InputError(what);
  }
  throw PeerError(what);
}

// Under the kernel shaper: what the packet path did, in the run folder's kernel_network.json, and a
// warning where it was not the scenario's.
void record_packet_path(KernelNetwork& kernel, const std::string& run_path) {
  const KernelNetwork::Record record = kernel.finish();
  const std::string file = (std::filesystem::path(run_path) / "kernel_network.json").string();
  std::ofstream out(file);
  out << record.json;
  if (!out) std::cerr << "ravnest real: cannot write " << file << "\n";
  if (!record.warning.empty())
    std::cerr << "ravnest real: the kernel shaper's packet path: " << record.warning
              << "(kernel_network.json)\n";
}

}  // namespace

std::string run_real(const Scenario& scenario, const LaunchOptions& options) {
  const MachineShare share = machine_share(scenario, options.machines);
  // Spread over machines, every one needs the run's secret (real/auth.h): read it before any
  // process starts. On one machine it is new for the run, unless the environment gives one (so that
  // a replacement, `ravnest node --join`, can prove it too).
  const bool given_secret = auth::secret_in_environment();
  const std::string shared_secret =
      share.spread || given_secret ? auth::secret_from_environment() : std::string();
  SignalGuard signals;
  const std::string run_path =
      options.run_path.empty() ? new_run_path(scenario, "real") : options.run_path;
  TempPath result(false);
  TempPath status_dir(true);
  const RunFiles files{run_path, result.path(), status_dir.path()};
  const bool emulate = check_emulation(scenario, share.spread);
  Services services(scenario, share, emulate, status_dir.path(), shared_secret, given_secret);
  std::vector<std::string> env_strings = child_environment(share, services, status_dir.path());
  std::vector<char*> env;
  for (auto& s : env_strings) env.push_back(s.data());
  env.push_back(nullptr);

  Children children;
  start_ranks(children, scenario, options, share, services, files, env.data());
  const Ending ending = RankWaiter(children, scenario, files).wait();
  const std::string killed = rank_list(children.running_ranks());
  children.kill_all();

  if (ending.failures.empty() && !ending.stopped.empty())
    throw_stopped(ending.stopped, scenario, files.run_path);
  if (!ending.failures.empty())
    throw_failure(ending.failures, killed, files,
                  services.emulator ? &*services.emulator : nullptr);
  if (!ending.lost.empty())
    std::cerr << "ravnest real: the run recovered from the loss of rank(s) "
              << rank_list(ending.lost) << "\n";
  if (!share.has_rank0) return "";
  std::ifstream in(files.result);
  std::string path;
  std::getline(in, path);
  if (path.empty()) throw Error("real run: rank 0 finished without naming its run folder");
  if (services.kernel) record_packet_path(*services.kernel, path);
  return path;
}

}  // namespace rv
