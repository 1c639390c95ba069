// Scenario: one experiment, completely described by one TOML file (plus --set overrides).
//
// Contract: load_scenario() either returns a fully validated Scenario (every key known, typed and
// in range, defaults filled in) or throws rv::ScenarioError naming file, line and key. It reads the
// file and nothing else; it writes nothing.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace rv {

struct DeviceGroup {
  std::string name;
  int count = 1;
  double tflops = 1.0;      // sustained compute speed, in 1e12 floating-point operations per second
  double ram_gb = 8.0;      // memory available for training, GiB
  double up_mbps = 100.0;   // upload bandwidth to the core, Mbit/s
  double down_mbps = 100.0; // download bandwidth from the core, Mbit/s
  double latency_ms = 10.0; // one-way latency between the device and the core, ms
  std::string region;       // optional label (planner)
};

struct ModelSpec {
  std::string kind = "mlp";            // mlp | cnn
  std::vector<int64_t> hidden = {256, 128};  // mlp: widths of hidden layers; cnn: widths of the head
  std::vector<int64_t> channels = {16, 32};  // cnn: output channels of each conv block
  int64_t kernel = 3;                  // cnn: convolution kernel size (padding keeps the size)
  bool batch_norm = true;              // cnn: BatchNorm after each convolution
  double dropout = 0.0;                // dropout probability before each hidden linear layer
};

struct DataSpec {
  std::string kind = "synthetic";  // synthetic | fashion-mnist | digits
  int64_t batch_size = 64;         // samples per micro-batch
  int64_t train_samples = 0;       // 0: all (synthetic: 8192)
  int64_t test_samples = 0;        // 0: all (synthetic: 2048)
  std::string path;                // dataset folder or file; empty: Debian's location
  // synthetic only
  int64_t side = 8;                // images are 1 x side x side
  int64_t classes = 10;
  double noise = 1.0;              // standard deviation of the noise around each class centre
};

struct TrainingSpec {
  std::string algorithm = "ravnest";  // ravnest | gpipe | sync-dp
  std::string optimizer = "sgd";      // sgd | adam
  double lr = 0.05;
  double momentum = 0.0;              // sgd only
  double weight_decay = 0.0;
  int64_t steps = 1000;               // optimizer updates on every stage
  int64_t max_in_flight = 0;          // ravnest: unfinished micro-batches allowed; 0 = #stages
  bool weight_stashing = true;        // ravnest: backward uses the forward's weights
  int64_t micro_batches = 4;          // gpipe: micro-batches per update
  int64_t average_every = 50;         // local updates between cross-cluster averagings
  // ravnest: "bulk-sync" (each cluster drains, then all average) or "overlapped" (averaging runs
  // while training goes on; the averaged difference is applied when it is done).
  std::string averaging = "bulk-sync";
  // How clusters average (and sync-dp / gpipe exchange gradients): "multi-ring" (Ravnest's
  // parallel rings), "single-ring" (one ring over the whole model between the clusters' first
  // stages, the baseline) or "gloo" (c10d's own all-reduce over the same chunks; real executor only).
  std::string allreduce = "multi-ring";
  // ravnest: whether averaging also averages the optimizer's state (momentum, Adam's moments).
  bool average_optimizer_state = false;
  int64_t eval_every = 0;             // updates between evaluations; 0 = only at the end
  int64_t eval_samples = 0;           // test samples per evaluation; 0 = the whole test set
};

struct PlannerSpec {
  std::string method = "manual";  // manual (stages in proportion to RAM, one cluster)
  int clusters = 0;               // 0 = let the planner choose ("auto"); manual: one cluster
  std::vector<int64_t> stage_layers;  // manual: layers of each stage in pipeline order (empty: by RAM)
  // manual: explicit clusters ([[planner.cluster]]): nodes in pipeline order, optional stage_layers.
  struct Cluster {
    std::vector<int64_t> nodes;
    std::vector<int64_t> stage_layers;
  };
  std::vector<Cluster> cluster;
  int population = 0;   // ga: individuals (0: by pool size)
  int generations = 0;  // ga: generations (0: by pool size)
};

struct NetworkSpec {
  std::string topology = "star";  // each device reaches a common core through its own links
  std::string model = "lv08";     // lv08 (SimGrid's TCP-calibrated default) | ideal
};

struct SimSpec {
  std::string mode = "numeric";  // numeric (real maths, modeled time) | timing (no maths)
};

struct RealSpec {
  double timeout_s = 60.0;       // a peer silent for this long is considered dead
  std::string master_addr = "127.0.0.1";
  int master_port = 0;           // 0: pick a free port
  bool emulate_speed = false;    // stretch compute to the modeled time of each device
};

struct OutputSpec {
  std::string dir = "runs";      // run folders go to DIR/<name>/<executor>-<timestamp>/
  bool trace = true;             // write trace.json
};

// Injected faults (every executor honours them), for studying and testing failure handling.
struct FaultsSpec {
  int node = -1;                   // the node that misbehaves (-1: none)
  int64_t crash_after_sends = -1;  // it fails at this send (-1: never)
  int64_t drop_every = 0;          // it drops every k-th message it sends (0: none)
  double delay_ms = 0;             // it waits this long before each send
};

struct Scenario {
  std::string name = "scenario";
  uint64_t seed = 1;
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

  int node_count() const;
  // The device group of node `rank` (nodes are numbered group by group, in file order).
  const DeviceGroup& device_of(int rank) const;
};

// Loads and validates `path`, applying `overrides` ("training.lr=0.1") first.
Scenario load_scenario(const std::string& path, const std::vector<std::string>& overrides = {});
// Same, from text (tests); `source` names it in messages.
Scenario parse_scenario(const std::string& text, const std::string& source,
                        const std::vector<std::string>& overrides = {});
// The resolved scenario (every key, defaults filled in) as TOML; parse_scenario() reads it back.
std::string to_toml(const Scenario& s);

}  // namespace rv
