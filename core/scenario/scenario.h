// Scenario: one experiment, completely described by one TOML file (plus --set overrides).
//
// Contract: load_scenario() either returns a fully validated Scenario (every key known, typed and
// in range, defaults filled in) or throws rv::ScenarioError naming file, line and key. It reads the
// file and nothing else; it writes nothing. One exception: [training] may hold keys of the
// algorithm's own (declared in its file under algo/), which this module cannot know; it keeps them
// as read in TrainingSpec::algorithm_keys, and the algorithm registry checks them and fills in
// their defaults (algo/registry.h resolve_algorithm_keys, which every loader that runs a scenario
// calls).
//
// Each key's type, unit, range and help live in one table, core/scenario/keys.cc; a key's default
// is the initial value of its field below. The comments here only say how a value is stored.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <variant>
#include <vector>

#include "core/compute/profile.h"
#include "core/error.h"
#include "core/scenario/choice.h"
#include "core/units.h"

namespace rv {

struct DeviceGroup {
  std::string name;  // defaulted to "device<i>" for the i-th group when read
  int count = 1;
  double tflops = 1.0;       // 1e12 floating-point operations per second, sustained
  double ram_gb = 8.0;       // GiB
  double up_mbps = 100.0;    // Mbit/s, to the core
  double down_mbps = 100.0;  // Mbit/s, from the core
  double latency_ms = 10.0;  // ms, one way, between the device and the core
  // The drop-tail buffer in front of each of the device's links (a home router's), honoured by the
  // kernel shaper (real/kernel_network.h) only: in ms of the link's rate, or in packets; 0 (both):
  // the kernel's default queue. At most one of the two is set. The flow models (simulator,
  // planner, user-space shaper) do not model it (docs/network-model.md).
  double buffer_ms = 0;
  int buffer_packets = 0;
  std::string region;  // network.topology "regions": the region whose core it reaches
  // Churn (core/churn/schedule.h): this group's nodes leave at this rate per hour (exponential
  // sessions of mean 1 / rate hours); -1: churn.leave_per_hour.
  double leave_per_hour = -1;
  // > 0: the group's nodes are absent at the start and arrive at this second (as spares, without
  // state); the planner plans without them. Such groups come after every other group.
  double join_at_s = 0;
  bool client_only = false;  // no inbound connections: aggregates no part of an all-reduce
  int gpu = -1;         // real runs on GPUs: the group's GPU index; -1: rank mod the GPUs visible
  std::string profile;  // compute profile file (`ravnest calibrate --out`); "": peak model
  ComputeProfile compute;  // read from `profile` when the scenario is loaded
  double efficiency = 0;   // (0, 1.5]: every operation at this fraction of tflops; 0: the profile's
  double dilation = 1;     // the scenario's time dilation (Scenario::dilation), set when loaded
  // In the units the models use (core/units.h), dilated: one conversion, for every model and
  // executor. Under a dilation k every rate is divided by k and every time multiplied by k.
  double flops_per_s() const { return tflops * kTflopsToFlopsPerSecond / dilation; }
  // The device's compute model (core/compute/profile.h): its profile's per-operation cost and
  // efficiencies at this device's peak (tflops), its memory bandwidth scaled with the peak, its
  // curves' waits and costs dilated;
  // `efficiency`, where set, replaces every one of the profile's efficiencies and keeps its fixed
  // costs.
  ComputeProfile compute_profile() const {
    ComputeProfile p = compute;
    // The memory bandwidth keeps its ratio to the peak (the profile's host, scaled): a device
    // twice as fast reads its weights twice as fast.
    if (compute.peak_flops_per_s > 0)
      p.memory_bytes_per_s *= flops_per_s() / compute.peak_flops_per_s;
    p.peak_flops_per_s = flops_per_s();
    // Times: the curves' waits and the wake-up costs, as the fixed costs and the first operations'.
    for (auto& point : p.idle_op) {
      point.wait *= dilation;
      point.op *= dilation;
      point.span *= dilation;
    }
    for (auto& point : p.idle_cold) point.wait *= dilation;
    for (auto& pass : p.cost)
      for (KindCost& kind : pass) {
        kind.overhead *= dilation;
        kind.first *= dilation;
        if (efficiency > 0) kind.efficiency.fill(efficiency);
      }
    return p;
  }
  double ram_bytes() const { return ram_gb * kGbToBytes; }
  double up_bytes_per_s() const { return up_mbps * kMbpsToBytesPerSecond / dilation; }
  double down_bytes_per_s() const { return down_mbps * kMbpsToBytesPerSecond / dilation; }
  Seconds latency_s() const { return latency_ms * kMsToSeconds * dilation; }
};

// model.kind: the model's family (core/model/model.cc builds each).
enum class ModelKind { kMlp, kBlocks, kCnn, kTransformer };
template <>
struct ChoiceNames<ModelKind> {
  static constexpr ChoiceName<ModelKind> kNames[] = {{ModelKind::kMlp, "mlp"},
                                                     {ModelKind::kBlocks, "blocks"},
                                                     {ModelKind::kCnn, "cnn"},
                                                     {ModelKind::kTransformer, "transformer"}};
};

// model.head: a final linear layer to the task's outputs, or none.
enum class Head { kNone, kLinear };
template <>
struct ChoiceNames<Head> {
  static constexpr ChoiceName<Head> kNames[] = {{Head::kNone, "none"}, {Head::kLinear, "linear"}};
};

struct ModelSpec {
  ModelKind kind = ModelKind::kMlp;
  std::vector<int64_t> hidden = {256, 128};
  std::vector<int64_t> channels = {16, 32};
  int64_t kernel = 3;  // odd
  bool batch_norm = true;
  double dropout = 0.0;
  Head head = Head::kNone;
  int64_t blocks = 4;  // blocks: parameter blocks (one layer each)
  // transformer: a GPT-style decoder (core/model/transformer.cc)
  int64_t layers = 2;    // blocks
  int64_t d_model = 64;  // width of the residual stream
  int64_t heads = 4;     // attention heads (d_model a multiple of them)
  int64_t d_ff = 0;      // the MLP's hidden width; 0: 4 d_model
  int64_t seq_len = 0;   // positions; 0: the data's sequence length
  int64_t vocab = 0;     // token ids; 0: the data's vocabulary
};

// data.kind: where samples come from; each kind is a unit of core/data (its shape, location and
// loader in one place: core/data/data_source.h).
enum class DataKind {
  kSynthetic,
  kQuadratic,
  kLogistic,
  kFashionMnist,
  kDigits,
  kRegression,
  kSort,
  kText
};
template <>
struct ChoiceNames<DataKind> {
  static constexpr ChoiceName<DataKind> kNames[] = {
      {DataKind::kSynthetic, "synthetic"}, {DataKind::kQuadratic, "quadratic"},
      {DataKind::kLogistic, "logistic"},   {DataKind::kFashionMnist, "fashion-mnist"},
      {DataKind::kDigits, "digits"},       {DataKind::kRegression, "regression"},
      {DataKind::kSort, "sort"},           {DataKind::kText, "text"}};
};
// The problems with known constants (core/problem/problem.h): quadratic and logistic.
inline bool is_problem(DataKind k) { return k == DataKind::kQuadratic || k == DataKind::kLogistic; }

// data.partition: how the training set is split between the clusters (and the replicas of a
// whole-model algorithm), each training on its own part (core/data/partition.h).
enum class DataPartition { kIid, kByClass, kDirichlet };
template <>
struct ChoiceNames<DataPartition> {
  static constexpr ChoiceName<DataPartition> kNames[] = {{DataPartition::kIid, "iid"},
                                                         {DataPartition::kByClass, "by-class"},
                                                         {DataPartition::kDirichlet, "dirichlet"}};
};

struct DataSpec {
  DataKind kind = DataKind::kSynthetic;
  DataPartition partition = DataPartition::kIid;
  double dirichlet_alpha = 0.5;  // dirichlet: the concentration of each class's shares
  int64_t batch_size = 64;
  int64_t train_samples = 0;  // 0: all (synthetic: 8192)
  int64_t test_samples = 0;   // 0: all (synthetic: 2048)
  std::string path;           // empty: Debian's location
  int64_t side = 8;           // synthetic: images are 1 x side x side
  int64_t classes = 10;
  double noise = 1.0;
  int64_t features = 16;  // regression; quadratic, logistic: the dimension d
  int64_t targets = 1;    // regression
  // Problems (quadratic, logistic; core/problem/problem.h)
  double eig_min = 0.1;  // the spectrum, geometric from eig_min to eig_max
  double eig_max = 1.0;
  double sigma2 = 1.0;      // quadratic: a sample's gradient noise, E||n||^2
  double feature_mean = 0;  // logistic: the length of the features' mean (0: centred features)
  uint64_t problem_seed = 1;
  // Token data (core/data/tokens.h)
  int64_t length = 6;    // sort: digits to sort
  int64_t digits = 3;    // sort: distinct digits (the vocabulary)
  int64_t seq_len = 64;  // text: characters per sample
};

// training.optimizer: every stage's optimizer.
enum class OptimizerKind { kSgd, kAdam, kAdamW };
template <>
struct ChoiceNames<OptimizerKind> {
  static constexpr ChoiceName<OptimizerKind> kNames[] = {{OptimizerKind::kSgd, "sgd"},
                                                         {OptimizerKind::kAdam, "adam"},
                                                         {OptimizerKind::kAdamW, "adamw"}};
};

// training.averaging: clusters drain, then average (bulk-sync), or average while training goes on
// (overlapped).
enum class Averaging { kBulkSync, kOverlapped };
template <>
struct ChoiceNames<Averaging> {
  static constexpr ChoiceName<Averaging> kNames[] = {{Averaging::kBulkSync, "bulk-sync"},
                                                     {Averaging::kOverlapped, "overlapped"}};
};

// One key's value, whatever holds it (integers of every width as int64_t): core/scenario/keys.h.
using KeyValue = std::variant<std::string, bool, int64_t, double, std::vector<int64_t>>;

struct TrainingSpec {
  std::string algorithm = "ravnest";  // a name from the algorithm registry (validated there)
  OptimizerKind optimizer = OptimizerKind::kSgd;
  double lr = 0.05;
  double momentum = 0.0;
  double weight_decay = 0.0;
  int64_t steps = 1000;
  int64_t max_in_flight = 0;  // 0: as many as stages ("stages" in the file)
  bool weight_stashing = true;
  int64_t micro_batches = 4;
  int64_t average_every = 50;
  Averaging averaging = Averaging::kBulkSync;
  std::string allreduce = "multi-ring";  // a name from the all-reduce registry (validated there)
  double ring_piece_mb = 0;  // ring all-reduces: largest segment in one message, MB (0: whole)
  bool average_optimizer_state = false;
  int64_t eval_every = 0;    // 0: only at the end
  int64_t eval_samples = 0;  // 0: the whole test set
  // The keys of [training] that belong to the algorithm training.algorithm names: declared in its
  // own file under algo/ and checked (type, range, defaults filled in) by the algorithm registry
  // (algo/registry.h resolve_algorithm_keys). By key name; as read until the registry checks
  // them (an integer for a real key), then of the key's type.
  std::map<std::string, KeyValue> algorithm_keys;
  // Not a key: the most older weight versions a stage keeps for its unfinished micro-batches
  // (0: one per unfinished micro-batch but the newest). An algorithm's own settings set it
  // (algo/registry.h effective_training); the cost model charges it.
  int64_t weight_versions = 0;
};

// Adam and AdamW: two state slots per parameter (the moments) and the same step's cost.
inline bool adaptive_optimizer(const TrainingSpec& t) {
  return t.optimizer == OptimizerKind::kAdam || t.optimizer == OptimizerKind::kAdamW;
}

// planner.method: how the pool becomes clusters and stages (planner/assemble.cc).
enum class PlannerMethod { kManual, kGreedy, kGa, kRavnestGa, kExhaustive };
template <>
struct ChoiceNames<PlannerMethod> {
  static constexpr ChoiceName<PlannerMethod> kNames[] = {
      {PlannerMethod::kManual, "manual"},
      {PlannerMethod::kGreedy, "greedy"},
      {PlannerMethod::kGa, "ga"},
      {PlannerMethod::kRavnestGa, "ravnest-ga"},
      {PlannerMethod::kExhaustive, "exhaustive"}};
};

struct PlannerSpec {
  PlannerMethod method = PlannerMethod::kManual;
  int clusters = 0;                   // 0: the planner chooses ("auto" in the file)
  std::vector<int64_t> stage_layers;  // empty: by RAM
  // [[planner.cluster]]: explicit clusters (manual).
  struct Cluster {
    std::vector<int64_t> nodes;         // pipeline order; never empty once read
    std::vector<int64_t> stage_layers;  // empty: by RAM
  };
  std::vector<Cluster> cluster;
  int population = 0;       // 0: by pool size
  int generations = 0;      // 0: by pool size
  int64_t evaluations = 0;  // the GA's budget of scored individuals; 0: by pool size
  double time_limit_s =
      300;  // wall seconds a GA may search (a safety net: see planner/search_budget.h)
};

// TCP's goodput over a link, as a share of the link's rate: measured through the kernel shaper
// (real TCP through htb, Gloo's framing included; bench/network_model.sh, docs/network-model.md):
// TCP/IP and Ethernet headers cost 66 of every 1514 bytes on the wire (0.956).
constexpr double kTcpBandwidthFactor = 0.962;
// TCP's effective window, in bytes: a connection sends at most this much per round trip, so a flow
// runs at most kTcpWindowBytes / (2 x its route's latency). Measured with real TCP at real round
// trips (bench/tcp_effects/, one-way messages at 100 and 250 ms round trips, 1 Gbit/s: 2.79 MB,
// from 2.45 to 2.89), and Linux's own arithmetic: tcp_wmem's default maximum (4 MiB) holds about
// 2/3 of it in payload (the rest is the buffers' overhead), 2.80 MB. docs/network-model.md.
constexpr double kTcpWindowBytes = 2.79e6;

// network.topology: every node reaches one core ("star"), or its region's core, the regions'
// cores joined by [[network.link]] entries ("regions"); core/network/links.h.
enum class Topology { kStar, kRegions };
template <>
struct ChoiceNames<Topology> {
  static constexpr ChoiceName<Topology> kNames[] = {{Topology::kStar, "star"},
                                                    {Topology::kRegions, "regions"}};
};

// network.model: how a link's latency and bandwidth are bent (NetFactors below).
enum class NetworkModel { kTcp, kLv08, kIdeal };
template <>
struct ChoiceNames<NetworkModel> {
  static constexpr ChoiceName<NetworkModel> kNames[] = {
      {NetworkModel::kTcp, "tcp"}, {NetworkModel::kLv08, "lv08"}, {NetworkModel::kIdeal, "ideal"}};
};

// [[network.link]]: the links between two regions' cores, one each way, each of `mbps`.
struct RegionLinkSpec {
  std::string a, b;       // the regions (devices[].region)
  double latency_ms = 0;  // ms, one way
  double mbps = 1000;     // Mbit/s, each way, shared by every flow that crosses it
};

struct NetworkSpec {
  Topology topology = Topology::kStar;
  NetworkModel model = NetworkModel::kTcp;
  double bandwidth_factor = 0;       // > 0: replaces the model's own
  double latency_factor = 0;         // > 0: replaces the model's own
  std::vector<RegionLinkSpec> link;  // topology "regions": every pair of regions with devices
  // A SimGrid platform file for simulation (absolute once loaded; "": the devices' own links).
  std::string platform;
};

// How the network model bends each link's latency and bandwidth, the one definition the simulator
// (SimGrid's network/latency-factor, network/bandwidth-factor, network/TCP-gamma), the planner's
// cost model and the user-space emulator share. tcp (the default): CM02 with TCP's goodput
// (bandwidth x kTcpBandwidthFactor) and TCP's window (a flow capped at kTcpWindowBytes / (2
// latency)). Every model runs one connection per pair of
// nodes (a pair's messages one after the other, the latency paid once per stream). LV08, SimGrid's
// calibration for LAN TCP: latency x 13.01, bandwidth x 0.97, a flow capped at TCP-gamma /
// (2 latency) with gamma = 4 MiB. ideal: factors 1, no cap. network.bandwidth_factor and
// network.latency_factor replace a model's factor.
struct NetFactors {
  double latency = 1.0;
  double bandwidth = 1.0;
  double tcp_gamma = 0.0;  // bytes; 0: no window cap
};
NetFactors net_factors(const NetworkSpec& network);

// sim.mode: real maths with modeled time, or no maths.
enum class SimMode { kNumeric, kTiming };
template <>
struct ChoiceNames<SimMode> {
  static constexpr ChoiceName<SimMode> kNames[] = {{SimMode::kNumeric, "numeric"},
                                                   {SimMode::kTiming, "timing"}};
};

struct SimSpec {
  SimMode mode = SimMode::kNumeric;
  // > 0: the nodes compute on one machine of this many cores, as a real run on one host does
  // (`ravnest validate --agreement hardware` sets it to the host's): each node's compute is an
  // execution on that machine, on at most its profile's threads of cores, the cores shared
  // equally among the nodes computing at once (SimGrid's CPU model); a span alone on a core takes
  // its modeled time. 0: every node computes on a device of its own. The network is the
  // scenario's either way; the planner plans the devices as if each had its own.
  int shared_cores = 0;
};

// A setting that is on, off, or left to the executor ("auto" in a scenario file).
enum class Toggle { kAuto, kOff, kOn };

// The network emulator of real runs (real.shaper).
//   user    the launcher holds every message for the time the scenario's links take (emu/)
//   kernel  each node runs in a network namespace of the run's, its links shaped by htb (root)
enum class Shaper { kUser, kKernel };
template <>
struct ChoiceNames<Shaper> {
  static constexpr ChoiceName<Shaper> kNames[] = {{Shaper::kUser, "user"},
                                                  {Shaper::kKernel, "kernel"}};
};

// real.on_peer_loss: a rank that loses a peer stops the run, or goes on as under churn.
enum class PeerLoss { kFail, kRecover };
template <>
struct ChoiceNames<PeerLoss> {
  static constexpr ChoiceName<PeerLoss> kNames[] = {{PeerLoss::kFail, "fail"},
                                                    {PeerLoss::kRecover, "recover"}};
};

// real.device: where each rank computes (real/compute_device.h).
enum class DeviceChoice { kAuto, kCpu, kCuda };
template <>
struct ChoiceNames<DeviceChoice> {
  static constexpr ChoiceName<DeviceChoice> kNames[] = {
      {DeviceChoice::kAuto, "auto"}, {DeviceChoice::kCpu, "cpu"}, {DeviceChoice::kCuda, "cuda"}};
};

struct RealSpec {
  double timeout_s = 60.0;
  std::string master_addr = "127.0.0.1";
  int master_port = 0;  // 0: pick a free port
  bool emulate_speed = false;
  Toggle emulate_network = Toggle::kAuto;  // auto: on under `ravnest real`, off elsewhere
  Shaper shaper = Shaper::kUser;
  PeerLoss on_peer_loss = PeerLoss::kFail;  // recover: as under churn (algo/roster.h)
  DeviceChoice device = DeviceChoice::kAuto;
};

// output.metrics: metrics.csv, one row per event; or node_metrics.csv, one row per node.
enum class MetricsOutput { kEvents, kSummary };
template <>
struct ChoiceNames<MetricsOutput> {
  static constexpr ChoiceName<MetricsOutput> kNames[] = {{MetricsOutput::kEvents, "events"},
                                                         {MetricsOutput::kSummary, "summary"}};
};

struct OutputSpec {
  std::string dir = "runs";  // never empty
  bool trace = true;
  // trace.json's nodes: 0, all of them; n > 0, whole clusters spread over the plan, up to n nodes
  // (at least one cluster): a readable timeline of a run of thousands of nodes.
  int trace_nodes = 0;
  MetricsOutput metrics = MetricsOutput::kEvents;
};

// Injected faults (every executor honours them), for studying and testing failure handling.
struct FaultsSpec {
  int node = -1;                   // -1: none
  int64_t crash_after_sends = -1;  // -1: never
  int64_t drop_every = 0;          // 0: none
  double delay_ms = 0;             // ms
};

// Churn: nodes leave and arrive while a run goes on (core/churn/schedule.h; algorithms that recover
// re-form their clusters, algo/roster.h). Simulation only in this version.
struct ChurnEventSpec {
  double at_s = 0;  // seconds since the run's start
  int leave = -1;   // the node (pool rank) that leaves then
};

struct ChurnSpec {
  double leave_per_hour =
      0;                  // every node's rate of leaving, per hour; 0: none (devices[] override)
  double rejoin_s = 0;    // a node that left comes back this long after, as a spare; 0: never
  double detect_s = 1.0;  // from a departure to its notice at every node (the failure detector)
  std::vector<ChurnEventSpec> event;  // departures at given times, besides the drawn ones
  bool enabled(const std::vector<DeviceGroup>& devices) const;
};

// Checkpoints (core/checkpoint/): every `every` updates (a multiple of training.average_every, at
// an averaging round, pipelines drained) every node that trains keeps its stage's state, and
// `ravnest sim|real --resume RUN` continues the run from the last checkpoint it completed.
struct CheckpointSpec {
  int64_t every = 0;  // updates between checkpoints; 0: none
  std::string dir;    // where they go; "": the run folder's checkpoints/
  bool enabled() const { return every > 0; }
};

struct Scenario {
  std::string name = "scenario";
  uint64_t seed = 1;
  // Time dilation k >= 1: every device runs k times slower (rates / k, latencies and per-operation
  // costs x k), so that a host too small for the scenario keeps up (ravnest validate). Loading
  // copies it into every DeviceGroup, whose accessors apply it.
  double dilation = 1;
  std::string source;  // the file it came from, for messages
  std::vector<DeviceGroup> devices;
  ModelSpec model;
  DataSpec data;
  TrainingSpec training;
  PlannerSpec planner;
  NetworkSpec network;
  SimSpec sim;
  RealSpec real;
  OutputSpec output;
  FaultsSpec faults;
  ChurnSpec churn;
  CheckpointSpec checkpoint;
  // Dotted key ("training.algorithm", "devices[1].up_mbps", "model") -> the line of `source` where
  // it was given. Keys that were defaulted or came from --set are absent.
  std::map<std::string, int> key_lines;  // the line of each key given; 0: given by --set

