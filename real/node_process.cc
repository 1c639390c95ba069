#include "real/node_process.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <iterator>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <sstream>
#include <thread>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include "algo/algorithm.h"
#include "algo/registry.h"
#include "core/checkpoint/checkpoint.h"
#include "core/data/dataset.h"
#include "core/data/partition.h"
#include "core/error.h"
#include "core/fault_transport.h"
#include "core/model/model.h"
#include "core/output/live_run.h"
#include "core/output/metrics.h"
#include "core/output/run_output.h"
#include "core/output/whole_file.h"
#include "core/scenario/scenario.h"
#include "core/units.h"
#include "emu/emulator_service.h"
#include "exec/compute_threads.h"
#include "exec/env_assembly.h"
#include "exec/progress.h"
#include "exec/wall_env.h"
#include "planner/planner.h"
#include "real/auth.h"
#include "real/auth_store.h"
#include "real/compute_device.h"
#include "real/gloo_collectives.h"
#include "real/real_checkpoints.h"
#include "real/real_membership.h"

namespace fs = std::filesystem;

namespace rv {
namespace {

// kControl ids between node processes (non-negative: negative ids belong to the transport).
constexpr int64_t kEventsId = 1;  // rank r -> 0: a piece of the metrics.csv text of rank r's events
                                  // (step: how many pieces there are in all)
constexpr int64_t kDoneId = 2;    // rank 0 -> r: every rank's events arrived; close now
constexpr int64_t kClockId = 3;   // rank 0 -> r: rank 0's clock origin (same machine only)

bool env_set(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0';
}

// Children of `ravnest real` die with it (PR_SET_PDEATHSIG) instead of training on alone.
void die_with_launcher() {
  const char* v = std::getenv(kLauncherPidEnv);
  if (v == nullptr || *v == '\0') return;
  const long launcher = std::strtol(v, nullptr, 10);
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != static_cast<pid_t>(launcher)) {
    throw PeerError("the launcher (process " + std::string(v) + ") has gone");
  }
}

// Peak resident memory of this process, in bytes.
Bytes peak_rss_bytes() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<Bytes>(u.ru_maxrss) * 1024;  // Linux: KiB
}

// Events <-> metrics.csv text and params.csv text (the formats rank 0 writes anyway): the one
// message carries both, the params after a line of their own.
constexpr const char* kParamsMark = "#params\n";

std::string events_to_text(const std::vector<Event>& events) {
  std::string text = events_csv(events);
  if (std::any_of(events.begin(), events.end(),
                  [](const Event& e) { return e.kind == EventKind::kParams; }))
    text += kParamsMark + params_csv(events);
  return text;
}

std::vector<Event> events_from_text(const std::string& text, int from) {
  const size_t mark = text.find(std::string("\n") + kParamsMark);
  const std::string where = "events from rank " + std::to_string(from);
  std::istringstream metrics(mark == std::string::npos ? text : text.substr(0, mark + 1));
  std::vector<Event> events = parse_events_csv(metrics, where + ": metrics.csv");
  if (mark == std::string::npos) return events;
  std::istringstream params(text.substr(mark + 1 + std::string(kParamsMark).size()));
  std::vector<Event> values = parse_params_csv(params, where + ": params.csv");
  events.insert(events.end(), std::make_move_iterator(values.begin()),
                std::make_move_iterator(values.end()));
  return events;
}

// Bytes travel as the raw bits of a float32 tensor (Gloo copies memory; no arithmetic on them).
Message bytes_message(int64_t id, const std::string& bytes) {
  Message m;
  m.kind = MsgKind::kControl;
  m.id = id;
  m.aux = static_cast<int64_t>(bytes.size());
  const int64_t floats = (m.aux + 3) / 4;
  if (floats > 0) {
    at::Tensor t = at::zeros({floats}, at::kFloat);
    std::memcpy(t.data_ptr<float>(), bytes.data(), bytes.size());
    m.payload.push_back(t);
  }
  m.bytes = kHeaderBytes + floats * 4;
  return m;
}

std::string message_bytes(const Message& m) {
  const int64_t capacity = m.payload.empty() ? 0 : m.payload[0].numel() * 4;
  if (m.aux < 0 || m.aux > capacity) {
    throw InputError("rank " + std::to_string(m.src) + " sent " + std::to_string(m.aux) +
                     " bytes in a payload of " + std::to_string(capacity));
  }
  std::string s(static_cast<size_t>(m.aux), '\0');
  if (m.aux > 0) std::memcpy(s.data(), m.payload[0].contiguous().data_ptr<float>(), s.size());
  return s;
}

