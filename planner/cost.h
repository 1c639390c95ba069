// The planner's cost model: predicted time per micro-batch of a pipeline stage and of a cluster
// (steady asynchronous-pipeline throughput), and of a cross-cluster averaging round, from the
// device pool, the model's per-layer profile and the training settings. It charges the same
// numbers as the simulator (core/model/cost_model.h) and applies the network model's factors, so a
// prediction and a simulation differ only where the schedule does.
//
// A stage s on node n holding layers [l, r) costs, per micro-batch, the largest of
//   compute  (forward + backward + update flops) / speed_n
//   uplink   (A(r) + A(l)) / up_n     activations to s+1 and gradients to s-1
//   downlink (A(l) + A(r)) / down_n   activations from s-1 and gradients from s+1
// where A(b) is the bytes of one micro-batch's activations at boundary b (0 at either end).
// A cluster's period is at least the largest stage cost; with few micro-batches in flight it is
// set by their round trips, queueing at every compute and link: mean-value analysis of the closed
// network (max_in_flight micro-batches cycling through every node's compute, uplink and downlink,
// and the latencies). Checked against the simulator in tests/test_planner_cost.cc.
#pragma once

#include <algorithm>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "algo/registry.h"
#include "core/model/cost_model.h"
#include "core/model/model.h"
#include "core/network/links.h"
#include "core/plan.h"
#include "core/scenario/scenario.h"
#include "core/units.h"

namespace rv {

// One node of the pool in SI units.
struct PoolNode {
  double speed = 0;        // flop/s, the device's peak
  double ram = 0;          // bytes
  double up = 0;           // bytes/s
  double down = 0;         // bytes/s
  double latency = 0;      // s, one way to the core (before factors)
  ComputeProfile compute;  // the device's compute model, as the simulator charges it
  int group = 0;           // its device group: nodes of one group compute alike
  std::string device;      // the group's name
  int region = 0;          // network.topology "regions": its region (core/network/links.h)
};

// A target-batch round (algo/registry.h hooks.target_batch): every cluster trains micro-batches of
// `batch` samples back to back from the round's start, one each `periods[i]` seconds; once the
// finished ones hold `target` samples, each cluster finishes the micro-batch it is on (and trains
// one at least), and the exchange follows. The round's samples and the seconds until its last
// micro-batch ends.
struct TargetRound {
  double samples = 0;
  double seconds = 0;
};
TargetRound target_round(const std::vector<double>& periods, int64_t batch, double target);

class CostModel {
 public:
  CostModel(const Scenario& scenario, const ModelDesc& model);
  // Not copyable (memory_last_ points into memory_); a move keeps the map's elements in place.
  CostModel(const CostModel&) = delete;
  CostModel& operator=(const CostModel&) = delete;
  CostModel(CostModel&&) = default;
  CostModel& operator=(CostModel&&) = default;

  int nodes() const { return static_cast<int>(pool_.size()); }
  int layers() const { return model_->layer_count(); }
  const PoolNode& node(int n) const { return pool_[n]; }
  const ModelDesc& model() const { return *model_; }
  int64_t batch() const { return batch_; }
  // The scenario's algorithm and the training settings it runs with (algo/registry.h).
  const Algorithm& algorithm() const { return *algorithm_; }
  const TrainingSpec& training() const { return training_; }
  const Allreduce& allreduce() const { return *allreduce_; }
  // Micro-batches one cluster of `clusters` trains between two exchanges with the others.
  int64_t micro_batches_per_exchange(int clusters) const {
    return rv::micro_batches_per_exchange(*algorithm_, training_, batch_, clusters);
  }
  // Whether clusters exchange once together they have trained a target of samples
  // (hooks.target_batch), each at its own pace.
  bool target_batch() const { return target_batch_ >= 0; }

