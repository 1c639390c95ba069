// The message patterns that rv-ns3-ref and rv-flow-ref both run: what each node sends, when, and
// what it waits for, independent of the network that carries the messages.
//
// A backend (ns-3's packets or SimGrid's flows) implements Net; Runner drives the pattern through
// it and is told of each message's arrival. Everything is single-threaded and event-driven: the
// backend calls Runner::start() once at the pattern's start and Runner::arrived() when a message's
// last byte is in its receiver's hands; Runner calls Net::send() and Net::after() in response.
//
// Units: bytes, seconds (simulated), Mbit/s = 1e6 bits per second, milliseconds in the input only.
//
// Input (JSON; every key checked, bad input is an InputError that the tools turn into exit 2):
//   {"nodes": [{"up_mbps": 20, "down_mbps": 100, "latency_ms": 15}, ...],
//    "pattern": {...one of the kinds below...}}
// kind "pipeline": independent asynchronous pipelines (Ravnest's, algo/ravnest.cc):
//   "clusters": [[node, ...], ...] (each a pipeline, stage 0 first, at least 2 stages),
//   "fwd_s": [k], "bwd_s": [k] (compute seconds per stage; the last stage does fwd + bwd at once),
//   "activation_bytes": A, "gradient_bytes": G (sent across every stage boundary),
//   "micro_batches": M (per pipeline), "max_in_flight": T (default k, the project's "stages").
// kind "ring": ring all-reduces, "rings": [[node, ...], ...], "bytes": P (per ring),
//   "rounds": R (back to back: a member starts round r + 1 as soon as it has finished round r).
// kind "ravnest": pipelines as above, and every "micro_batches" updates (one period) each stage
//   averages its parameters with the same stage of the other clusters by a ring all-reduce of
//   "stage_bytes"[s] bytes (all stages' rings at once), for "rounds" periods; the pipelines must
//   have the same number of stages.
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

namespace netref {

// Bad input: the tools print it and exit with status 2.
struct InputError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct NodeSpec {
  double up_bps = 0;    // bytes per second, node -> core
  double down_bps = 0;  // bytes per second, core -> node
  double latency = 0;   // seconds, one way, between the node and the core
};

enum class Kind { kPipeline, kRing, kRavnest };

struct Spec {
  std::vector<NodeSpec> nodes;
  Kind kind = Kind::kPipeline;
  // pipeline, ravnest
  std::vector<std::vector<int>> clusters;
  std::vector<double> fwd_s, bwd_s;
  uint64_t activation_bytes = 0, gradient_bytes = 0;
  int64_t micro_batches = 0, max_in_flight = 0;
  std::vector<uint64_t> stage_bytes;  // ravnest
  // ring
  std::vector<std::vector<int>> rings;
  uint64_t ring_bytes = 0;
  int64_t rounds = 1;
  std::string kind_name() const;
};

// Parses and checks a pattern description; throws InputError naming the key.
Spec parse_spec(const nlohmann::json& j);
Spec load_spec(const std::string& path);

// What the runner needs from a network. Messages of one ordered pair are delivered in send order.
class Net {
 public:
  virtual ~Net() = default;
  virtual double now() const = 0;
  // Sends `bytes` (> 0) from src to dst; the backend calls Runner::arrived(id) when they are in.
  virtual void send(int src, int dst, uint64_t bytes, int64_t id) = 0;
  // Calls fn after `seconds` of simulated time.
  virtual void after(double seconds, std::function<void()> fn) = 0;
};

struct MessageRecord {
  int src = 0, dst = 0;
  uint64_t bytes = 0;
  double sent = 0, arrived = -1;  // seconds since the pattern's start; -1: not (yet) arrived
};

class Runner {
 public:
  Runner(const Spec& spec, Net& net);
  void start();  // the pattern's start: time 0 of every reported time is net.now() here
  void arrived(int64_t id);
  bool done() const { return finished_ == members_; }
  int64_t undelivered() const;
  uint64_t traffic_bytes() const { return traffic_; }
  const std::vector<MessageRecord>& messages() const { return msgs_; }
  // The pattern's figures (rounds, steady rates, messages unless `summary`).
  nlohmann::json result(bool summary) const;

 private:
  struct Stage {
    int node = 0, cluster = 0, stage = 0;
    bool busy = false;
    std::vector<int64_t> fwd_q, bwd_q;  // micro-batch ids waiting (FIFO)
    size_t fwd_head = 0, bwd_head = 0;
    int64_t injected = 0, completed = 0;  // stage 0: micro-batches started / finished
    int64_t backwards = 0;                // backwards done (last stage: fwd + bwd)
    int64_t periods_averaged = 0;         // ravnest: rounds finished by this node
    bool averaging = false;
    int ring = -1, ring_pos = -1;     // ravnest: its stage's ring
    std::vector<double> completions;  // stage 0: when each micro-batch's backward ended
  };
  struct RingMember {
    int node = 0;
    int64_t sent = 0, recv = 0;  // steps, counted across rounds
    int64_t allowed = 0;         // steps it may send (rounds entered x steps per round)
    int64_t rounds_done = 0;
    std::vector<double> round_end;  // when it finished each round
    int stage = -1;                 // ravnest: its Stage index
    int ring = 0, pos = 0;          // its ring and its place in it
  };
  struct Ring {
    std::vector<int> members;  // indices into ring_members_, in ring order
    uint64_t bytes = 0;
    int64_t steps() const { return 2 * (static_cast<int64_t>(members.size()) - 1); }
  };
  // Message kinds: 0 activation, 1 gradient, 2 ring segment.
  struct Pending {
    int kind = 0;
    int target = 0;  // stage index (kinds 0, 1) or ring member index (2)
    int64_t mb = 0;
  };

  double now() const { return net_.now() - t0_; }
  void send(int src, int dst, uint64_t bytes, Pending p);
  void try_work(int s);
  void backward_done(int s, int64_t mb);
  void enter_averaging(int s);
  void ring_progress(int m);
  uint64_t segment_bytes(const Ring& r, int64_t step, int pos) const;
  void member_finished() { ++finished_; }

  const Spec& spec_;
  Net& net_;
  double t0_ = 0;
  std::vector<Stage> stages_;  // cluster-major
  std::vector<RingMember> ring_members_;
  std::vector<Ring> ring_defs_;
  std::vector<MessageRecord> msgs_;
  std::vector<Pending> pending_;
  uint64_t traffic_ = 0;
  int64_t members_ = 0, finished_ = 0;  // stages and ring members that must finish
  int k_ = 0;
};

// Shared command-line handling: `tool PATTERN.json [-o OUT.json] [--summary] [options]`.
struct Args {
  std::string input, output;
  bool summary = false;
  std::vector<std::pair<std::string, std::string>> options;  // --key value
  std::string option(const std::string& key, const std::string& fallback) const;
};
Args parse_args(int argc, char** argv, const std::vector<std::string>& known_options,
                const std::string& usage);
void write_json(const nlohmann::json& j, const std::string& path);  // "" or "-": stdout
// A tool's main: `run`'s status, or 2 after an InputError and 1 after any other error, each
// printed as "error: what".
int tool_main(int argc, char** argv, int (*run)(int, char**));

}  // namespace netref