// Events text travels in pieces of at most this many bytes, so that no message is longer than
// what the plan sends anyway plus kControlSlackElems.
constexpr size_t kEventsPieceBytes = size_t{4} << 20;
constexpr int64_t kControlSlackElems = int64_t{1} << 21;

// The largest payload, in float32 elements, that a message of this run can carry: the model's
// parameters and buffers twice over (stage state, averaging, optimizer state), plus the widest
// per-sample activation (or gradient, or output) times the largest batch the run moves (a
// training batch, or the whole test set at evaluation), plus room for the executor's own control
// messages. A peer's header announcing more is malformed (GlooOptions::max_payload_elems).
int64_t largest_payload(const ModelDesc& model, const Dataset& data, const Scenario& s) {
  int64_t width = std::max<int64_t>({model.outputs, model.input_elems, 1});
  for (int l = 0; l < model.layer_count(); ++l) width = std::max(width, model.input_elems_of(l));
  const int64_t samples = std::max<int64_t>({s.data.batch_size, data.test_size(), int64_t{1}});
  const Bytes state = sat_mul(2, model.total_params() + model.buffers(0, model.layer_count()));
  const Bytes total = sat_add(sat_add(state, sat_mul(width, samples)), kControlSlackElems);
  return std::min<int64_t>(total, wire::kMaxPayloadElems);
}

// Sends rank `r`'s events text to rank 0 in pieces of kEventsPieceBytes.
void send_events(GlooTransport& t, const std::string& text) {
  const int64_t pieces = std::max<int64_t>(
      1, static_cast<int64_t>((text.size() + kEventsPieceBytes - 1) / kEventsPieceBytes));
  for (int64_t i = 0; i < pieces; ++i) {
    Message m = bytes_message(
        kEventsId, text.substr(static_cast<size_t>(i) * kEventsPieceBytes, kEventsPieceBytes));
    m.step = pieces;
    t.send(0, std::move(m));
  }
}

// Waits for the kControl message `id`, however long: peers may still be training. A dead peer
// still ends the wait (the transport reports it), and every other wait of a node has a timeout,
// so this cannot hang for good. With `enough` (real.on_peer_loss = "recover", where a lost peer
// ends no wait): returns nothing as soon as enough() holds, checked every second, since the ranks
// still awaited may be lost meanwhile; rank 0 gathers the run's events, so its loss ends another
// rank's wait with rv::PeerError.
std::optional<Message> wait_control(GlooTransport& t, int64_t id,
                                    const std::function<bool()>& enough = {}) {
  for (;;) {
    if (enough && enough()) return std::nullopt;
    std::optional<Message> m;
    try {
      m = t.recv_control(enough ? 1.0 : 3600.0);
    } catch (const PeerError&) {
      if (enough && enough())
        return std::nullopt;  // the last peer it waited for was lost meanwhile
      throw;
    }
    if (m) {
      if (m->id != id)
        throw InputError("rank " + std::to_string(m->src) + " sent control message " +
                         std::to_string(m->id) + " where " + std::to_string(id) + " was expected");
      return m;
    }
    if (!enough) continue;
    const std::vector<int> lost = t.lost_peers();
    if (t.rank() != 0 && std::find(lost.begin(), lost.end(), 0) != lost.end())
      throw PeerError("rank " + std::to_string(t.rank()) +
                      ": rank 0 was lost, and with it the run's gathering "
                      "of events: the run cannot finish");
  }
}

// The peer-loss hook of a recovering rank: the transport reports lost peers to the membership,
// once it exists, from its own threads; unhooked before the membership goes.
struct LossHook {
  std::mutex mu;
  StoreMembership* members = nullptr;
  NetworkEmulator* network = nullptr;  // the emulated network, which waits for the peer no longer
  // Each incarnation of a peer once (the transport's report and the catch-up).
  std::set<std::pair<int, int>> reported;
  void lost(int peer, int incarnation) {
    std::lock_guard<std::mutex> lock(mu);
    if (members == nullptr || !reported.insert({peer, incarnation}).second) return;
    if (network != nullptr) network->forget(peer);
    members->left(peer, incarnation);
  }
  void set(StoreMembership* m) {
    std::lock_guard<std::mutex> lock(mu);
    members = m;
  }
};