  // Unfinished micro-batches allowed in a cluster of `stages` stages (max_in_flight, or the
  // stage count), which sets the memory of stashed weights and activations.
  int64_t in_flight(int stages) const;
  // The warm floor of a message of `bytes` from a to b, seconds from its first byte to its last
  // (core/network/tcp_pacing.h) in the steady state of a connection whose busy periods carry
  // `in_flight` such messages: RTT / (kBbrHighGain - 1) over them all, shared; 0 where the model
  // has none or the path is filled. The simulator holds each busy period as it comes; this is
  // its steady state, assuming the micro-batches in flight travel together.
  double warm_floor(int a, int b, double bytes, int64_t in_flight) const;
  // Bytes of one micro-batch's activations crossing boundary b (0 at 0 and at layers()).
  double boundary_bytes(int b) const;
  // Modeled memory of layers [l, r) with `in_flight` micro-batches unfinished.
  double memory(int l, int r, int64_t in_flight) const;
  bool fits(int node, int l, int r, int64_t in_flight) const;
  // Compute seconds of one micro-batch (forward + backward + update) of [l, r) on `node`, and of
  // its forward and backward alone (the part of a round trip).
  double compute_time(int node, int l, int r) const;
  double pass_time(int node, int l, int r) const;
  // Per-micro-batch cost of `node` as a stage holding [l, r) (see the file comment).
  double stage_time(int node, int l, int r) const;
  // Effective bandwidth (bytes/s) and latency (s) of a transfer from `a` to `b`: the sender's
  // uplink, the link between their regions where they differ, the receiver's downlink.
  double path_bandwidth(int a, int b) const;
  double path_latency(int a, int b) const;
  // Seconds a flow from `a` to `b` holds its path per message of `bytes`, `in_flight` messages
  // sharing the connection: the path's rate, or the warm floor where it binds.
  double flow_time(int a, int b, double bytes, int64_t in_flight) const {
    return std::max(bytes / path_bandwidth(a, b), warm_floor(a, b, bytes, in_flight));
  }

  // Period (seconds per micro-batch) of a pipeline: nodes in order, cuts of size nodes + 1.
  double cluster_period(const std::vector<int>& nodes, const std::vector<int>& cuts) const;
  // How an empty pipeline fills: a lone micro-batch's round trip (each stage's forward and
  // backward, each hop's latency and flow both ways, as cluster_period charges them), its slowest
  // station's demand per micro-batch, and the micro-batches it lets in at once.
  struct Fill {
    double round_trip = 0, bottleneck = 0;
    int64_t in_flight = 1;
  };
  Fill fill(const std::vector<int>& nodes, const std::vector<int>& cuts) const;
  // Seconds for a pipeline of steady period `period` that starts empty to finish `e`
  // micro-batches: at least e periods; where the round trip binds (fewer in flight than it
  // takes to fill it), micro-batches come back in waves of in_flight, one round trip apart,
  // spaced by the bottleneck within a wave; where a station binds, the first comes back one
  // round trip in and the others one bottleneck apart.
  static double drained_time(const Fill& f, double period, int64_t e);
  // Whether `clusters` pipelines drain before each exchange: a bulk-synchronous exchange of
  // parameters every micro_batches_per_exchange micro-batches (algo/ravnest.cc PeriodicStage:
  // no micro-batch of the next period starts before the averaging), not overlapped.
  bool drains(int clusters) const;
  // The periods of pipelines (nodes in order, cuts) that share links between regions: each
  // cluster_period() alone, stretched where the clusters together would ask more of a region link
  // than it carries (every cluster that crosses such a link slowed until the link carries what it
  // can, repeated while one is over). Under a star, `periods` unchanged.
  std::vector<double> shared_periods(const std::vector<const std::vector<int>*>& nodes,
                                     const std::vector<const std::vector<int>*>& cuts,
                                     std::vector<double> periods) const;
  // Seconds of one averaging (reduce-scatter + all-gather over every ring) of `plan`'s clusters;
  // with a single-ring all-reduce (training.allreduce), of single_ring_time(). `parts`, where
  // given, says how a multi-ring round was composed.
  struct AveragingParts {
    bool floored = false;  // TCP BBR's warm floor holds the busiest link's steps (warm_floor)
    double busiest = 0;  // s: the busiest link's 2(C - 1) steps back to back, the longest hop once
    double chain = 0;    // s: the longest chain of 2(C - 1) consecutive hops' steps
  };
  double averaging_time(const std::vector<ClusterPlan>& clusters, const std::vector<Ring>& rings,
                        AveragingParts* parts = nullptr) const;
  // Seconds of one single-ring averaging: the first stages collect, ring over the whole state,
  // hand back.
  double single_ring_time(const std::vector<ClusterPlan>& clusters) const;
  // Samples per second of the whole plan: C clusters in step, averaging every average_every
  // updates (the slowest cluster gates each bulk-synchronous averaging). Where the pipelines
  // drain (drains()) and `fills` gives each cluster's fill(), a cluster's micro-batches between
  // two exchanges take drained_time() rather than as many periods.
  double throughput(const std::vector<double>& cluster_periods, double averaging,
                    const std::vector<Fill>& fills) const;
  // A target-batch algorithm's round over clusters of these periods (target_round, at the
  // scenario's target).
  TargetRound round_of(const std::vector<double>& cluster_periods) const;
  // One line on an annotated plan: its slowest cluster's bottleneck (a stage's compute, a node's
  // uplink or downlink, a link's flow, or the round trip when too few micro-batches are in
  // flight), what bounds it, the averaging's share and the nodes used.
  std::string explain(const Plan& plan) const;
  // What an annotated plan's prediction takes from an approximation, one line each (plan.json
  // "approximations", printed by `ravnest plan`); empty where it uses none:
  //   queueing on a region link that several clusters' pipelines cross, by its mean load
  //     (shared_periods; named where that load is 10% of its rate or more);
  //   the averaging round as the longer of the busiest link's steps back to back and the longest
  //     chain of hops (named where the two are within a fifth of each other: there the steps'
  //     partial overlap, which neither bound counts, matters most);
  //   periods set by the round trip, by mean-value analysis of a pipeline's closed network
  //     (exact for exponential service, approximate for the fixed times charged here);
  //   a pipeline's flows or the averaging's ring steps held by TCP BBR's warm floor (a law
  //     measured on loopback: docs/network-model.md);
  //   a drained pipeline's micro-batches between two averagings in waves (drained_time).
  std::vector<std::string> approximations(const Plan& plan) const;

