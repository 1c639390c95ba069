// The algorithm registry: the one place that knows which training algorithms exist and what each
// of them is. An entry carries the algorithm's name, its run function (one node's straight-line
// code against NodeEnv) and its traits; the planner, the cost model, the CLI, the run outputs and
// the report read the traits instead of comparing names. Adding an algorithm is one file (its run
// function) plus one entry in registry.cc; tests/test_registry.cc fails if an algorithm's name is
// compared anywhere else in the sources.
//
// Thread-safety: the registry is immutable after static initialisation; every function here is
// safe to call from any thread.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/scenario/scenario.h"

namespace rv {

struct NodeEnv;
struct RunSpec;

// One node's whole run; throws rv::PeerError when a peer fails.
using RunFn = void (*)(NodeEnv& env, const RunSpec& spec, int node);

// How many micro-batches a cluster's pipeline keeps unfinished (what bounds staleness and memory).
enum class InFlightRule {
  kMaxInFlight,   // training.max_in_flight, or the number of stages when it is "stages"
  kMicroBatches,  // training.micro_batches: a step's micro-batches, then a flush
  kOne,           // one micro-batch at a time (each node a whole model, one step after another)
  kStages,        // as many as stages (PipeDream's first stage; stage s keeps stages - s)
};

// How a pipeline's steps follow each other (what the cost model predicts a period from).
enum class Schedule {
  kAsynchronous,  // micro-batches cycle through the stages without a flush (closed network)
  kFlush,         // m micro-batches in, all backwards out, one update (GPipe)
};

// What the planner lays out for the pool.
enum class Layout {
  kPipelines,  // clusters of pipelines, as planner.method decides
  kReplicas,   // every node holds the whole model and is a cluster of its own (data parallelism)
};

// What clusters exchange, and when.
enum class Exchange {
  kParameters,  // the model (and optionally optimizer state) every training.average_every updates
  kGradients,   // the gradients of every step, before its update
};

// How a parameter exchange (Exchange::kParameters) becomes the clusters' next parameters.
enum class OuterStep {
  kNone,      // the mean of the parameters (and optimizer state, if averaged): ravnest
  kNesterov,  // the mean of the parameter deltas since the last exchange, through SGD with Nesterov
              // momentum (training.outer_lr, outer_momentum); the inner optimizer state stays
              // local (DiLoCo)
  kMean,      // the outer step with learning rate 1 and no momentum: the parameters' mean, the
              // inner optimizer state local (local SGD)
};

struct AlgorithmTraits {
  InFlightRule in_flight = InFlightRule::kMaxInFlight;
  Schedule schedule = Schedule::kAsynchronous;
  Layout layout = Layout::kPipelines;
  Exchange exchange = Exchange::kParameters;
  // Keeps each forward's graph (its weights) until the backward, whatever training.weight_stashing
  // says (no update happens in between, so stashing costs nothing and recomputing would).
  bool forces_weight_stashing = false;
  // Honours training.averaging = "overlapped" (averaging runs while training goes on).
  bool overlapped_averaging = false;
  // Goes on when nodes leave (churn): clusters re-form around spares and newcomers (algo/roster.h).
  // The others stop at the first departure, saying why.
  bool recovers_from_churn = false;
  // Takes checkpoints (scenario [checkpoint]) and resumes from them (`--resume`).
  bool checkpoints = false;
  OuterStep outer = OuterStep::kNone;
  // The inner optimizer the algorithm is defined with (training.optimizer must name it); none:
  // any.
  std::optional<OptimizerKind> optimizer;
  // Honours training.double_buffered_weights (PipeDream-2BW: micro_batches micro-batches per
  // update).
  bool double_buffering = false;
  // Exchanges once the clusters together have trained training.target_batch samples, each at its
  // own pace (DeDLOC): a cluster trains its share of the target between exchanges, not a fixed
  // number of micro-batches.
  bool target_batch = false;
};

struct Algorithm {
  const char* name;     // the value of training.algorithm
  const char* summary;  // one line, for listings
  RunFn run;
  AlgorithmTraits traits;
};

// Every registered algorithm, in listing order.
const std::vector<Algorithm>& algorithms();
std::vector<std::string> algorithm_names();

// The algorithm that `s` names. Throws rv::ScenarioError naming the file, line and key
// (training.algorithm) when no such algorithm is registered.
const Algorithm& algorithm_of(const Scenario& s);

// The training settings the algorithm of `s` actually runs with (weight stashing forced where the
// algorithm keeps its graphs anyway). The cost model, the planner and the algorithms use these.
TrainingSpec effective_training(const Scenario& s);

// Micro-batches kept unfinished by a pipeline of `stages` stages.
int64_t in_flight(const Algorithm& a, const TrainingSpec& training, int stages);

// Micro-batches each update of a stage takes: a step's (micro_batches) for a flushing schedule and
// for double-buffered weights, else one.
int64_t micro_batches_per_update(const Algorithm& a, const TrainingSpec& training);

// Micro-batches one cluster of `clusters` trains between two exchanges with the others, on average
// (the averaging period the cost model charges): average_every updates for parameter averaging,
// one update's micro-batches for gradient exchange, and for a target-batch algorithm its share of
// training.target_batch (`batch` samples per micro-batch; the default target is one micro-batch
// from each cluster), rounded up.
int64_t micro_batches_per_exchange(const Algorithm& a, const TrainingSpec& training, int64_t batch,
                                   int clusters);

// Rows of each exchange's averaged tensor: the parameters, and the optimizer's state slots where
// they are averaged with them (training.average_optimizer_state, a parameter exchange whose mean
// is the next parameters); 1 for gradients and for an outer step (the inner state stays local).
int64_t averaged_rows(const Algorithm& a, const TrainingSpec& training);

// A target-batch algorithm's samples per exchange: training.target_batch, or by default one
// micro-batch of `batch` samples from each of `clusters`.
int64_t target_samples(const TrainingSpec& training, int64_t batch, int clusters);

// How clusters average (training.allreduce), for every algorithm that exchanges across clusters.
enum class AllreduceTopology {
  kMultiRing,   // one ring per chunk of the model, all at once (Ravnest's parallel rings)
  kSingleRing,  // each cluster's first stage collects its cluster's state; one ring over it all
};

struct Allreduce {
  const char* name;     // the value of training.allreduce
  const char* summary;  // one line, for listings
  AllreduceTopology topology;
  // Runs on the executor's own collectives (NodeEnv::collectives; the real executor's c10d);
  // executors without them refuse it.
  bool executor_collectives;
};

const std::vector<Allreduce>& allreduces();
std::vector<std::string> allreduce_names();
// The all-reduce that `s` names; throws rv::ScenarioError (file, line, training.allreduce).
const Allreduce& allreduce_of(const Scenario& s);

// A ring all-reduce's pieces (training.ring_piece_mb): the largest segment in one message, in
// bytes (0: segments whole), and how many pieces a segment of `seg_elems` elements of `rows` rows
// goes in: as many as keep each under `piece_bytes`, at most one per element and kMaxRingPieces;
// 1 without pieces. Every member of a ring cuts its chunk the same way.
constexpr int64_t kMaxRingPieces = int64_t{1} << 16;
int64_t ring_piece_bytes(const TrainingSpec& training);
int64_t ring_pieces(int64_t seg_elems, int64_t rows, int64_t piece_bytes);

// The choices of the scenario keys that name registry entries (training.algorithm,
// training.allreduce), for the key listing (core/scenario/keys.h: ExtraChoices).
std::map<std::string, std::vector<std::string>> registry_choices();

// Under churn (ChurnSpec::enabled), an algorithm that recovers needs bulk-synchronous averaging by
// the multi-ring (the rings re-form around the membership); throws rv::ScenarioError otherwise.
void check_churn_support(const Scenario& s);
// real.on_peer_loss = "recover": the algorithm must recover from churn, with what churn needs
// (above); rv::ScenarioError otherwise.
void check_recovery_support(const Scenario& s);
// checkpoint.every > 0 with an algorithm that takes no checkpoints, with churn or with overlapped
// averaging: rv::ScenarioError.
void check_checkpoint_support(const Scenario& s);
// The settings the algorithm is defined with (its inner optimizer); rv::ScenarioError otherwise.
void check_algorithm_settings(const Scenario& s);

// A short label of what ran: the algorithm, then its averaging mode and all-reduce where they are
// not the defaults ("ravnest overlapped single-ring"). Reports group runs by it.
std::string variant_label(const Scenario& s);

}  // namespace rv