// A recovering run's facts for replacements (`ravnest node --join`), which rank 0 puts in the
// store: "<its clock origin, ns since the Unix epoch> <1 if the network is emulated, else 0>".
const std::string kRunInfoKey = "rv/run/info";

void publish_run_info(c10d::Store& store, const WallClock& clock, bool emulated) {
  const auto steady_now = std::chrono::steady_clock::now().time_since_epoch();
  const int64_t since_origin =
      std::chrono::duration_cast<std::chrono::nanoseconds>(steady_now).count() - clock.origin_ns();
  const auto origin_unix = static_cast<int64_t>(unix_now_s() * 1e9) - since_origin;
  const std::string info = std::to_string(origin_unix) + " " + (emulated ? "1" : "0");
  store.set(kRunInfoKey, store_value(info));
}

// A replacement reads them before it links to the run: it refuses a run whose network is
// emulated (whose emulator knows only the processes its launcher started), and returns rank 0's
// clock origin in ns since the Unix epoch.
int64_t read_run_info(const GlooOptions& gloo) {
  const std::string who = "rank " + std::to_string(gloo.rank);
  std::vector<uint8_t> b;
  try {
    AuthStore store(gloo.secret, gloo.master_addr, gloo.master_port,
                    std::chrono::milliseconds(static_cast<int64_t>(gloo.timeout * 1000)));
    b = store.get(kRunInfoKey);
  } catch (const InputError& e) {
    throw InputError(who + ": " + e.what());
  } catch (const std::exception& e) {
    throw PeerError(who + ": cannot read the running job's facts from its store at " +
                    gloo.master_addr + ":" + std::to_string(gloo.master_port) +
                    " (is a run that recovers lost ranks running there?): " + e.what());
  }
  std::istringstream in(store_text(b));
  int64_t origin_unix = 0;
  int emulated = 0;
  if (!(in >> origin_unix >> emulated))
    throw InputError(who + ": the store holds malformed run facts");
  if (emulated != 0)
    throw InputError(
        who +
        ": this run's network is emulated by its launcher, whose emulator knows only the "
        "processes it started: a replacement can join a run with real.emulate_network = false "
        "only");
  return origin_unix;
}

// A replacement's clock takes the run's origin: its events sit on the run's time axis (to the
// machines' clock agreement).
void adopt_origin(WallClock& clock, int64_t origin_unix) {
  const int64_t steady_now = std::chrono::duration_cast<std::chrono::nanoseconds>(
                                 std::chrono::steady_clock::now().time_since_epoch())
                                 .count();
  clock.set_origin_ns(steady_now - (static_cast<int64_t>(unix_now_s() * 1e9) - origin_unix));
}

// What run() settles before the run folder exists, for run_rank().
struct RankSetup {
  const Scenario& scenario;
  const Plan& plan;
  const ModelDesc& model;
  const RunSpec& spec;
  const GlooOptions& gloo;
  std::string path;         // the run folder
  bool emulate = false;     // the scenario's links are emulated (real.emulate_network)
  bool kernel = false;      // by the kernel shaper, whose latency is added here
  const char* socket_path;  // the launcher's network emulator, when it runs one
  c10::Device device;       // where this rank computes (real.device)
};

// run()'s second half (below).
int run_rank(const NodeProcessOptions& options, const RankSetup& setup,
             std::optional<LiveRun>& live, const Clock& live_clock);

// The scenario of `options`, loaded (a resumed run's own source kept) and checked for what a real
// run supports.
Scenario load_rank_scenario(const NodeProcessOptions& options) {
  Scenario scenario = load_scenario(options.scenario_path, options.overrides);
  if (!options.resume_from.empty())
    if (std::string source = resolved_source(options.scenario_path); !source.empty())
      scenario.source = source;
  resolve_algorithm_keys(scenario);
  check_algorithm_settings(scenario);
  check_data_partition(scenario);
  check_checkpoint_support(scenario);
  check_recovery_support(scenario);
  return scenario;
}

// How this rank's links are emulated (real.emulate_network).
struct RankEmulation {
  bool emulate = false;
  // The kernel shaper's latency is added here, at the receiver; the user-space one is the
  // launcher's emulator, at socket_path.
  bool kernel = false;
  const char* socket_path = nullptr;
};

