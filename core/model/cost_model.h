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

constexpr Bytes kFloatBytes = 4;

struct StageCost {
  Flops forward = 0;   // one micro-batch
  Flops backward = 0;  // one micro-batch; includes the recomputed forward without weight stashing
  Flops update = 0;    // one optimizer step
  // The same, as kernels (core/compute/work.h): what the compute model charges.
  Work forward_work, backward_work, update_work;
  Bytes activation_out = 0;  // message to the next stage (0 for the last stage)
  Bytes gradient_in = 0;     // message to the previous stage (0 for the first stage)
  Bytes memory = 0;          // modeled peak memory with `in_flight` unfinished micro-batches
};

// Costs of layers [begin, end) for micro-batches of `batch` samples, `in_flight` of them unfinished.
StageCost stage_cost(const ModelDesc& model, int begin, int end, const TrainingSpec& training,
                     int64_t batch, int64_t in_flight);

// Optimizer state per parameter, in floats (sgd: 0 or 1 for momentum; adam: 2).
int optimizer_state_floats(const TrainingSpec& training);

// The compute time of a micro-batch's forward, backward and the update on `device`, as the
// simulator charges them (core/compute/profile.h time_of).
Seconds stage_compute_time(const StageCost& c, const ComputeProfile& device);

}  // namespace rv
