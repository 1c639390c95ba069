#include "core/scenario/keys.h"

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <limits>
#include <sstream>
#include <type_traits>
#include <utility>

namespace rv {
namespace {

constexpr int64_t kMaxNodes = 100000;
constexpr int64_t kMaxCount = int64_t(1) << 40;  // steps, samples, sends
constexpr int64_t kMaxWidth = int64_t(1) << 20;  // layer widths, batch sizes, features
constexpr int64_t kMaxInt64 = std::numeric_limits<int64_t>::max();

// Whether a string or list key may be given empty.
enum class Empty { kAllowed, kRefused };

// A member's value as a KeyValue (integers of every width as int64_t), and back.
// A Toggle reads as its word ("auto") or a bool.
constexpr const char* kAutoWord = "auto";

template <typename T>
KeyValue to_value(const T& v) {
  if constexpr (std::is_same_v<T, Toggle>)
    return v == Toggle::kAuto ? KeyValue(std::string(kAutoWord)) : KeyValue(v == Toggle::kOn);
  else if constexpr (is_choice_v<T>)
    return KeyValue(std::string(name_of(v)));
  else if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>)
    return KeyValue(static_cast<int64_t>(v));
  else
    return KeyValue(v);
}

template <typename T>
T from_value(const KeyValue& v) {
  if constexpr (std::is_same_v<T, Toggle>) {
    if (std::holds_alternative<std::string>(v)) return Toggle::kAuto;
    return std::get<bool>(v) ? Toggle::kOn : Toggle::kOff;
  } else if constexpr (is_choice_v<T>) {
    return *choice_of<T>(std::get<std::string>(v));  // the reader checked the word
  } else if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>)
    return static_cast<T>(std::get<int64_t>(v));
  else
    return std::get<T>(v);
}

// The rows of one table whose keys live in `Struct`; `locate(scenario, index)` returns the struct
// (const or not, as the scenario). Each method adds one row; the default comes from `Struct{}`.
template <typename Struct, typename Locate>
class Rows {
 public:
  Rows(std::vector<KeySpec>& out, std::string table, Locate locate)
      : out_(out), table_(std::move(table)), locate_(std::move(locate)) {}

  Rows& text(const char* name, std::string Struct::*m, const char* help,
             Empty empty = Empty::kAllowed) {
    add(name, KeyType::kString, m, "", help).allow_empty = empty == Empty::kAllowed;
    return *this;
  }
  // One of the words of E's table (core/scenario/choice.h), stored as the enum.
  template <typename E>
  Rows& choice(const char* name, E Struct::*m, const char* help) {
    add(name, KeyType::kChoice, m, "", help).choices = choice_names<E>();
    return *this;
  }
  Rows& flag(const char* name, bool Struct::*m, const char* help) {
    add(name, KeyType::kBool, m, "", help);
    return *this;
  }
  // "auto" (the executor decides), true or false.
  Rows& toggle(const char* name, Toggle Struct::*m, const char* help) {
    add(name, KeyType::kToggle, m, "", help).word = kAutoWord;
    return *this;
  }
  template <typename Int>
  Rows& integer(const char* name, Int Struct::*m, int64_t lo, int64_t hi, const char* help) {
    KeySpec& k = add(name, KeyType::kInteger, m, "", help);
    k.lo = lo;
    k.hi = hi;
    return *this;
  }
  // A number in [lo, hi].
  Rows& real(const char* name, double Struct::*m, double lo, double hi, const char* unit,
             const char* help) {
    KeySpec& k = add(name, KeyType::kReal, m, unit, help);
    k.real_lo = lo;
    k.real_hi = hi;
    return *this;
  }
  // A number in (0, hi].
  Rows& positive(const char* name, double Struct::*m, double hi, const char* unit,
                 const char* help) {
    real(name, m, 0.0, hi, unit, help);
    out_.back().lo_open = true;
    return *this;
  }
  Rows& integers(const char* name, std::vector<int64_t> Struct::*m, int64_t lo, int64_t hi,
                 Empty empty, const char* help) {
    KeySpec& k = add(name, KeyType::kIntegerList, m, "", help);
    k.lo = lo;
    k.hi = hi;
    k.allow_empty = empty == Empty::kAllowed;
    return *this;
  }
  // `word` (stored as 0) or an integer in [lo, hi].
  template <typename Int>
  Rows& integer_or_word(const char* name, Int Struct::*m, const char* word, int64_t lo, int64_t hi,
                        const char* help) {
    KeySpec& k = add(name, KeyType::kIntegerOrWord, m, "", help);
    k.word = word;
    k.lo = lo;
    k.hi = hi;
    return *this;
  }
  // Replaces the last row's default by one that depends on the element's index.
  Rows& indexed_default(std::function<KeyValue(size_t)> default_at, const char* text) {
    out_.back().default_at = std::move(default_at);
    out_.back().default_text = text;
    return *this;
  }