// rv::Error if the launcher should have started a network emulator and did not.
RankEmulation rank_emulation(const Scenario& scenario, int rank) {
  RankEmulation e;
  const bool launched_together = env_set(kAllRanksHereEnv);
  e.emulate = emulates_network(scenario, launched_together);
  e.kernel = e.emulate && scenario.real.shaper == Shaper::kKernel;
  e.socket_path = std::getenv(kEmulatorSocketEnv);
  if (e.emulate && !e.kernel && (e.socket_path == nullptr || *e.socket_path == '\0'))
    throw Error("rank " + std::to_string(rank) + ": the launcher started no network emulator");
  return e;
}

// Share this machine's cores among its ranks: all of them under `ravnest real`, or
// LOCAL_WORLD_SIZE (as torchrun sets it) when ranks are spread over machines.
void share_cores(int world) {
  int local_ranks = world;
  if (const char* v = std::getenv("LOCAL_WORLD_SIZE"); v != nullptr && std::atoi(v) > 0) {
    local_ranks = std::atoi(v);
  }
  set_compute_threads(threads_per_rank(local_ranks));
}

// The transport's options: the command line's, completed from the environment and the scenario.
GlooOptions rank_gloo_options(const NodeProcessOptions& options, const Scenario& scenario,
                              const ModelDesc& model, const Dataset& data) {
  const int rank = options.gloo.rank;
  GlooOptions gloo = options.gloo;
  if (gloo.timeout <= 0) gloo.timeout = scenario.peer_timeout_s();
  gloo.secret = auth::secret_from_environment();
  gloo.host_store = !(rank == 0 && env_set(kStoreHostedEnv));  // the launcher serves it
  gloo.max_payload_elems = largest_payload(model, data, scenario);
  // Unset by flag and environment: the scenario's rendezvous address and port.
  if (gloo.master_addr.empty()) gloo.master_addr = scenario.real.master_addr;
  if (gloo.master_port == 0) {
    if (scenario.real.master_port == 0)
      throw ScenarioError(
          scenario.where("real.master_port"), "real.master_port",
          "0 (a free port) is chosen by `ravnest real` only: give this rank --master-port or "
          "MASTER_PORT, or set the port here");
    gloo.master_port = scenario.real.master_port;
  }
  return gloo;
}

// Rank 0 makes the run folder at `path` (its live outputs) before the start barrier.
void open_live_run(std::optional<LiveRun>& live, const std::string& path,
                   const NodeProcessOptions& options, const Scenario& scenario, const Plan& plan,
                   const ModelDesc& model, const Clock& live_clock) {
  RunInfo info{"real", "cpu", 0, variant_label(scenario)};
  info.started_unix_s = unix_now_s();
  if (!options.resume_from.empty()) {
    info.resumed_from = options.resumed_run.empty() ? options.resume_from : options.resumed_run;
    info.resumed_at = read_checkpoint(options.resume_from).done;
  }
  live.emplace(path, scenario, plan, model, info, live_clock);
}

int run(const NodeProcessOptions& options) {
  die_with_launcher();
  const int rank = options.gloo.rank;
  const int world = options.gloo.world_size;
  Scenario scenario = load_rank_scenario(options);
  const c10::Device device = compute_device(scenario, rank);
  if (options.gloo.join && scenario.real.on_peer_loss != PeerLoss::kRecover)
    throw ScenarioError(scenario.where("real.on_peer_loss"), "real.on_peer_loss",
                        "\"" + std::string(name_of(scenario.real.on_peer_loss)) +
                            "\": --join replaces a lost rank of a run that recovers "
                            "lost ranks (\"recover\") only");
  const RankEmulation emulation = rank_emulation(scenario, rank);
  const ModelDesc model = build_model(scenario);
  const Plan plan = make_plan(scenario, model);
  if (world != plan.nodes) {
    throw InputError("world size " + std::to_string(world) + " does not match the scenario's " +
                     std::to_string(plan.nodes) + " nodes (" + options.scenario_path + ")");
  }
  share_cores(world);
  const Dataset data = load_dataset(scenario.data, scenario.seed);
  const RunSpec spec{&scenario, &plan, &model, &data};
  const GlooOptions gloo = rank_gloo_options(options, scenario, model, data);
  // The run folder exists from the start (core/output/live_run.h): rank 0 makes it before the start
  // barrier, and every rank that knows it (all of them under `ravnest real`) appends its rows to
  // it as it goes, from after that barrier until it hands its events to rank 0.
  const std::string path =
      options.run_path.empty() ? new_run_path(scenario, "real") : options.run_path;
  WallClock live_clock;
  std::optional<LiveRun> live;
  if (rank == 0) open_live_run(live, path, options, scenario, plan, model, live_clock);
  try {
    return run_rank(options,
                    RankSetup{scenario, plan, model, spec, gloo, path, emulation.emulate,
                              emulation.kernel, emulation.socket_path, device},
                    live, live_clock);
  } catch (const StoppedAtCheckpoint& e) {
    if (live) live->stop(e.what());
    throw;
  } catch (const std::exception& e) {
    if (live) live->fail(e.what());
    throw;
  }
}

