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
// simulator charges them (core/compute/profile.h time_of); `ahead`: how many other micro-batches'
// forwards the stage runs between a micro-batch's forward and its backward in the steady state,
// whose saved activations push its own out of the cache (evicted_bytes). In an asynchronous
// pipeline every stage but the last runs the next micro-batch's at least: 1; the last stage, and a
// stage alone, none.
Seconds stage_pass_time(const StageWork& w, const ComputeProfile& device, int ahead = 0);
// The `ahead` the planner charges a stage with (a lower bound where a schedule runs more ahead:
// Ravnest's stage i of k up to k - i - 1): 1 before the last stage, 0 for the last.
constexpr int steady_ahead(bool last_stage) { return last_stage ? 0 : 1; }
// The same and the update: stage_pass_time + time_of(w.update), summed in that order.
Seconds stage_compute_time(const StageWork& w, const ComputeProfile& device, int ahead = 0);

}  // namespace rv