 private:
  template <typename T>
  KeySpec& add(const char* name, KeyType type, T Struct::*m, const char* unit, const char* help) {
    KeySpec k;
    k.table = table_;
    k.name = name;
    k.type = type;
    k.unit = unit;
    k.help = help;
    const KeyValue def = to_value(Struct{}.*m);
    k.default_at = [def](size_t) { return def; };
    Locate locate = locate_;
    k.get = [locate, m](const Scenario& s, size_t i) { return to_value(locate(s, i).*m); };
    k.set = [locate, m](Scenario& s, size_t i, const KeyValue& v) {
      locate(s, i).*m = from_value<T>(v);
    };
    out_.push_back(std::move(k));
    return out_.back();
  }

  std::vector<KeySpec>& out_;
  std::string table_;
  Locate locate_;
};

// Collects tables and their rows; each table is named by the Scenario member that holds it.
struct Catalog {
  std::vector<TableSpec> tables;
  std::vector<KeySpec> keys;

  auto top() {
    tables.push_back(TableSpec{"", false, false, {}, {}});
    auto locate = [](auto& s, size_t) -> auto& { return s; };
    return Rows<Scenario, decltype(locate)>(keys, "", locate);
  }

  template <typename Struct>
  auto table(const char* path, Struct Scenario::*part) {
    tables.push_back(TableSpec{path, false, false, {}, {}});
    auto locate = [part](auto& s, size_t) -> auto& { return s.*part; };
    return Rows<Struct, decltype(locate)>(keys, path, locate);
  }

  // [[path]], held in the vector `(s.*parent).*part`.
  template <typename Parent, typename Struct>
  auto array(const char* path, bool required, Parent Scenario::*parent,
             std::vector<Struct> Parent::*part) {
    tables.push_back(TableSpec{path, true, required,
                               [=](const Scenario& s) { return ((s.*parent).*part).size(); },
                               [=](Scenario& s, size_t n) { ((s.*parent).*part).resize(n); }});
    auto locate = [=](auto& s, size_t i) -> auto& { return ((s.*parent).*part)[i]; };
    return Rows<Struct, decltype(locate)>(keys, path, locate);
  }
  // [[path]], held in the vector `s.*part`.
  template <typename Struct>
  auto array(const char* path, bool required, std::vector<Struct> Scenario::*part) {
    tables.push_back(TableSpec{path, true, required,
                               [=](const Scenario& s) { return (s.*part).size(); },
                               [=](Scenario& s, size_t n) { (s.*part).resize(n); }});
    auto locate = [=](auto& s, size_t i) -> auto& { return (s.*part)[i]; };
    return Rows<Struct, decltype(locate)>(keys, path, locate);
  }
};

constexpr bool kRequired = true;  // arrays of tables: at least one element
constexpr bool kOptional = false;

void add_top_and_devices(Catalog& c) {
  c.top()
      .text("name", &Scenario::name,
            "the scenario's name, at most 128 letters, digits, `.`, `_` and `-`, not starting "
            "with `.` or `-`: run folders go to `<output.dir>/<name>/`",
            Empty::kRefused)
      .integer("seed", &Scenario::seed, 0, kMaxInt64,
               "random seed: data, initial weights, planner search")
      .real(
          "dilation", &Scenario::dilation, 1.0, 1000.0, "",
          "time dilation k: every device k times slower (tflops and bandwidths / k, latencies and "
          "per-operation costs x k); `ravnest validate` sets it so that this host keeps up");
  c.array("devices", kRequired, &Scenario::devices)
      .text("name", &DeviceGroup::name, "the group's name, in plans and outputs")
      .indexed_default([](size_t i) { return KeyValue("device" + std::to_string(i)); },
                       "\"device<i>\"")
      .integer("count", &DeviceGroup::count, 1, kMaxNodes, "identical devices (nodes) in the group")
      .positive("tflops", &DeviceGroup::tflops, 1e6, "TFLOPS", "sustained compute speed")
      .positive("ram_gb", &DeviceGroup::ram_gb, 1e6, "GiB", "memory available for training")
      .positive("up_mbps", &DeviceGroup::up_mbps, 1e9, "Mbit/s", "upload bandwidth to the core")
      .positive("down_mbps", &DeviceGroup::down_mbps, 1e9, "Mbit/s",
                "download bandwidth from the core")
      .real("latency_ms", &DeviceGroup::latency_ms, 0.0, 1e6, "ms",
            "one-way latency between the device and the core")
      .real("buffer_ms", &DeviceGroup::buffer_ms, 0.0, 1e5, "ms",
            "real.shaper = \"kernel\": the drop-tail buffer in front of each of the device's "
            "links (a home router's), in ms at the link's rate; 0: the kernel's default queue. "
            "Not modeled by the simulator, the planner or the user-space shaper")
      .integer("buffer_packets", &DeviceGroup::buffer_packets, 0, 1000000,
               "real.shaper = \"kernel\": the drop-tail buffer in front of each of the device's "
               "links, in packets (of at most one MTU: the kernel shaper then sends no larger "
               "ones); 0: the kernel's default queue")
      .text("profile", &DeviceGroup::profile,
            "compute profile file (`ravnest calibrate --out`, or profiles/), relative to the "
            "scenario's "
            "folder: fixed cost per operation and efficiency per pass, layer kind and operation "
            "class, "
            "at this device's tflops; \"\": every flop at tflops")
      .real("efficiency", &DeviceGroup::efficiency, 0.0, 1.5, "",
            "achieved fraction of tflops for every operation, replacing the profile's efficiencies "
            "(its fixed costs stay), e.g. a published achieved/peak ratio; 0: the profile's")
      .text("region", &DeviceGroup::region,
            "network.topology = \"regions\": the region whose core the device reaches over its "
            "own links (required there; refused under \"star\")")
      .real("leave_per_hour", &DeviceGroup::leave_per_hour, -1.0, 3600.0, "1/h",
            "churn: the rate at which each of the group's nodes leaves (exponential sessions, mean "
            "1 / rate hours); -1: churn.leave_per_hour")
      .integer(
          "gpu", &DeviceGroup::gpu, -1, 1023,
          "real runs with real.device cuda (or auto on a GPU machine): the index of the GPU the "
          "group's ranks compute on; -1: rank r takes GPU r mod the GPUs visible")
      .flag("client_only", &DeviceGroup::client_only,
            "the group's peers accept no inbound connections (behind NAT): an all-reduce that "
            "aggregates at the peers gives them no part to aggregate")
      .real("join_at_s", &DeviceGroup::join_at_s, 0.0, 1e9, "s",
            "churn: > 0: the group's nodes arrive at this second, as spares without state (the "
            "planner plans without them); such groups come after all others; 0: present from the "
            "start");
}

