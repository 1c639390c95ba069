// The algorithm registry: the one place that knows which training algorithms exist and what each
// of them is. An entry (Algorithm) carries the algorithm's name, its run function (one node's
// straight-line code against NodeEnv), its traits, its own keys and its hooks; the planner, the
// cost model, the CLI, the run outputs and the report read them instead of comparing names.
// Each algorithm declares its entry in its own file (`Algorithm <name>_algorithm()`, with its
// message kinds: core/env.h algorithm_kind); adding one is that file, one line of
// RV_EACH_ALGORITHM in registry.cc, one line of CMakeLists.txt and its test.
// tests/test_registry.cc fails if an algorithm's name is compared anywhere else in the sources.
//
// Thread-safety: the registry is immutable after static initialisation; every function here is
// safe to call from any thread.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "algo/outer_optimizer.h"
#include "core/scenario/keys.h"
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

struct AlgorithmTraits {
  InFlightRule in_flight = InFlightRule::kMaxInFlight;
  Schedule schedule = Schedule::kAsynchronous;
  Layout layout = Layout::kPipelines;
  Exchange exchange = Exchange::kParameters;
  // Keeps each forward's graph (its weights) until the backward, whatever training.weight_stashing
  // says (no update happens in between, so stashing costs nothing and recomputing would).
  bool forces_weight_stashing = false;
  // What its run function does beyond the drained, bulk-synchronous exchange that every
  // algorithm with exchanges does; the registry's checks refuse the settings that need it
  // otherwise. Honours training.averaging = "overlapped" (averaging runs while training goes on).
  bool overlapped_averaging = false;
  // Goes on when nodes leave (churn): clusters re-form around spares and newcomers (algo/roster.h).
  // The others stop at the first departure, saying why.
  bool recovers_from_churn = false;
  // Takes checkpoints (scenario [checkpoint]) and resumes from them (`--resume`).
  bool checkpoints = false;
};

// Functions of the algorithm's own file that the registry's general rules call; each may be null
// (the rule's default, said at each).
struct AlgorithmHooks {
  // Micro-batches each update of a stage takes. Null: a step's (training.micro_batches) for a
  // flushing schedule, else one.
  int64_t (*micro_batches_per_update)(const TrainingSpec& training) = nullptr;
  // The algorithm's own keys applied to the shared settings that the cost model, the planner and
  // the stages read (effective_training; TrainingSpec::weight_versions). Null: none.
  void (*effective)(TrainingSpec& training) = nullptr;
  // Exchanges once the clusters together have trained this many samples, each at its own pace
  // (0: one micro-batch from each cluster): a cluster trains its share of the target between
  // exchanges, not a fixed number of micro-batches. Null: every micro_batches_per_exchange.
  int64_t (*target_batch)(const TrainingSpec& training) = nullptr;
  // An exchange of parameters becomes the next parameters through an outer step
  // (algo/outer_optimizer.h) with these settings; the inner optimizer state stays local. Null:
  // the mean of the parameters (and of the optimizer state, if averaged) is the next parameters.
  OuterSgd (*outer_step)(const TrainingSpec& training) = nullptr;
};

// A key of the scenario and the one value the algorithm is defined with: the registry refuses
// any other (check_algorithm_settings), and the test matrix runs it so.
struct FixedSetting {
  const char* key;    // dotted: "training.optimizer"
  const char* value;  // as TOML: "\"adamw\""
};

struct Algorithm {
  const char* name;     // the value of training.algorithm
  const char* summary;  // one line, for listings
  RunFn run;
  AlgorithmTraits traits;
  AlgorithmHooks hooks;
  // Its own keys of [training] (core/scenario/keys.h training_*_key), declared in its file.
  std::vector<KeySpec> keys;
  std::vector<FixedSetting> fixed;
  // Why its maths depends on how fast each node goes, so that runs on a modeled clock and on a
  // wall clock differ in their losses by design; null: it does not.
  const char* paced_by_clock = nullptr;
};

// Every registered algorithm, in listing order.
const std::vector<Algorithm>& algorithms();
std::vector<std::string> algorithm_names();

// The algorithm that `s` names. Throws rv::ScenarioError naming the file, line and key
// (training.algorithm) when no such algorithm is registered.
const Algorithm& algorithm_of(const Scenario& s);

// The training settings the algorithm of `s` actually runs with (weight stashing forced where the
// algorithm keeps its graphs anyway, its hooks.effective applied). The cost model, the planner
// and the algorithms use these.
TrainingSpec effective_training(const Scenario& s);

// Checks the algorithm's own keys in s.training.algorithm_keys against its rows (type, range) and
// fills in the defaults of those not given; a key no row declares is a ScenarioError at its line
// (naming the algorithm whose key it is, if another's). Loaders of runnable scenarios call it
// (cli load_checked, the real executor's ranks).
void resolve_algorithm_keys(Scenario& s);
// The keys every algorithm declares, for the key listing: each row's help starts with the
// algorithm's name.
std::vector<KeySpec> algorithm_key_rows();

// Micro-batches kept unfinished by a pipeline of `stages` stages.
int64_t in_flight(const Algorithm& a, const TrainingSpec& training, int stages);
// What a pipeline admits: in_flight(), plus the micro-batches a negative control adds
// (RAVNEST_FAULT=in-flight+N, core/fault_injection.h). Schedulers use this; checks of a run's
// configuration use in_flight().
int64_t admitted_in_flight(const Algorithm& a, const TrainingSpec& training, int stages);

// Micro-batches each update of a stage takes: the algorithm's hook, or a step's (micro_batches)
// for a flushing schedule, else one.
int64_t micro_batches_per_update(const Algorithm& a, const TrainingSpec& training);

// Micro-batches one cluster of `clusters` trains between two exchanges with the others, on average
// (the averaging period the cost model charges): average_every updates for parameter averaging,
// one update's micro-batches for gradient exchange, and for a target-batch algorithm
// (hooks.target_batch) its share of the target (`batch` samples per micro-batch), rounded up.
int64_t micro_batches_per_exchange(const Algorithm& a, const TrainingSpec& training, int64_t batch,
                                   int clusters);

// Rows of each exchange's averaged tensor: the parameters, and the optimizer's state slots where
// they are averaged with them (training.average_optimizer_state, a parameter exchange whose mean
// is the next parameters); 1 for gradients and for an outer step (the inner state stays local).
int64_t averaged_rows(const Algorithm& a, const TrainingSpec& training);

// A target-batch algorithm's samples per exchange: its target (hooks.target_batch), or for 0 one
// micro-batch of `batch` samples from each of `clusters`.
int64_t target_samples(int64_t target, int64_t batch, int clusters);

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
// The settings the algorithm is defined with (Algorithm::fixed), its own keys (as
// resolve_algorithm_keys checks them) and its averaging modes; rv::ScenarioError otherwise.
void check_algorithm_settings(const Scenario& s);

// A short label of what ran: the algorithm, then its averaging mode and all-reduce where they are
// not the defaults ("ravnest overlapped single-ring"). Reports group runs by it.
std::string variant_label(const Scenario& s);

}  // namespace rv
