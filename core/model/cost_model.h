// Cost model of one pipeline stage: modeled work (flops), message sizes and memory. The simulator
// charges exactly these numbers, the planner predicts with them, and the algorithms report them, so
// a prediction and a simulation disagree only where the network or the schedule differs.
#pragma once

#include "core/compute/profile.h"
#include "core/compute/work.h"
#include "core/model/model.h"
#include "core/scenario/scenario.h"
#include "core/units.h"

namespace rv {

struct StageCost {
  Flops forward = 0;   // one micro-batch
  Flops backward = 0;  // one micro-batch; includes the recomputed forward without weight stashing
  Flops update = 0;    // one optimizer step
  Bytes activation_out = 0;  // message to the next stage (0 for the last stage)
  Bytes gradient_in = 0;     // message to the previous stage (0 for the first stage)
  Bytes memory = 0;          // modeled peak memory with `in_flight` unfinished micro-batches
};

// Costs of layers [begin, end) for micro-batches of `batch` samples, `in_flight` of them
// unfinished.
StageCost stage_cost(const ModelDesc& model, int begin, int end, const TrainingSpec& training,
                     int64_t batch, int64_t in_flight);

// Optimizer state per parameter, in floats (sgd: 0 or 1 for momentum; adam: 2).
int optimizer_state_floats(const TrainingSpec& training);

// The same stage's compute as kernels (core/compute/work.h), what the compute model charges; the
// flops of StageCost, counted by kind and size. O(layers): callers compute it once per stage.
struct StageWork {
  Work forward;   // one micro-batch
  Work backward;  // one micro-batch; includes the recomputed forward without weight stashing
  Work update;    // one optimizer step
};
StageWork stage_work(const ModelDesc& model, int begin, int end, const TrainingSpec& training,
                     int64_t batch);

// The compute time of a micro-batch's forward and backward on `device`, back to back, as the
// simulator charges them (core/compute/profile.h time_of); `ahead`: how many micro-batches ahead
// the stage runs in the steady state. Between a micro-batch's forward and its backward it then
// runs `ahead` newer forwards and `ahead` older backwards (one forward, one backward), whose saved
// activations, 2 x ahead micro-batches' worth, push its own out of the cache (evicted_bytes); the
// simulator's DeviceHistory counts the same touches (measured: 2 for the first of two stages, 6,
// 4 and 2 for the stages of gpt-pipeline's four). The last stage, and a stage alone, run none.
Seconds stage_pass_time(const StageWork& w, const ComputeProfile& device, int ahead = 0);
// The `ahead` the planner charges a stage with: 1 before the last stage, 0 for the last. A
// Ravnest stage i of k runs up to min(k - i - 1, in flight - 1) ahead; the planner's searches
// know a stage's layers but not its place, so they charge the least. What that leaves out is
// bounded: charging every stage before the last as fully evicted instead moves every shipped
// scenario's prediction by 0.05% at most (gpt-sort; issue 60, item 2), and nothing where the
// devices have no memory term (`tflops` alone) or a stage's saved activations fit the cache
// 2 x (k - 1) times over.
constexpr int steady_ahead(bool last_stage) { return last_stage ? 0 : 1; }
// The same and the update: stage_pass_time + time_of(w.update), summed in that order.
Seconds stage_compute_time(const StageWork& w, const ComputeProfile& device, int ahead = 0);

}  // namespace rv