void add_model(Catalog& c) {
  c.table("model", &Scenario::model)
      .choice(
          "kind", &ModelSpec::kind,
          "mlp: fully connected layers; cnn: convolution blocks, then fully connected layers; "
          "blocks: the additive block model of a problem (data.kind quadratic or logistic): "
          "model.blocks parameter blocks, each adding its columns' share of X w to a running sum; "
          "transformer: a GPT-style decoder over token sequences (data.kind sort or text): token "
          "and position embeddings, model.layers blocks of causal self-attention and an MLP, the "
          "final LayerNorm and a linear head; stages cut between them")
      .integers("hidden", &ModelSpec::hidden, 1, kMaxWidth, Empty::kAllowed,
                "mlp: widths of the hidden layers; cnn: widths of the hidden layers after the "
                "convolutions")
      .integers("channels", &ModelSpec::channels, 1, 1 << 16, Empty::kRefused,
                "cnn: output channels of each convolution block")
      .integer("kernel", &ModelSpec::kernel, 1, 15,
               "cnn: convolution kernel size, odd (padding keeps the size)")
      .flag("batch_norm", &ModelSpec::batch_norm, "cnn: BatchNorm after each convolution")
      .real("dropout", &ModelSpec::dropout, 0.0, 0.95, "",
            "dropout probability before each hidden linear layer")
      .choice("head", &ModelSpec::head,
              "linear: a final linear layer to the task's outputs (classes, regression targets); "
              "none: the model's last layer must already produce them")
      .integer("blocks", &ModelSpec::blocks, 1, kMaxWidth,
               "blocks: parameter blocks (layers), at most data.features; stages cut between them")
      .integer("layers", &ModelSpec::layers, 0, kMaxWidth, "transformer: decoder blocks")
      .integer("d_model", &ModelSpec::d_model, 1, kMaxWidth,
               "transformer: width of the residual stream")
      .integer("heads", &ModelSpec::heads, 1, kMaxWidth,
               "transformer: attention heads (d_model a multiple of them)")
      .integer("d_ff", &ModelSpec::d_ff, 0, kMaxWidth,
               "transformer: the MLP's hidden width; 0: 4 d_model")
      .integer(
          "seq_len", &ModelSpec::seq_len, 0, kMaxWidth,
          "transformer: positions the model embeds; 0: the data's sequence length (at least that)")
      .integer("vocab", &ModelSpec::vocab, 0, kMaxWidth,
               "transformer: token ids the model embeds and predicts; 0: the data's vocabulary (at "
               "least that)");
}