// The transport's options for a rank: recovering, lost peers are reported to `hook`; `direct`:
// the direct channel's second connections are made with the transport.
GlooOptions transport_options(const GlooOptions& gloo, const std::shared_ptr<LossHook>& hook,
                              bool recover, bool direct) {
  GlooOptions transport_options = gloo;
  if (recover)
    transport_options.peer_lost = [hook](int peer, int incarnation) {
      hook->lost(peer, incarnation);
    };
  transport_options.direct_reverse = direct;
  return transport_options;
}

// The ranks the plan gives a stage.
std::vector<int> trainers_of(const Plan& plan) {
  std::vector<int> trainers;
  for (int r = 0; r < plan.nodes; ++r)
    if (plan.role_of(r).stage >= 0) trainers.push_back(r);
  return trainers;
}

// A resumed run (--resume-from): this rank's state, if it trains, into `resumed`; returns the
// checkpoint's time, from which its clock goes on (0 for a run that is not resumed).
// rv::InputError if the checkpoint holds other nodes than the plan's `trainers`.
Seconds read_resumed(const std::string& resume_from, const std::vector<int>& trainers,
                     const NodeRole& role, int rank, std::optional<NodeState>& resumed) {
  if (resume_from.empty()) return 0;
  const CheckpointInfo point = read_checkpoint(resume_from);
  if (point.nodes != trainers)
    throw InputError(resume_from +
                     ": the checkpoint holds other nodes than the ones this run's plan trains");
  if (role.stage >= 0) resumed = read_node_state(point, rank);
  return point.time;
}

// Sets the origin of a rank's `clock`, made just after the start barrier: back by a resumed run's
// `resumed_time`; a replacement's from the run's facts (`run_origin`), else published in the store
// (rank 0, recovering); and rank 0's on every rank started together by `ravnest real`, which share
// this machine's monotonic clock, so that every node's events sit on one time axis (the barrier's
// exits differ by ms).
void set_run_origin(WallClock& clock, GlooTransport& transport, const RankSetup& setup,
                    Seconds resumed_time, int64_t run_origin, bool recover) {
  const int rank = setup.gloo.rank;
  const int world = setup.gloo.world_size;
  const bool replacement = setup.gloo.join;
  if (resumed_time > 0)
    clock.set_origin_ns(clock.origin_ns() - static_cast<int64_t>(resumed_time * 1e9));
  if (replacement)
    adopt_origin(clock, run_origin);
  else if (recover && rank == 0)
    publish_run_info(*transport.store(), clock, setup.emulate && !setup.kernel);
  if (!env_set(kAllRanksHereEnv) || world <= 1 || replacement) return;
  if (rank == 0) {
    for (int r = 1; r < world; ++r) {
      Message m;
      m.kind = MsgKind::kControl;
      m.id = kClockId;
      m.step = clock.origin_ns();
      m.bytes = kHeaderBytes;
      transport.send(r, std::move(m));
    }
  } else {
    clock.set_origin_ns(wait_control(transport, kClockId)->step);
  }
}

// What a rank's NodeEnv is assembled from, beside the transport, the clock and the event log,
// made in the order of the members (and destroyed in reverse, before the transport they use).
struct NodeParts {
  NodeParts(const RankSetup& setup, const NodeProcessOptions& options, GlooTransport& transport,
            WallClock& clock, EventLog& log, Metrics* live_rows, const std::vector<int>& trainers,
            std::optional<NodeState> resumed, bool recover, bool direct);

  WallCompute compute;
  Progress progress;
  GlooCollectives collectives;  // for an all-reduce on the executor's collectives
  // The network emulator, if the run has one: the launcher's (the user-space shaper).
  std::unique_ptr<NetworkEmulator> emulator;
  // The algorithm sees the scenario's wrappers (emulated links, injected faults); the gathering
  // of events does not.
  TeeMetrics observer;  // the node's thread only: no lock
  std::optional<RealCheckpoints> checkpoints;
  EnvParts parts;
};

