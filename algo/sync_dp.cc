// sync-dp: synchronous data parallelism, the baseline Ravnest is measured against. Every node
// holds the whole model (the plan refuses a pool whose nodes cannot), trains on its own shard, and
// every step all-reduces (mean) its gradients with the others by ring all-reduce before the same
// optimizer step; the models stay identical. Only node 0 evaluates.
#include "algo/algorithm.h"
#include "algo/pipeline_worker.h"
#include "algo/registry.h"
#include "core/error.h"

namespace rv {

void run_sync_dp(NodeEnv& env, const RunSpec& spec, int node) {
  const TrainingSpec& tr = spec.scenario->training;
  const NodeRole role = spec.plan->role_of(node);
  if (role.stage < 0) return;
  if (!role.first() || !role.last())
    throw InputError("sync-dp needs a plan in which every node holds the whole model");
  PipelineWorker w(env, spec, node, tr, in_flight(algorithm_of(*spec.scenario), tr, 1));
  const int64_t B = w.batch();
  const int64_t clusters = static_cast<int64_t>(spec.plan->clusters.size());
  auto unexpected = [&](Message m) {
    throw unexpected_message("node " + std::to_string(node) + " (sync-dp)", m);
  };
  for (int64_t step = 0; step < tr.steps; ++step) {
    int64_t st = 0;
    w.forward(step, nullptr);
    w.last_backward(step, &st);
    w.exchange_gradients(unexpected);
    w.update(step, 0);
    const int64_t done = step + 1;
    if (role.cluster == 0 && tr.eval_every > 0 && done % tr.eval_every == 0 && done < tr.steps)
      w.inject_eval(done, done * B * clusters);
  }
  if (role.cluster == 0) w.inject_eval(tr.steps, tr.steps * B * clusters);
  w.stop_next();
}

Algorithm sync_dp_algorithm() {
  return {.name = "sync-dp",
          .summary =
              "synchronous data parallelism: every node the whole model, gradients "
              "all-reduced",
          .run = &run_sync_dp,
          .traits = {.in_flight = InFlightRule::kOne,
                     .layout = Layout::kReplicas,
                     .exchange = Exchange::kGradients}};
}

}  // namespace rv