void add_data(Catalog& c) {
  c.table("data", &Scenario::data)
      .choice(
          "kind", &DataSpec::kind,
          "synthetic: noisy images around one centre per class; fashion-mnist, digits: "
          "Debian's files; regression: synthetic linear regression; quadratic, logistic: problems "
          "with known constants for model.kind = \"blocks\" (docs/theory.md); sort: minGPT's "
          "sorting task (data.length digits, then the same sorted), generated from the seed; text: "
          "character-level language modelling on the UTF-8 file data.path (next-token prediction, "
          "for model.kind = \"transformer\")")
      .choice("partition", &DataSpec::partition,
              "how the training set is split between the clusters (and between the replicas of "
              "sync-dp-like algorithms), each training on its own part: iid: a seeded permutation "
              "cut in equal parts; by-class: the samples sorted by class, then cut in equal parts "
              "(each part a few classes); dirichlet: each class's samples shared out in "
              "proportions drawn from a Dirichlet(data.dirichlet_alpha) (classification data "
              "only, as by-class)")
      .positive("dirichlet_alpha", &DataSpec::dirichlet_alpha, 1e6, "",
                "dirichlet: the concentration; small: each part holds few classes, large: every "
                "part close to the whole set's class mix")
      .integer("batch_size", &DataSpec::batch_size, 1, kMaxWidth, "samples per micro-batch")
      .integer("train_samples", &DataSpec::train_samples, 0, kMaxCount,
               "training samples used; 0: all (synthetic, regression, sort: 8192)")
      .integer("test_samples", &DataSpec::test_samples, 0, kMaxCount,
               "test samples used; 0: all (synthetic, regression: 2048; sort: 1024)")
      .text("path", &DataSpec::path,
            "the dataset's folder or file; empty: Debian's location (text: "
            "/usr/share/common-licenses/GPL-3)")
      .integer("side", &DataSpec::side, 2, 1024, "synthetic: images are 1 x side x side")
      .integer("classes", &DataSpec::classes, 2, kMaxNodes, "synthetic: number of classes")
      .real("noise", &DataSpec::noise, 0.0, 1e6, "",
            "synthetic: standard deviation of the noise around each class centre; regression: "
            "of the noise added to each target")
      .integer("features", &DataSpec::features, 1, kMaxWidth,
               "regression: input features per sample; quadratic, logistic: the dimension d")
      .integer("targets", &DataSpec::targets, 1, kMaxWidth, "regression: outputs per sample")
      .positive(
          "eig_min", &DataSpec::eig_min, 1e6, "",
          "quadratic: the Hessian's smallest eigenvalue; logistic: the features' covariance's "
          "(the spectrum is geometric up to eig_max)")
      .positive("eig_max", &DataSpec::eig_max, 1e6, "",
                "quadratic: the Hessian's largest eigenvalue, the smoothness L; logistic: the "
                "features' covariance's")
      .real(
          "sigma2", &DataSpec::sigma2, 0.0, 1e6, "",
          "quadratic: a sample's gradient noise E||n||^2 (a micro-batch of N samples: sigma2 / N)")
      .real("feature_mean", &DataSpec::feature_mean, 0.0, 1e3, "",
            "logistic: the length of the features' mean, a seeded direction (0: centred features, "
            "whose two classes are mirror images, so that no split by label makes the clusters' "
            "objectives differ)")
      .integer(
          "problem_seed", &DataSpec::problem_seed, 0, kMaxInt64,
          "quadratic, logistic: the problem (its rotation, minimiser, samples), apart from the "
          "run's seed (the noise and the sampling)")
      .integer("length", &DataSpec::length, 1, 1 << 20,
               "sort: digits per sequence (a sample: 2 length - 1 tokens)")
      .integer("digits", &DataSpec::digits, 2, 1 << 20, "sort: distinct digits, the vocabulary")
      .integer("seq_len", &DataSpec::seq_len, 1, 1 << 24, "text: characters per sample");
}

// Algorithm and all-reduce names are not listed here: the registry (algo/registry.h) validates
// training.algorithm and training.allreduce.
void add_training(Catalog& c) {
  c.table("training", &Scenario::training)
      .text("algorithm", &TrainingSpec::algorithm,
            "the algorithm, a name from the algorithm registry (`ravnest keys` lists them)",
            Empty::kRefused)
      .choice("optimizer", &TrainingSpec::optimizer, "the optimizer of every stage")
      .positive("lr", &TrainingSpec::lr, 100.0, "", "learning rate")
      .real("momentum", &TrainingSpec::momentum, 0.0, 0.9999, "", "sgd: momentum")
      .real("weight_decay", &TrainingSpec::weight_decay, 0.0, 1.0, "",
            "weight decay: L2 on the gradient (sgd, adam), decoupled from it (adamw)")
      .integer("steps", &TrainingSpec::steps, 1, kMaxCount, "optimizer updates on every stage")
      .integer_or_word("max_in_flight", &TrainingSpec::max_in_flight, "stages", 1, 1000000,
                       "asynchronous pipelines: unfinished micro-batches allowed; stages: as many "
                       "as the pipeline has stages")
      .flag("weight_stashing", &TrainingSpec::weight_stashing,
            "asynchronous pipelines: the backward pass uses its forward pass's weights")
      .integer("micro_batches", &TrainingSpec::micro_batches, 1, kMaxWidth,
               "flushing pipelines: micro-batches per update")
      .integer("average_every", &TrainingSpec::average_every, 1, kMaxCount,
               "local updates between cross-cluster averagings of parameters")
      .choice("averaging", &TrainingSpec::averaging,
              "bulk-sync: each cluster drains, then all average; overlapped: averaging runs while "
              "training goes on, the averaged difference is applied when it is done")
      .text("allreduce", &TrainingSpec::allreduce,
            "how clusters average parameters or gradients, a name from the all-reduce registry "
            "(`ravnest keys` describes each)",
            Empty::kRefused)
      .real(
          "ring_piece_mb", &TrainingSpec::ring_piece_mb, 0.0, 1e6, "MB",
          "multi-ring and single-ring: a segment larger than this (all rows) goes round its ring "
          "in pieces that move on independently, so that each piece's addition overlaps the next "
          "pieces' transfers (as Gloo's and NCCL's rings do); 0: each segment whole, as Ravnest's "
          "reference")
      .flag("average_optimizer_state", &TrainingSpec::average_optimizer_state,
            "averaging parameters also averages the optimizer's state (momentum, Adam's moments)")
      .integer("eval_every", &TrainingSpec::eval_every, 0, kMaxCount,
               "updates between evaluations; 0: only at the end")
      .integer("eval_samples", &TrainingSpec::eval_samples, 0, kMaxCount,
               "test samples per evaluation; 0: the whole test set");
}

