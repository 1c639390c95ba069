// DiLoCo (arXiv 2311.08105): average_every inner AdamW steps per cluster through ravnest's
// periodic pipeline (algo/algorithm.h run_periodic_pipeline), then the mean of the parameter
// deltas through an outer SGD with Nesterov momentum (algo/outer_optimizer.h), whose settings are
// diloco's own keys.
#include "algo/algorithm.h"
#include "algo/registry.h"

namespace rv {
namespace {

const KeySpec& outer_lr_key() {
  static const KeySpec k =
      training_real_key("outer_lr", 0.7, 0.0, 10.0, true,
                        "diloco: the outer optimizer's learning rate on the averaged parameter "
                        "deltas");
  return k;
}

const KeySpec& outer_momentum_key() {
  static const KeySpec k = training_real_key("outer_momentum", 0.9, 0.0, 0.9999, false,
                                             "diloco: the outer optimizer's Nesterov momentum");
  return k;
}

OuterSgd outer_step(const TrainingSpec& training) {
  return {.lr = std::get<double>(stored_value(training, outer_lr_key())),
          .momentum = std::get<double>(stored_value(training, outer_momentum_key()))};
}

void run_diloco(NodeEnv& env, const RunSpec& spec, int node) {
  run_periodic_pipeline(env, spec, node);
}

}  // namespace

Algorithm diloco_algorithm() {
  return {.name = "diloco",
          .summary =
              "DiLoCo: average_every inner AdamW steps per cluster through its pipeline, "
              "then the mean of the parameter deltas through an outer SGD with Nesterov "
              "momentum",
          .run = &run_diloco,
          .hooks = {.outer_step = &outer_step},
          .keys = {outer_lr_key(), outer_momentum_key()},
          .fixed = {{.key = "training.optimizer", .value = "\"adamw\""}}};
}

}  // namespace rv