NodeParts::NodeParts(const RankSetup& setup, const NodeProcessOptions& options,
                     GlooTransport& transport, WallClock& clock, EventLog& log, Metrics* live_rows,
                     const std::vector<int>& trainers, std::optional<NodeState> resumed,
                     bool recover, bool direct)
    : compute(setup.scenario.real.emulate_speed
                  ? std::optional<ComputeProfile>(
                        setup.scenario.device_of(setup.gloo.rank).compute_profile())
                  : std::nullopt,
              setup.device),
      progress(setup.scenario.training.steps, "wall",
               setup.gloo.rank == 0 && Progress::enabled_for(options.progress)),
      collectives(transport),
      observer(progress, live_rows, nullptr),
      parts{transport, clock, compute, log, &collectives, &observer, nullptr, nullptr} {
  const Scenario& scenario = setup.scenario;
  const int rank = setup.gloo.rank;
  // (The kernel shaper delays packets on their path: no emulator here.)
  if (setup.emulate && !setup.kernel)
    emulator =
        std::make_unique<EmulatorClient>(setup.socket_path, rank, setup.gloo.timeout, recover);
  parts.network = emulator.get();
  if (scenario.checkpoint.enabled()) {
    if (resumed) {  // what this rank had done before: in its log and its live rows
      for (const Event& e : resumed->events) {
        log.record(e);
        observer.record(e);
      }
    }
    checkpoints.emplace(scenario.checkpoint.every,
                        checkpoint_dir(scenario.checkpoint.dir, setup.path), trainers, rank,
                        transport, log, clock, std::move(resumed), options.stop_after_checkpoint);
  }
  if (checkpoints) parts.checkpoints = &*checkpoints;
  if (direct) parts.direct = &transport.direct();
}

// Before the membership goes (declared after it), the loss hook lets go of it.
struct Unhook {
  LossHook& hook;
  ~Unhook() {
    std::lock_guard<std::mutex> lock(hook.mu);
    hook.members = nullptr;
    hook.network = nullptr;
  }
};

// Recovering: the run's membership in the store, made into `membership`; the peers lost so far
// are reported to it now, later ones by the transport as they go. A replacement joins it.
Membership& join_membership(std::optional<StoreMembership>& membership, LossHook& hook,
                            GlooTransport& transport, const WallClock& clock,
                            NetworkEmulator* emulator, const GlooOptions& gloo) {
  membership.emplace(transport.store(), transport, clock);
  {
    std::lock_guard<std::mutex> lock(hook.mu);
    hook.network = emulator;
  }
  hook.set(&*membership);
  for (int peer : transport.lost_peers()) hook.lost(peer, transport.incarnation(peer));
  if (gloo.join) membership->joined(gloo.rank, gloo.timeout);
  return *membership;
}

// Records this rank's peak memory (resident, and its device's if it computes on one) in its log
// and its live rows.
void record_memory(EventLog& log, Metrics* live_rows, const NodeRole& role, int rank,
                   const Clock& clock, c10::Device device) {
  Event mem;
  mem.kind = EventKind::kMeasuredMemory;
  mem.node = rank;
  mem.cluster = role.cluster;
  mem.stage = role.stage;
  mem.start = mem.end = clock.now();
  mem.bytes = peak_rss_bytes();
  log.record(mem);
  if (live_rows != nullptr) live_rows->record(mem);
  if (const std::optional<DeviceMemoryPeak> gpu = device_memory_peak(device)) {
    Event g = mem;
    g.kind = EventKind::kMeasuredDeviceMemory;
    g.bytes = gpu->allocated;
    log.record(g);
    if (live_rows != nullptr) live_rows->record(g);
  }
}

// A rank other than 0, its training done: hands its events to rank 0, waits for rank 0's word
// that every rank's arrived, and closes. Returns the exit status (0).
int hand_in_events(GlooTransport& transport, EventLog& log, std::optional<LiveRows>& joined,
                   bool recover) {
  if (joined) joined->close();  // before rank 0 can finish the folder
  send_events(transport, events_to_text(log.take()));
  transport.flush();
  // Recovering, nothing ends this wait early, but it looks every second whether rank 0 is lost.
  const std::function<bool()> never = [] { return false; };
  wait_control(transport, kDoneId, recover ? never : nullptr);
  transport.close();
  return 0;
}