void add_planner(Catalog& c) {
  c.table("planner", &Scenario::planner)
      .choice("method", &PlannerSpec::method,
              "manual: stages in proportion to RAM or as given, one cluster unless "
              "`[[planner.cluster]]`; greedy: nodes dealt into clusters by speed; "
              "ga: maximises the predicted global throughput; "
              "ravnest-ga: the reference's genetic algorithm; "
              "exhaustive: the optimum, up to 12 nodes")
      .integer_or_word("clusters", &PlannerSpec::clusters, "auto", 1, kMaxNodes,
                       "clusters to form; auto: the planner chooses (manual: one)")
      .integers("stage_layers", &PlannerSpec::stage_layers, 1, kMaxWidth, Empty::kAllowed,
                "manual: layers of each stage in pipeline order; empty: in proportion to RAM")
      .integer("population", &PlannerSpec::population, 0, kMaxNodes,
               "ga: individuals; 0: by pool size")
      .integer("generations", &PlannerSpec::generations, 0, 1000000,
               "ga: generations; 0: by pool size")
      .integer(
          "evaluations", &PlannerSpec::evaluations, 0, kMaxCount,
          "ga, ravnest-ga: the search's budget of scored individuals, which ends it after fewer "
          "generations where population x generations is more; 0: by pool size (ga: 20,000 or "
          "2e7 / nodes, ravnest-ga: 100,000 or 2e8 / nodes, whichever is fewer, at least 200; "
          "plans stay deterministic)")
      .positive("time_limit_s", &PlannerSpec::time_limit_s, 86400.0, "s",
                "ga, ravnest-ga: a safety net: the search ends after this many wall seconds with "
                "the best plan so far, recorded in plan.json (\"search\": the plan then depends on "
                "the machine's speed)");
  c.array("planner.cluster", kOptional, &Scenario::planner, &PlannerSpec::cluster)
      .integers("nodes", &PlannerSpec::Cluster::nodes, 0, kMaxNodes, Empty::kRefused,
                "manual: the cluster's nodes in pipeline order (required)")
      .integers("stage_layers", &PlannerSpec::Cluster::stage_layers, 1, kMaxWidth, Empty::kAllowed,
                "manual: layers of each of the cluster's stages; empty: in proportion to RAM");
}

void add_network(Catalog& c) {
  c.table("network", &Scenario::network)
      .choice("topology", &NetworkSpec::topology,
              "star: each device reaches a common core through its own links; regions: each "
              "device reaches its region's core (devices[].region), and the regions' cores are "
              "joined by `[[network.link]]`: a message between regions crosses the sender's "
              "uplink, the link between the regions and the receiver's downlink")
      .choice("model", &NetworkSpec::model,
              "tcp: SimGrid's CM02 at TCP's goodput (bandwidth x 0.962, measured), one latency per "
              "stream: one connection per pair of nodes, TCP's window (2.79 MB per round trip) and "
              "BBR's pacing of small messages (the warm floor), both measured "
              "(docs/network-model.md); lv08: SimGrid's "
              "calibration for LAN TCP (latency x "
              "13.01, bandwidth x 0.97, window cap, cross-traffic); ideal: CM02, no TCP effects")
      .real("bandwidth_factor", &NetworkSpec::bandwidth_factor, 0.0, 10.0, "",
            "every link's bandwidth times this, in the simulator, the planner and the user-space "
            "emulator; 0: the model's own (tcp 0.962, lv08 0.97, ideal 1)")
      .real("latency_factor", &NetworkSpec::latency_factor, 0.0, 1000.0, "",
            "every link's latency times this, likewise; 0: the model's own (tcp 1, lv08 13.01, "
            "ideal 1)")
      .text("platform", &NetworkSpec::platform,
            "simulation only: a SimGrid platform file (XML, or a .so), relative to the scenario's "
            "folder, "
            "whose hosts and routes replace the devices' links in `ravnest sim`; node i of a group "
            "of "
            "one is the host named as the group, of a larger group `<name>-<i>` (i from 0 in the "
            "group); compute still follows the devices (tflops, profile), and the planner plans "
            "with the devices' own links. \"\": the devices' links");
  c.array("network.link", kOptional, &Scenario::network, &NetworkSpec::link)
      .text("a", &RegionLinkSpec::a, "topology \"regions\": one region of the pair",
            Empty::kRefused)
      .text("b", &RegionLinkSpec::b, "the other region", Empty::kRefused)
      .real("latency_ms", &RegionLinkSpec::latency_ms, 0.0, 1e6, "ms",
            "one-way latency between the two regions' cores")
      .positive("mbps", &RegionLinkSpec::mbps, 1e9, "Mbit/s",
                "bandwidth of the link each way, shared by every flow between the two regions "
                "in that direction");
}