  // A cluster's evaluation (nodes in order, cuts): seconds per evaluation batch at its slowest
  // stage (the largest of a stage's forward compute, its node's uplink carrying the batch's
  // activations out and its downlink carrying them in) and seconds for the first batch through
  // every stage and link (Plan's evaluation_batch_time and evaluation_fill_time). Training waits
  // meanwhile: the first stage pushes every batch in before its next micro-batch, and the stages
  // after it take them in order.
  std::pair<double, double> evaluation_times(const std::vector<int>& nodes,
                                             const std::vector<int>& cuts) const;

  // Fills in every predicted figure of `plan` (stage memory and times, cluster periods and
  // throughputs, rings, averaging time, overall throughput).
  void annotate(Plan& plan) const;

 private:
  // A station of a cluster's closed network, as cluster_period and explain see it.
  struct Station {
    // (cluster_period indexes a stage's first three kinds by their value: keep this order.)
    enum class Kind { kCompute, kUplink, kDownlink, kFlow, kRegionLink } kind;
    int stage = 0;           // its stage (a flow: the sender's)
    int node = 0;            // its node (a flow: the sender)
    int peer = -1;           // a flow's receiver (a region link: the flow's)
    int begin = 0, end = 0;  // a compute station's layers; a region link's index is `begin`
    double seconds = 0;      // service demand per micro-batch (a flow: window-capped, warm-floored)
    double link = 0;         // a flow: at its links' own rate
    bool floored = false;    // a flow: its warm floor binds (CostModel::warm_floor)
  };
  // A multi-ring averaging round's hops (averaging_time), all rings at once: per node its bytes up
  // and down, per region link its bytes; per hop (ring k's hop i at k * C + i) its latency, warm
  // floor and region link (-1: none).
  struct RingHops {
    std::vector<double> up, down, across;
    std::vector<double> latency, floors;
    std::vector<int> link;
    double hop_latency = 0, floor = 0;  // s: the longest hop's latency, the largest warm floor
    double round = 0;                   // s: the busiest link's step (bytes over its rate)
    int64_t largest = 0;                // the largest ring's chunk (elements)
  };
  // `rings`' hops over `c` clusters, in this calling thread's buffers (ga asks for every
  // individual); valid until this thread's next call.
  const RingHops& ring_hops(const std::vector<Ring>& rings, int c) const;
  // Hop `h` (owner a to owner b) of `hops`: its latency, then its own links' time (the sender's
  // uplink, the receiver's downlink, a region link, each carrying all its rings' steps) or its
  // warm floor.
  double hop_step(const RingHops& hops, size_t h, int a, int b) const;
  // Calls f(station) for every station of the pipeline `nodes` cut at `cuts`: per stage its
  // compute, uplink and downlink, then both flows between it and the next stage, each followed by
  // the region link it crosses, if any (several flows may cross one).
  template <class F>
  void visit_stations(const std::vector<int>& nodes, const std::vector<int>& cuts, F&& f) const;
  // The closed network one micro-batch of a pipeline cycles through (cluster_period): per station
  // its service demand per micro-batch, the part of it an arrival at an idle station waits for,
  // and the share of the work in service it does not wait for (vectors in this calling thread's
  // buffers, valid until its next call); the pure delay of the flows; and how it fills.
  struct Network {
    const std::vector<double>& demand;
    const std::vector<double>& own;
    const std::vector<double>& residual_share;
    double delay = 0;
    Fill fill;
  };
  Network closed_network(const std::vector<int>& nodes, const std::vector<int>& cuts) const;
  // closed_network's stations: stage s's compute, uplink and downlink are station_index(s, kind);
  // the region links the pipeline's flows cross (topology "regions") come after them, link k's
  // at slot[k] (region_slots sets `slot` and returns the number of stations).
  static size_t station_index(int stage, Station::Kind kind) {
    return 3 * static_cast<size_t>(stage) + static_cast<size_t>(kind);
  }
  size_t region_slots(const std::vector<int>& nodes, std::vector<int>& slot) const;
  // The station a flow's transfer waits at when it finds it idle: the slower of the sender's
  // uplink and the receiver's downlink (stage flow.stage and its next, one each way), or the
  // region link it crosses where that is slower still.
  size_t flow_station(const Station& flow, const std::vector<int>& nodes,
                      const std::vector<int>& slot) const;
  // Seconds per micro-batch of `net` with fill.in_flight micro-batches in it, by mean-value
  // analysis.
  static double mean_value_period(const Network& net);
  // Per region link a pipeline crosses (topology "regions"), the bytes per micro-batch of each
  // flow across it: (link index, bytes), activations on and gradients back.
  std::vector<std::pair<int, double>> region_crossings(const std::vector<int>& nodes,
                                                       const std::vector<int>& cuts) const;
  // explain()'s parts: a station in words ("the uplink of node 3 (laptop) (20 Mbit/s)"); what
  // bounds the slowest cluster `c` of `plan` (its stations' largest demand `most`, `what` it is);
  // the share of the time its averaging takes.
  std::string station_text(const Station& top) const;
  std::string bound_text(const Plan& plan, size_t c, const std::vector<int>& nodes,
                         const std::vector<int>& cuts, double most, const std::string& what) const;
  double averaging_share(const Plan& plan, const ClusterPlan& cl) const;