// Rank 0: every other rank's events, appended to `events` as each rank's last piece arrives.
// Recovering: the ranks lost on the way send nothing (what one had sent is dropped).
void gather_events(GlooTransport& transport, int world, bool recover, std::vector<Event>& events) {
  std::vector<std::string> texts(static_cast<size_t>(world));
  std::vector<int64_t> pieces(static_cast<size_t>(world), 0), got(static_cast<size_t>(world), 0);
  auto all_in = [&] {
    const std::vector<int> lost = transport.lost_peers();
    for (int r = 1; r < world; ++r)
      if ((pieces[r] == 0 || got[r] < pieces[r]) &&
          std::find(lost.begin(), lost.end(), r) == lost.end())
        return false;
    return true;
  };
  for (int complete = 1; recover ? !all_in() : complete < world;) {
    std::optional<Message> got_one =
        wait_control(transport, kEventsId, recover ? std::function<bool()>(all_in) : nullptr);
    if (!got_one) break;
    const Message m = std::move(*got_one);
    const auto src = static_cast<size_t>(m.src);
    if (m.step < 1 || (pieces[src] != 0 && (m.step != pieces[src] || got[src] == pieces[src])))
      throw InputError("rank " + std::to_string(m.src) +
                       " sent a piece of its events out of turn (" + std::to_string(m.step) +
                       " pieces)");
    pieces[src] = m.step;
    texts[src] += message_bytes(m);
    if (++got[src] < pieces[src]) continue;
    std::vector<Event> theirs = events_from_text(texts[src], m.src);
    std::string().swap(texts[src]);
    events.insert(events.end(), theirs.begin(), theirs.end());
    ++complete;
  }
}

// Rank 0, every rank's events in hand: tells every rank still in the run that they arrived, and
// closes. If that fails, the finished run folder at `path` is marked (kShutdownMark).
void say_done(GlooTransport& transport, int world, const std::string& path) {
  try {
    const std::vector<int> lost = transport.lost_peers();
    for (int r = 1; r < world; ++r) {
      if (std::find(lost.begin(), lost.end(), r) != lost.end()) continue;
      Message done;
      done.kind = MsgKind::kControl;
      done.id = kDoneId;
      done.bytes = kHeaderBytes;
      transport.send(r, std::move(done));
    }
    transport.flush();
    transport.close();
  } catch (const Error& e) {
    write_whole_file(
        (fs::path(path) / kShutdownMark).string(),
        std::string("The run finished: rank 0 had every rank's events and wrote this folder. "
                    "Then the shutdown failed:\n") +
            e.what() + "\n");
    throw;
  }
}

// Rank 0, its training done: gathers every rank's events, finishes the run folder and says
// goodbye. Returns the exit status (0).
int finish_run(const NodeProcessOptions& options, const RankSetup& setup, GlooTransport& transport,
               EventLog& log, std::optional<StoreMembership>& membership,
               std::optional<LiveRun>& live, bool recover) {
  std::vector<Event> events = log.take();
  gather_events(transport, setup.gloo.world_size, recover, events);
  // Losses recorded by this rank while it gathered.
  if (membership)
    for (const Event& e : membership->take_events()) events.push_back(e);
  // Every rank's events are here: the run is finished, and its folder's final outputs replace the
  // live ones before the goodbyes, so that a peer failing during them cannot lose it (the folder
  // is then marked).
  live->finish(std::move(events));
  if (!options.result_file.empty()) {
    write_whole_file(options.result_file, setup.path + "\n");
  } else {
    std::cout << "ravnest node (rank 0): wrote " << setup.path << "\n";
  }
  say_done(transport, setup.gloo.world_size, setup.path);
  return 0;
}