void add_sim_and_real(Catalog& c) {
  c.table("sim", &Scenario::sim)
      .choice("mode", &SimSpec::mode, "numeric: real maths, modeled time; timing: no maths")
      .integer("shared_cores", &SimSpec::shared_cores, 0, 4096,
               "> 0: every node computes on one machine of this many cores (a real run on one "
               "host): a node's span on at most its profile's threads of cores, the cores shared "
               "equally among the nodes computing at once; 0: each node a device of its own "
               "(the planner plans so either way)");
  c.table("real", &Scenario::real)
      .positive("timeout_s", &RealSpec::timeout_s, 86400.0, "s",
                "a peer silent for this long is considered dead (times the dilation)")
      .text("master_addr", &RealSpec::master_addr,
            "address of rank 0, where peers meet (a rank started by hand uses it without "
            "MASTER_ADDR or --master-addr)",
            Empty::kRefused)
      .integer("master_port", &RealSpec::master_port, 0, 65535,
               "port of the rendezvous store, where peers meet; 0: the system picks a free one "
               "(ravnest real)")
      .flag("emulate_speed", &RealSpec::emulate_speed,
            "stretch compute to the modeled time of each device")
      .toggle("emulate_network", &RealSpec::emulate_network,
              "hold every message for the time the scenario's links take (the simulator's star, "
              "network.model = \"ideal\"); auto: on under `ravnest real` (every rank on this "
              "machine), off for ranks started by hand (`ravnest node`) and the loopback executor")
      .choice("shaper", &RealSpec::shaper,
              "user: the launcher holds each message for its links' time (no root); kernel: "
              "each node in a network namespace, links shaped by htb, real TCP over them, each "
              "link's latency on the packet path (root; rv-delay-line; TCP sees the round trip; "
              "shapes allreduce = \"gloo\" too)")
      .choice("on_peer_loss", &RealSpec::on_peer_loss,
              "fail: a rank that loses a peer stops the run (exit 1); recover: an algorithm that "
              "recovers from churn goes on without it as under churn (its cluster sits out until a "
              "spare, an idle rank of the "
              "plan or a replacement process started with `ravnest node --join`, takes the lost "
              "stage and fetches its state; rank 0 must survive)")
      .choice(
          "device", &RealSpec::device,
          "where each rank computes: cuda keeps its stage, optimizer state and activations on a "
          "GPU (devices[].gpu; messages go through pinned host memory) and is refused where the "
          "LibTorch this was built against has no CUDA or no GPU is visible; auto: cuda where it "
          "can, else cpu");
}

void add_outputs_and_runs(Catalog& c) {
  c.table("output", &Scenario::output)
      .text("dir", &OutputSpec::dir, "run folders go to `<dir>/<name>/<executor>-<timestamp>/`",
            Empty::kRefused)
      .flag("trace", &OutputSpec::trace, "write trace.json (Chrome trace)")
      .integer("trace_nodes", &OutputSpec::trace_nodes, 0, kMaxNodes,
               "0: trace.json holds every node; n: whole clusters spread evenly over the plan, "
               "up to n nodes (at least one cluster), for runs of thousands of nodes")
      .choice("metrics", &OutputSpec::metrics,
              "events: metrics.csv, one row per event; summary: node_metrics.csv instead, one row "
              "per node (count and seconds of each span kind, messages and bytes each way), and "
              "the simulator keeps an untraced node's sends, receives and waits as totals only "
              "(reports and validate need events)");
  c.table("churn", &Scenario::churn)
      .real("leave_per_hour", &ChurnSpec::leave_per_hour, 0.0, 3600.0, "1/h",
            "every node's rate of leaving per hour (seeded exponential sessions; 0.1: 10% of the "
            "nodes per hour); 0: none; devices[].leave_per_hour overrides it (simulation only)")
      .real("rejoin_s", &ChurnSpec::rejoin_s, 0.0, 1e9, "s",
            "a node that left comes back this long after, as a spare without state; 0: never")
      .positive("detect_s", &ChurnSpec::detect_s, 1e6, "s",
                "from a departure to its notice at every node (the failure detector's timeout)");
  c.array("churn.event", kOptional, &Scenario::churn, &ChurnSpec::event)
      .real("at_s", &ChurnEventSpec::at_s, 0.0, 1e9, "s", "when, in seconds since the run's start")
      .integer("leave", &ChurnEventSpec::leave, -1, kMaxNodes,
               "the node (pool rank) that leaves (required)");
  c.table("checkpoint", &Scenario::checkpoint)
      .integer(
          "every", &CheckpointSpec::every, 0, kMaxCount,
          "every this many updates (a multiple of training.average_every) each node that "
          "trains writes its stage's parameters, optimizer state and counters; `ravnest sim|real "
          "--resume RUN` continues from the last one; 0: none (algorithms that take checkpoints)")
      .text("dir", &CheckpointSpec::dir,
            "where checkpoints go (relative: to the working folder); \"\": the run folder's "
            "checkpoints/",
            Empty::kAllowed);
  c.table("faults", &Scenario::faults)
      .integer("node", &FaultsSpec::node, -1, kMaxNodes, "the node that misbehaves; -1: none")
      .integer("crash_after_sends", &FaultsSpec::crash_after_sends, -1, kMaxCount,
               "it fails at this send; -1: never")
      .integer("drop_every", &FaultsSpec::drop_every, 0, kMaxCount,
               "it drops every k-th message it sends; 0: none")
      .real("delay_ms", &FaultsSpec::delay_ms, 0.0, 1e9, "ms",
            "it waits this long before each send");
}