  const ModelDesc* model_;
  const Algorithm* algorithm_;  // the scenario's (algo/registry.h)
  const Allreduce* allreduce_;  // how its clusters average
  TrainingSpec training_;       // as the algorithm runs it (effective_training)
  int64_t averaged_rows_;       // floats per averaged element (algo/registry.h averaged_rows)
  // A target-batch algorithm's target (hooks.target_batch; 0: one micro-batch per cluster); -1:
  // the algorithm exchanges every micro_batches_per_exchange micro-batches.
  int64_t target_batch_ = -1;
  int64_t piece_bytes_;  // the rings' pieces (ring_piece_bytes; 0: segments whole)
  int64_t batch_;
  NetFactors factors_;
  bool paced_ = false;  // the network model's warm floor (NetworkLinks::paced)
  std::vector<PoolNode> pool_;
  // The links between regions, [from * regions_ + to], as links_of() gives them: rates with the
  // network model's bandwidth factor, latencies as given; one region and no link under a star.
  int regions_ = 1;
  std::vector<RegionLink> between_;
  // The region link from a's region to b's (its index in between_), or -1 within one region.
  int region_link(int a, int b) const {
    const int x = pool_[static_cast<size_t>(a)].region, y = pool_[static_cast<size_t>(b)].region;
    return x == y ? -1 : x * regions_ + y;
  }
  double region_rate(int k) const { return between_[static_cast<size_t>(k)].bandwidth; }
  // "the link from region A to region B"
  std::string region_link_name(int k) const;
  std::vector<std::string> region_names_;
  // compute_time and pass_time by device group and layer range, computed on first use (the
  // planners ask for the same ranges many times; one stage's work is O(layers)). Not
  // thread-safe, like the planners that use it.
  struct Times {
    double compute = -1, pass = -1;  // -1: not computed yet
  };
  const Times& times(int node, int l, int r) const;
  mutable std::vector<std::vector<Times>> times_;  // [group][l * (layers + 1) + r]
  // stage_work() by layer range (the same for every device), computed on first use: a pool of
  // many distinct devices asks for one range once per device. A map of the ranges asked for, not
  // a slot per range: a StageWork is kilobytes, and a 1,000-layer model has a million ranges.
  mutable std::unordered_map<size_t, StageWork> work_;  // by l * (layers + 1) + r
  // memory() by micro-batches in flight and layer range, computed on first use (-1: not yet);
  // the last table asked for is kept at hand (the partitioners ask one in_flight many times).
  mutable std::unordered_map<int64_t, std::vector<double>> memory_;
  mutable int64_t memory_in_flight_ = -1;
  mutable std::vector<double>* memory_last_ = nullptr;
};

// The rings of cross-cluster averaging: the flat parameter space cut at every cluster's stage
// boundaries; chunk k is owned, in each cluster, by the node holding those parameters.
std::vector<Ring> make_rings(const ModelDesc& model, const std::vector<ClusterPlan>& clusters);

}  // namespace rv