  // real.timeout_s on the wall clock: dilated like every other time of the scenario.
  Seconds peer_timeout_s() const { return real.timeout_s * dilation; }
  int node_count() const;
  // Nodes present when the run starts (those of groups without join_at_s): ranks [0, n).
  int initial_node_count() const;
  // The device group of node `rank` (nodes are numbered group by group, in file order).
  const DeviceGroup& device_of(int rank) const;
  // Nodes may leave during the run: churn in the simulator, or a real run that recovers lost
  // ranks (real.on_peer_loss = "recover"); a spare may then take a stage.
  bool nodes_may_leave() const;
  // Where `dotted_key` was given, for messages: "quick.toml:12", or "quick.toml" when it was
  // defaulted or came from --set. Checks outside the scenario module throw
  // ScenarioError(s.where(key), key, what).
  std::string where(const std::string& dotted_key) const;
  // Runs `f`, rethrowing a KeyError (bad input found from the keys alone) as a ScenarioError at
  // the key's line in this scenario.
  template <class F>
  auto at_key(F&& f) const -> decltype(f()) {
    try {
      return f();
    } catch (const KeyError& e) {
      throw ScenarioError(where(e.key()), e.key(), e.problem());
    }
  }
};

// A run folder's scenario.toml (to_toml's text) names the file it was resolved from on its first
// line: that source, or "" if `path` has no such line. A resumed run keeps it (the same
// experiment).
std::string resolved_source(const std::string& path);

// Loads and validates `path`, applying `overrides` ("training.lr=0.1") first.
Scenario load_scenario(const std::string& path, const std::vector<std::string>& overrides = {});
// Same, from text (tests); `source` names it in messages.
Scenario parse_scenario(const std::string& text, const std::string& source,
                        const std::vector<std::string>& overrides = {});
// The resolved scenario (every key, defaults filled in) as TOML; parse_scenario() reads it back.
std::string to_toml(const Scenario& s);

}  // namespace rv