const Catalog& catalog() {
  static const Catalog kCatalog = [] {
    Catalog c;
    add_top_and_devices(c);
    add_model(c);
    add_data(c);
    add_training(c);
    add_planner(c);
    add_network(c);
    add_sim_and_real(c);
    add_outputs_and_runs(c);
    for (KeySpec& k : c.keys)
      if (k.default_text.empty()) k.default_text = toml_value_text(k, k.default_at(0));
    return c;
  }();
  return kCatalog;
}

// ---- TOML values ----

// A TOML basic string: quotes, backslashes and control characters escaped.
std::string toml_string(const std::string& s) {
  std::string out = "\"";
  for (char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    if (ch == '"' || ch == '\\') {
      out += '\\';
      out += ch;
    } else if (ch == '\n') {
      out += "\\n";
    } else if (ch == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else {
      out += ch;
    }
  }
  return out + "\"";
}

// The shortest text that reads back to `v`, as a TOML float ("100.0", "0.05", "1e+06").
std::string toml_real(double v) {
  char buf[64];
  const auto end = std::to_chars(buf, buf + sizeof buf, v).ptr;
  std::string out(buf, end);
  if (out.find_first_of(".e") == std::string::npos) out += ".0";
  return out;
}

// ---- documentation ----

std::string real_text(double v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

std::string int_text(int64_t v) {
  if (v == kMaxInt64) return "2^63-1";
  if (v >= (int64_t(1) << 20) && (v & (v - 1)) == 0) {
    int bits = 0;
    while ((int64_t(1) << bits) < v) ++bits;
    return "2^" + std::to_string(bits);
  }
  return std::to_string(v);
}

std::string joined(const std::vector<std::string>& v) {
  std::string out;
  for (const auto& x : v) out += (out.empty() ? "" : ", ") + x;
  return out;
}

bool is_array_table(const std::string& path) {
  for (const TableSpec& t : scenario_tables())
    if (t.path == path) return t.is_array;
  return false;
}

// The key as the documentation names it: "training.lr", "devices[].count".
std::string doc_key(const KeySpec& k) {
  if (k.table.empty()) return k.name;
  return k.table + (is_array_table(k.table) ? "[]." : ".") + k.name;
}

// Keys given extra choices read as choices.
std::string type_text(const KeySpec& k, const ExtraChoices& extra) {
  if (extra.count(k.dotted())) return "choice";
  switch (k.type) {
    case KeyType::kString:
      return "string";
    case KeyType::kChoice:
      return "choice";
    case KeyType::kBool:
      return "bool";
    case KeyType::kInteger:
      return "integer";
    case KeyType::kReal:
      return "real";
    case KeyType::kIntegerList:
      return "integer list";
    case KeyType::kIntegerOrWord:
      return "\"" + k.word + "\" or integer";
    case KeyType::kToggle:
      return "\"" + k.word + "\" or bool";
  }
  return "";
}

std::string range_text(const KeySpec& k, const ExtraChoices& extra) {
  auto it = extra.find(k.dotted());
  if (it != extra.end()) return joined(it->second);
  const std::string ints = "[" + int_text(k.lo) + ", " + int_text(k.hi) + "]";
  switch (k.type) {
    case KeyType::kString:
      return k.allow_empty ? "" : "non-empty";
    case KeyType::kChoice:
      return joined(k.choices);
    case KeyType::kBool:
      return "true, false";
    case KeyType::kToggle:
      return k.word + ", true, false";
    case KeyType::kInteger:
    case KeyType::kIntegerOrWord:
      return ints;
    case KeyType::kReal:
      return (k.lo_open ? "(" : "[") + real_text(k.real_lo) + ", " + real_text(k.real_hi) + "]";
    case KeyType::kIntegerList:
      return "each in " + ints + (k.allow_empty ? "" : ", non-empty");
  }
  return "";
}

std::string cell(const std::string& text) {
  std::string out;
  for (char ch : text) out += ch == '|' ? std::string("\\|") : std::string(1, ch);
  return out;
}

}  // namespace

std::string KeySpec::dotted(size_t index) const {
  if (table.empty()) return name;
  if (is_array_table(table)) return table + "[" + std::to_string(index) + "]." + name;
  return table + "." + name;
}

const std::vector<TableSpec>& scenario_tables() { return catalog().tables; }
const std::vector<KeySpec>& scenario_keys() { return catalog().keys; }

std::string toml_value_text(const KeySpec& key, const KeyValue& value) {
  if (key.type == KeyType::kIntegerOrWord && std::get<int64_t>(value) == 0)
    return toml_string(key.word);
  if (const auto* s = std::get_if<std::string>(&value)) return toml_string(*s);
  if (const auto* b = std::get_if<bool>(&value)) return *b ? "true" : "false";
  if (const auto* i = std::get_if<int64_t>(&value)) return std::to_string(*i);
  if (const auto* d = std::get_if<double>(&value)) return toml_real(*d);
  std::string out = "[";
  for (int64_t x : std::get<std::vector<int64_t>>(value))
    out += (out.size() > 1 ? ", " : "") + std::to_string(x);
  return out + "]";
}

namespace {

// The table's rows with `extra` after the last row of their table.
std::vector<KeySpec> with_extra_rows(const std::vector<KeySpec>& extra) {
  std::vector<KeySpec> out;
  const std::vector<KeySpec>& keys = scenario_keys();
  for (size_t i = 0; i < keys.size(); ++i) {
    out.push_back(keys[i]);
    if (i + 1 < keys.size() && keys[i + 1].table == keys[i].table) continue;
    for (const KeySpec& e : extra)
      if (e.table == keys[i].table) out.push_back(e);
  }
  return out;
}

KeySpec training_key(const char* name, KeyType type, const KeyValue& default_value,
                     const char* help) {
  KeySpec k;
  k.table = "training";
  k.name = name;
  k.type = type;
  k.help = help;
  k.default_text = toml_value_text(k, default_value);
  k.default_at = [default_value](size_t) { return default_value; };
  return k;
}

}  // namespace

KeySpec training_real_key(const char* name, double default_value, double lo, double hi,
                          bool lo_open, const char* help) {
  KeySpec k = training_key(name, KeyType::kReal, KeyValue(default_value), help);
  k.real_lo = lo;
  k.real_hi = hi;
  k.lo_open = lo_open;
  return k;
}

KeySpec training_integer_key(const char* name, int64_t default_value, int64_t lo, int64_t hi,
                             const char* help) {
  KeySpec k = training_key(name, KeyType::kInteger, KeyValue(default_value), help);
  k.lo = lo;
  k.hi = hi;
  return k;
}

KeySpec training_flag_key(const char* name, bool default_value, const char* help) {
  return training_key(name, KeyType::kBool, KeyValue(default_value), help);
}

KeyValue stored_value(const TrainingSpec& training, const KeySpec& key) {
  auto it = training.algorithm_keys.find(key.name);
  if (it == training.algorithm_keys.end()) return key.default_at(0);
  // Checked already (resolve_algorithm_keys leaves each of its key's type): as it is. Cost-model
  // hooks read these in the planner's loops.
  const bool checked =
      (key.type == KeyType::kReal && std::holds_alternative<double>(it->second)) ||
      (key.type == KeyType::kInteger && std::holds_alternative<int64_t>(it->second)) ||
      (key.type == KeyType::kBool && std::holds_alternative<bool>(it->second));
  if (checked) return it->second;
  return read_key_value(key, it->second, "training." + key.name);
}

std::string keys_markdown(const ExtraChoices& extra_choices,
                          const std::vector<KeySpec>& extra_rows) {
  std::ostringstream os;
  os << "| key | type | unit | default | range or choices | help |\n";
  os << "|---|---|---|---|---|---|\n";
  for (const KeySpec& k : with_extra_rows(extra_rows)) {
    const std::string range = range_text(k, extra_choices);
    os << "| `" << doc_key(k) << "` | " << type_text(k, extra_choices) << " | " << cell(k.unit)
       << " | `" << cell(k.default_text) << "` | " << cell(range) << " | " << cell(k.help)
       << " |\n";
  }
  return os.str();
}

std::string keys_text(const ExtraChoices& extra_choices, const std::vector<KeySpec>& extra_rows) {
  std::ostringstream os;
  const std::vector<KeySpec> rows = with_extra_rows(extra_rows);
  const std::string* table = nullptr;
  for (const KeySpec& k : rows) {
    if (!table || *table != k.table) {
      table = &k.table;
      os << (table->empty()            ? "(top level)"
             : is_array_table(k.table) ? "[[" + k.table + "]]"
                                       : "[" + k.table + "]")
         << "\n";
    }
    std::string line = "  " + k.name + " = " + k.default_text;
    line.resize(std::max<size_t>(line.size() + 2, 34), ' ');
    const std::string range = range_text(k, extra_choices);
    os << line << type_text(k, extra_choices) << (range.empty() ? "" : ": " + range)
       << (k.unit.empty() ? "" : ", " + k.unit) << "\n      " << k.help << "\n";
  }
  return os.str();
}

}  // namespace rv