// The rank's part of run() after the run folder exists: rendezvous, training, gathering.
int run_rank(const NodeProcessOptions& options, const RankSetup& setup,
             std::optional<LiveRun>& live, const Clock& live_clock) {
  const int rank = options.gloo.rank;
  const Scenario& scenario = setup.scenario;
  const NodeRole role = setup.plan.role_of(rank);
  const bool recover = scenario.real.on_peer_loss == PeerLoss::kRecover;
  auto hook = std::make_shared<LossHook>();
  // The direct channel, where the env assembly will hand it on (NodeEnvStack::direct_possible:
  // the network emulator, below, shapes the stack) and no peer is taken for lost; every rank
  // decides alike, from the scenario and the run's launch. Its second connections are made with
  // the transport.
  const bool direct =
      !recover && !setup.kernel && NodeEnvStack::direct_possible(scenario, setup.emulate);
  const bool replacement = setup.gloo.join;  // this process took a lost rank's place in a job
  const int64_t run_origin = replacement ? read_run_info(setup.gloo) : 0;
  GlooTransport transport(transport_options(setup.gloo, hook, recover, direct));
  if (!replacement) transport.barrier();
  // The other ranks join the folder rank 0 made before that barrier.
  std::optional<LiveRows> joined;
  if (rank != 0 && !options.run_path.empty())
    joined.emplace(setup.path, scenario.output.metrics != MetricsOutput::kSummary, live_clock,
                   false);
  Metrics* live_rows = live     ? static_cast<Metrics*>(&*live)
                       : joined ? static_cast<Metrics*>(&*joined)
                                : nullptr;
  const std::vector<int> trainers = trainers_of(setup.plan);
  std::optional<NodeState> resumed;
  const Seconds resumed_time = read_resumed(options.resume_from, trainers, role, rank, resumed);
  WallClock clock;  // origin: just after the start barrier, on every rank
  set_run_origin(clock, transport, setup, resumed_time, run_origin, recover);
  EventLog log;
  NodeParts node(setup, options, transport, clock, log, live_rows, trainers, std::move(resumed),
                 recover, direct);
  std::optional<StoreMembership> membership;
  Unhook unhook{*hook};
  if (recover)
    node.parts.membership =
        &join_membership(membership, *hook, transport, clock, node.emulator.get(), setup.gloo);
  NodeEnvStack stack(scenario, rank, node.parts);
  run_node(stack.env(), setup.spec, rank);
  transport.drain();  // what the algorithm left unread no longer holds back its peers
  if (membership) {
    membership->stop();
    for (const Event& e : membership->take_events()) log.record(e);
  }
  node.progress.finish();
  stack.env().transport.flush();  // every message the algorithm sent is handed over first
  transport.flush();
  record_memory(log, live_rows, role, rank, clock, setup.device);
  if (rank != 0) return hand_in_events(transport, log, joined, recover);
  return finish_run(options, setup, transport, log, membership, live, recover);
}

// Prints the error line and, for the launcher, leaves the status file (best effort).
void report_failure(int rank, RankFailure kind, const std::string& what) {
  std::cerr << "ravnest node (rank " << rank << "): error: " << what << std::endl;
  const char* dir = std::getenv(kStatusDirEnv);
  if (dir == nullptr || *dir == '\0') return;
  std::ofstream out(fs::path(dir) / ("rank-" + std::to_string(rank)), std::ios::trunc);
  out << name_of(kind) << "\n" << what << "\n";
}

}  // namespace

int run_node_process(const NodeProcessOptions& options) {
  const int rank = options.gloo.rank;
  try {
    return run(options);
  } catch (const InputError& e) {
    report_failure(rank, RankFailure::kInput, e.what());
    return 2;
  } catch (const PeerError& e) {
    report_failure(rank, RankFailure::kPeer, e.what());
    return 1;
  } catch (const std::exception& e) {
    report_failure(rank, RankFailure::kError, e.what());
    return 1;
  }
}

bool emulates_network(const Scenario& s, bool launched_together) {
  const Toggle t = s.real.emulate_network;
  const bool kernel = s.real.shaper == Shaper::kKernel;
  if (!launched_together) {
    if (t == Toggle::kOn)
      throw ScenarioError(
          s.where("real.emulate_network"), "real.emulate_network",
          "ranks started by hand (`ravnest node`) or on several machines (--nnodes) "
          "cannot share a network emulator; start them together with `ravnest real` on "
          "one machine");
    if (kernel)
      throw ScenarioError(s.where("real.shaper"), "real.shaper",
                          "the kernel shaper needs the ranks started by `ravnest real`");
    return false;
  }
  if (t == Toggle::kOff) {
    if (kernel)
      throw ScenarioError(s.where("real.shaper"), "real.shaper",
                          "the kernel shaper shapes an emulated network, but "
                          "real.emulate_network = false");
    return false;
  }
  if (!kernel && allreduce_of(s).executor_collectives)
    throw ScenarioError(s.where("training.allreduce"), "training.allreduce",
                        "'" + s.training.allreduce +
                            "' runs inside c10d, where the user-space network emulator cannot "
                            "see its bytes; use real.shaper = \"kernel\" (root) or "
                            "real.emulate_network = false");
  return true;
}

}  // namespace rv
