// Local SGD: average_every steps per cluster on its own data through ravnest's periodic pipeline
// (algo/algorithm.h run_periodic_pipeline), then the clusters' parameters averaged: DiLoCo's
// outer step (algo/outer_optimizer.h) with learning rate 1 and no momentum, the inner optimizer
// state local.
#include "algo/algorithm.h"
#include "algo/registry.h"

namespace rv {
namespace {

OuterSgd outer_step(const TrainingSpec&) { return {.lr = 1.0, .momentum = 0.0}; }

void run_local_sgd(NodeEnv& env, const RunSpec& spec, int node) {
  run_periodic_pipeline(env, spec, node);
}

}  // namespace

Algorithm local_sgd_algorithm() {
  return {.name = "local-sgd",
          .summary =
              "local SGD: average_every steps per cluster on its own data, then the "
              "clusters' parameters averaged (DiLoCo's outer step with learning rate 1 and "
              "no momentum)",
          .run = &run_local_sgd,
          .hooks = {.outer_step = &outer_step}};
}

}  // namespace rv
