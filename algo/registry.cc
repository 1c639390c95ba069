#include "algo/registry.h"

#include <algorithm>
#include <cmath>

#include "algo/algorithm.h"
#include "core/error.h"
#include "core/model/cost_model.h"

namespace rv {
namespace {

// The entry named `value` (the scenario's `key`), or a ScenarioError at the key's line.
template <typename Entry>
const Entry& find_named(const std::vector<Entry>& entries, const std::string& value,
                        const Scenario& s, const char* key) {
  for (const Entry& e : entries)
    if (value == e.name) return e;
  std::string list;
  for (const Entry& e : entries) list += (list.empty() ? "" : ", ") + std::string(e.name);
  throw ScenarioError(s.where(key), key,
                      "unknown value '" + value + "' (expected one of: " + list + ")");
}

template <typename Entry>
std::vector<std::string> names_of(const std::vector<Entry>& entries) {
  std::vector<std::string> names;
  for (const Entry& e : entries) names.emplace_back(e.name);
  return names;
}

}  // namespace

// The registry. One entry per algorithm; its run function lives in its own file.
const std::vector<Algorithm>& algorithms() {
  static const std::vector<Algorithm> kAlgorithms = {
      {.name = "ravnest",
       .summary = "zero-bubble asynchronous pipelines, clusters averaged by parallel multi-ring "
                  "all-reduce",
       .run = &run_ravnest,
       .traits = {.overlapped_averaging = true, .recovers_from_churn = true, .checkpoints = true}},
      {.name = "gpipe",
       .summary = "synchronous pipelines (micro-batches, then a flush); gradients all-reduced "
                  "every step",
       .run = &run_gpipe,
       .traits = {.in_flight = InFlightRule::kMicroBatches,
                  .schedule = Schedule::kFlush,
                  .exchange = Exchange::kGradients,
                  .forces_weight_stashing = true}},
      {.name = "sync-dp",
       .summary = "synchronous data parallelism: every node the whole model, gradients "
                  "all-reduced",
       .run = &run_sync_dp,
       .traits = {.in_flight = InFlightRule::kOne,
                  .layout = Layout::kReplicas,
                  .exchange = Exchange::kGradients}},
      {.name = "diloco",
       .summary = "DiLoCo: average_every inner AdamW steps per cluster through its pipeline, then "
                  "the mean of the parameter deltas through an outer SGD with Nesterov momentum",
       .run = &run_diloco,
       .traits = {.outer = OuterStep::kNesterov, .optimizer = OptimizerKind::kAdamW}},
      {.name = "local-sgd",
       .summary = "local SGD: average_every steps per cluster on its own data, then the clusters' "
                  "parameters averaged (DiLoCo's outer step with learning rate 1 and no momentum)",
       .run = &run_local_sgd,
       .traits = {.outer = OuterStep::kMean}},
      {.name = "pipedream",
       .summary = "PipeDream: 1F1B pipelines (stages - s warm-up forwards on stage s, then one "
                  "backward, one forward) with weight stashing, or 2BW (double_buffered_weights); "
                  "clusters averaged as ravnest's",
       .run = &run_pipedream,
       .traits = {.in_flight = InFlightRule::kStages,
                  .forces_weight_stashing = true,
                  .double_buffering = true}},
      {.name = "dedloc",
       .summary = "DeDLOC: every peer the whole model, accumulating at its own pace until the "
                  "collaboration has target_batch samples, then a butterfly all-reduce in shares "
                  "from a linear programme over the peers' bandwidths (client_only peers aggregate "
                  "none)",
       .run = &run_dedloc,
       .traits = {.in_flight = InFlightRule::kOne,
                  .layout = Layout::kReplicas,
                  .exchange = Exchange::kGradients,
                  .target_batch = true}},
  };
  return kAlgorithms;
}

std::vector<std::string> algorithm_names() { return names_of(algorithms()); }

const Algorithm& algorithm_of(const Scenario& s) {
  return find_named(algorithms(), s.training.algorithm, s, "training.algorithm");
}

TrainingSpec effective_training(const Scenario& s) {
  TrainingSpec t = s.training;
  if (algorithm_of(s).traits.forces_weight_stashing) t.weight_stashing = true;
  return t;
}

int64_t in_flight(const Algorithm& a, const TrainingSpec& training, int stages) {
  switch (a.traits.in_flight) {
    case InFlightRule::kMicroBatches:
      return training.micro_batches;
    case InFlightRule::kOne:
      return 1;
    case InFlightRule::kStages:
      return std::max(1, stages);
    case InFlightRule::kMaxInFlight:
      break;
  }
  return training.max_in_flight > 0 ? training.max_in_flight : std::max(1, stages);
}

int64_t micro_batches_per_update(const Algorithm& a, const TrainingSpec& training) {
  const bool accumulates = a.traits.schedule == Schedule::kFlush ||
                           (a.traits.double_buffering && training.double_buffered_weights);
  return accumulates ? training.micro_batches : 1;
}

int64_t target_samples(const TrainingSpec& training, int64_t batch, int clusters) {
  return training.target_batch > 0 ? training.target_batch : batch * clusters;
}

int64_t micro_batches_per_exchange(const Algorithm& a, const TrainingSpec& training, int64_t batch,
                                   int clusters) {
  if (a.traits.target_batch && batch > 0 && clusters > 0) {
    const int64_t each = batch * clusters;
    return std::max<int64_t>(1, (target_samples(training, batch, clusters) + each - 1) / each);
  }
  const int64_t per_update = micro_batches_per_update(a, training);
  const int64_t updates = a.traits.exchange == Exchange::kGradients ? 1 : training.average_every;
  return updates * per_update;
}

int64_t averaged_rows(const Algorithm& a, const TrainingSpec& training) {
  if (a.traits.exchange != Exchange::kParameters || a.traits.outer != OuterStep::kNone ||
      !training.average_optimizer_state)
    return 1;
  return 1 + optimizer_state_floats(training);
}

const std::vector<Allreduce>& allreduces() {
  static const std::vector<Allreduce> kAllreduces = {
      {.name = "multi-ring",
       .summary = "Ravnest's parallel rings, one per chunk of the model, all at once",
       .topology = AllreduceTopology::kMultiRing,
       .executor_collectives = false},
      {.name = "single-ring",
       .summary = "baseline: first stages collect, one ring over the whole model, hand back",
       .topology = AllreduceTopology::kSingleRing,
       .executor_collectives = false},
      {.name = "gloo",
       .summary = "c10d's own all-reduce over the multi-ring's chunks (real executor only)",
       .topology = AllreduceTopology::kMultiRing,
       .executor_collectives = true},
  };
  return kAllreduces;
}

std::vector<std::string> allreduce_names() { return names_of(allreduces()); }

const Allreduce& allreduce_of(const Scenario& s) {
  return find_named(allreduces(), s.training.allreduce, s, "training.allreduce");
}

int64_t ring_piece_bytes(const TrainingSpec& training) {
  return static_cast<int64_t>(std::llround(training.ring_piece_mb * 1e6));
}

int64_t ring_pieces(int64_t seg_elems, int64_t rows, int64_t piece_bytes) {
  if (piece_bytes <= 0 || seg_elems <= 0) return 1;
  const int64_t seg_bytes = kFloatBytes * rows * seg_elems;
  return std::max<int64_t>(
      1, std::min({(seg_bytes + piece_bytes - 1) / piece_bytes, seg_elems, kMaxRingPieces}));
}

std::map<std::string, std::vector<std::string>> registry_choices() {
  return {{"training.algorithm", algorithm_names()}, {"training.allreduce", allreduce_names()}};
}

void check_algorithm_settings(const Scenario& s) {
  const Algorithm& a = algorithm_of(s);
  if (a.traits.optimizer && s.training.optimizer != *a.traits.optimizer) {
    const std::string want = name_of(*a.traits.optimizer);
    throw ScenarioError(s.where("training.optimizer"), "training.optimizer",
                        "\"" + std::string(name_of(s.training.optimizer)) + "\": " + a.name +
                            "'s inner optimizer is " + want + " (set training.optimizer = \"" +
                            want + "\")");
  }
  if (s.training.double_buffered_weights && !a.traits.double_buffering)
    throw ScenarioError(s.where("training.double_buffered_weights"),
                        "training.double_buffered_weights",
                        std::string("PipeDream-2BW's double-buffered weights are pipedream's; ") +
                            a.name + " has none");
  if (a.traits.exchange == Exchange::kParameters && !a.traits.overlapped_averaging &&
      s.training.averaging != Averaging::kBulkSync)
    throw ScenarioError(s.where("training.averaging"), "training.averaging",
                        std::string(a.name) + " averages drained pipelines: \"bulk-sync\" only");
}

void check_churn_support(const Scenario& s) {
  if (!s.churn.enabled(s.devices) || !algorithm_of(s).traits.recovers_from_churn) return;
  const Allreduce& a = allreduce_of(s);
  if (a.topology != AllreduceTopology::kMultiRing || a.executor_collectives)
    throw ScenarioError(
        s.where("training.allreduce"), "training.allreduce",
        "churn needs \"multi-ring\": only its rings re-form around the nodes that are left");
  if (s.training.averaging == Averaging::kOverlapped)
    throw ScenarioError(
        s.where("training.averaging"), "training.averaging",
        "churn needs \"bulk-sync\" averaging: a cluster rejoins at an averaging, which overlapped "
        "averaging never waits for");
}

void check_recovery_support(const Scenario& s) {
  if (s.real.on_peer_loss != PeerLoss::kRecover) return;
  auto refuse = [&](const std::string& key, const std::string& why) {
    throw ScenarioError(s.where(key), key, why);
  };
  if (!algorithm_of(s).traits.recovers_from_churn)
    refuse("real.on_peer_loss",
           "training.algorithm \"" + s.training.algorithm +
               "\" cannot go on without a lost rank (ravnest can): use \"fail\"");
  const Allreduce& a = allreduce_of(s);
  if (a.topology != AllreduceTopology::kMultiRing || a.executor_collectives)
    refuse("training.allreduce",
           "real.on_peer_loss = \"recover\" needs \"multi-ring\": only its rings re-form "
           "around the ranks that are left");
  if (s.training.averaging == Averaging::kOverlapped)
    refuse("training.averaging", "real.on_peer_loss = \"recover\" needs \"bulk-sync\" averaging");
  if (s.checkpoint.enabled())
    refuse("checkpoint.every",
           "checkpoints need every rank of the plan: not with real.on_peer_loss = \"recover\" "
           "in this version");
}

void check_checkpoint_support(const Scenario& s) {
  if (!s.checkpoint.enabled()) return;
  auto refuse = [&](const std::string& why) {
    throw ScenarioError(s.where("checkpoint.every"), "checkpoint.every", why);
  };
  if (!algorithm_of(s).traits.checkpoints)
    refuse("training.algorithm \"" + s.training.algorithm +
           "\" takes no checkpoints in this version (ravnest does)");
  if (s.churn.enabled(s.devices))
    refuse(
        "checkpoints and [churn] do not mix in this version (a checkpoint needs every node of the "
        "plan)");
  if (s.faults.node >= 0)
    refuse(
        "checkpoints and [faults] do not mix in this version (a node's count of sends is not in "
        "its checkpoint)");
  if (s.training.averaging == Averaging::kOverlapped)
    refuse(
        "checkpoints need bulk-synchronous averaging (training.averaging = \"overlapped\" leaves "
        "averagings "
        "running at the checkpoint)");
}

std::string variant_label(const Scenario& s) {
  const TrainingSpec defaults;
  std::string label = algorithm_of(s).name;
  if (s.training.averaging != defaults.averaging)
    label += " " + std::string(name_of(s.training.averaging));
  if (s.training.allreduce != defaults.allreduce) label += " " + s.training.allreduce;
  return label;
}

void run_node(NodeEnv& env, const RunSpec& spec, int node) {
  algorithm_of(*spec.scenario).run(env, spec, node);
}

}  // namespace rv
