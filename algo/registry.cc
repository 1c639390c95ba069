#include "algo/registry.h"

#include <algorithm>
#include <cmath>

#include "algo/algorithm.h"
#include "core/error.h"
#include "core/fault_injection.h"
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

// The registry: one line per algorithm, in listing order. Each algorithm's file defines its entry,
// `Algorithm <name>_algorithm()`.
#define RV_EACH_ALGORITHM(X) \
  X(ravnest)                 \
  X(gpipe)                   \
  X(sync_dp)                 \
  X(diloco)                  \
  X(local_sgd)               \
  X(pipedream)               \
  X(dedloc)                  \
  /* the list's end */

#define RV_DECLARE_ALGORITHM(name) Algorithm name##_algorithm();
RV_EACH_ALGORITHM(RV_DECLARE_ALGORITHM)
#define RV_ALGORITHM_ENTRY(name) name##_algorithm(),

const std::vector<Algorithm>& algorithms() {
  static const std::vector<Algorithm> kAlgorithms = {RV_EACH_ALGORITHM(RV_ALGORITHM_ENTRY)};
  return kAlgorithms;
}

std::vector<std::string> algorithm_names() { return names_of(algorithms()); }

const Algorithm& algorithm_of(const Scenario& s) {
  return find_named(algorithms(), s.training.algorithm, s, "training.algorithm");
}

TrainingSpec effective_training(const Scenario& s) {
  const Algorithm& a = algorithm_of(s);
  TrainingSpec t = s.training;
  if (a.traits.forces_weight_stashing) t.weight_stashing = true;
  if (a.hooks.effective != nullptr) a.hooks.effective(t);
  return t;
}

namespace {

// The row of `a` named `name`, or null.
const KeySpec* own_key(const Algorithm& a, const std::string& name) {
  for (const KeySpec& k : a.keys)
    if (k.name == name) return &k;
  return nullptr;
}

// A key of [training] that no row of the algorithm of `s` declares: whose it is, if anyone's.
[[noreturn]] void refuse_key(const Scenario& s, const Algorithm& a, const std::string& name) {
  const std::string key = "training." + name;
  for (const Algorithm& other : algorithms())
    if (own_key(other, name) != nullptr)
      throw ScenarioError(s.where(key), key,
                          std::string("a key of ") + other.name + "; training.algorithm \"" +
                              a.name + "\" has no such key");
  throw ScenarioError(s.where(key), key, "unknown key");
}

// The value of the table's key `dotted` ("training.optimizer") in `s`, as TOML text.
std::string scenario_value_text(const Scenario& s, const std::string& dotted) {
  for (const KeySpec& k : scenario_keys())
    if (k.dotted() == dotted) return toml_value_text(k, k.get(s, 0));
  throw Error(std::string("algorithm registry: no scenario key ") + dotted);
}

}  // namespace

void resolve_algorithm_keys(Scenario& s) {
  const Algorithm& a = algorithm_of(s);
  std::map<std::string, KeyValue>& given = s.training.algorithm_keys;
  for (auto& [name, value] : given) {
    const KeySpec* k = own_key(a, name);
    if (k == nullptr) refuse_key(s, a, name);
    value = read_key_value(*k, value, s.where("training." + name));
  }
  for (const KeySpec& k : a.keys)
    if (given.count(k.name) == 0) given[k.name] = k.default_at(0);
}

std::vector<KeySpec> algorithm_key_rows() {
  std::vector<KeySpec> rows;
  for (const Algorithm& a : algorithms())
    for (const KeySpec& k : a.keys) rows.push_back(k);
  return rows;
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

int64_t admitted_in_flight(const Algorithm& a, const TrainingSpec& training, int stages) {
  return in_flight(a, training, stages) + injected_fault().extra_in_flight;
}

int64_t micro_batches_per_update(const Algorithm& a, const TrainingSpec& training) {
  if (a.hooks.micro_batches_per_update != nullptr)
    return a.hooks.micro_batches_per_update(training);
  return a.traits.schedule == Schedule::kFlush ? training.micro_batches : 1;
}

int64_t target_samples(int64_t target, int64_t batch, int clusters) {
  return target > 0 ? target : batch * clusters;
}

int64_t micro_batches_per_exchange(const Algorithm& a, const TrainingSpec& training, int64_t batch,
                                   int clusters) {
  if (a.hooks.target_batch != nullptr && batch > 0 && clusters > 0) {
    const int64_t each = batch * clusters;
    const int64_t target = target_samples(a.hooks.target_batch(training), batch, clusters);
    return std::max<int64_t>(1, (target + each - 1) / each);
  }
  const int64_t per_update = micro_batches_per_update(a, training);
  const int64_t updates = a.traits.exchange == Exchange::kGradients ? 1 : training.average_every;
  return updates * per_update;
}

int64_t averaged_rows(const Algorithm& a, const TrainingSpec& training) {
  if (a.traits.exchange != Exchange::kParameters || a.hooks.outer_step != nullptr ||
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
  for (const FixedSetting& f : a.fixed) {
    const std::string value = scenario_value_text(s, f.key);
    if (value != f.value)
      throw ScenarioError(s.where(f.key), f.key,
                          value + ": " + a.name + " is defined with " + f.key + " = " + f.value);
  }
  for (const auto& [name, value] : s.training.algorithm_keys) {
    const KeySpec* k = own_key(a, name);
    if (k == nullptr) refuse_key(s, a, name);
    read_key_value(*k, value, s.where("training." + name));
  }
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
