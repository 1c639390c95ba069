#include "core/model/cost_model.h"

#include <algorithm>

#include "core/error.h"
#include "core/model/optimizer.h"

namespace rv {

namespace {

// Modeled flops of an optimizer step per parameter: its kernels' (Optimizer::add_step_work), as
// Work::add_elementwise counts them (by the bytes each moves).
double update_flops_per_param(const TrainingSpec& training) {
  Work one;
  Optimizer::add_step_work(training, 1, one);
  return one.total_flops();
}

}  // namespace

int optimizer_state_floats(const TrainingSpec& training) {
  if (adaptive_optimizer(training)) return 2;
  return training.momentum > 0 ? 1 : 0;
}

StageCost stage_cost(const ModelDesc& model, int begin, int end, const TrainingSpec& training,
                     int64_t batch, int64_t in_flight) {
  StageCost c;
  const double b = static_cast<double>(batch);
  c.forward = b * model.forward_flops(begin, end);
  // Backward: about twice the forward (gradients w.r.t. inputs and weights). Without weight
  // stashing the forward is recomputed with the current weights first.
  c.backward = 2.0 * c.forward + (training.weight_stashing ? 0.0 : c.forward);
  const int64_t params = model.params(begin, end);
  c.update = update_flops_per_param(training) * static_cast<double>(params);
  // Sizes saturate (units.h): the planner then finds them too large for every device and link.
  const Bytes batch_bytes = sat_mul(kFloatBytes, batch);
  c.activation_out =
      end < model.layer_count() ? sat_mul(batch_bytes, model.profile[end - 1].out_elems) : 0;
  c.gradient_in = begin > 0 ? sat_mul(batch_bytes, model.input_elems_of(begin)) : 0;

  const Bytes buffers = model.buffers(begin, end);
  // Weights, gradients, optimizer state and buffers.
  Bytes m =
      sat_mul(kFloatBytes, sat_add(sat_mul(params, 2 + optimizer_state_floats(training)), buffers));
  // Per unfinished micro-batch: with stashing the saved activations of every layer and, in the
  // worst case, one older version of the weights (training.weight_versions in all, where set);
  // without, only the stage's input.
  const Bytes saved =
      sat_mul(batch_bytes, training.weight_stashing ? model.activation_elems(begin, end)
                                                    : model.input_elems_of(begin));
  const Bytes stash = training.weight_stashing ? sat_mul(kFloatBytes, params) : 0;
  m = sat_add(m, sat_mul(in_flight, saved));
  const int64_t versions = training.weight_versions > 0
                               ? std::min<int64_t>(in_flight - 1, training.weight_versions)
                               : in_flight - 1;
  if (in_flight > 1) m = sat_add(m, sat_mul(versions, stash));
  c.memory = m;
  return c;
}

StageWork stage_work(const ModelDesc& model, int begin, int end, const TrainingSpec& training,
                     int64_t batch) {
  StageWork w;
  const double b = static_cast<double>(batch);
  w.forward = model.forward_work(begin, end, batch);
  w.backward = model.backward_work(begin, end, batch);
  // Without weight stashing the backward first recomputes the layers' forward (not the inputs).
  if (!training.weight_stashing) w.backward.add(w.forward);
  // The first stage makes its inputs from the stored samples (core/data/dataset.cc): the rows'
  // indices as a tensor, a gather, a conversion to float and the normalisation (scale, shift,
  // divide).
  if (begin == 0) {
    w.forward.add_elementwise(b);
    w.forward.add_elementwise(b * static_cast<double>(model.input_elems), 1, 5);
  }
  // The last stage's backward starts from the loss (core/data/task.cc), kernel by kernel: the
  // targets (the rows' indices as a tensor, a gather), log-softmax and the negative
  // log-likelihood's gather, autograd's seed gradient, the loss read back, and the two backward
  // kernels (the squared error takes as many).
  if (end == model.layer_count()) {
    const double outputs = b * static_cast<double>(model.outputs);
    w.backward.add_elementwise(b, 1, 2);
    w.backward.add_elementwise(outputs);
    w.backward.add_elementwise(b);
    w.backward.add_elementwise(1, 1, 2);
    w.backward.add(OpKind::kElementwise, Pass::kBackward, outputs, 2.0 * kFloatBytes * outputs, 2);
  }
  w.update = model.update_work(begin, end, training);
  // Cold memory (work.h): the bytes the stage touches between two spans of a kind (its weights,
  // the accumulated gradients, the fresh gradients of each backward, the optimizer state, the
  // buffers and one micro-batch's saved activations), and what a span must fetch once if they do
  // not fit the cache: the forward reads the weights; the backward writes the weights' gradients
  // and, where the stage's input needs a gradient (or the forward is recomputed), reads the
  // weights again; the optimizer step reads the weights, their gradients and its state. (On the
  // host measured, the CNN's second stage stepped in 136-166 us after a backward at batch 32 and
  // in 250-335 us after one at batch 128, its parameters the same and no page faulted.)
  const double weights =
      static_cast<double>(kFloatBytes) * static_cast<double>(model.params(begin, end));
  const double resident =
      weights * (3 + optimizer_state_floats(training)) +
      static_cast<double>(kFloatBytes) * static_cast<double>(model.buffers(begin, end)) +
      static_cast<double>(kFloatBytes) * b *
          static_cast<double>(model.activation_elems(begin, end));
  w.forward.add_cold(weights, resident);
  w.backward.add_cold(weights * ((begin > 0 || !training.weight_stashing) ? 2 : 1), resident);
  w.update.add_cold(weights * (2 + optimizer_state_floats(training)), resident);
  // After an idle wait (profile.h, idle_cold) a backward also fetches the activations its
  // micro-batch saved. What a span receives (a later stage's input, a backward's incoming
  // gradient) the transport wrote right before it, after the wait: it is warm. (Charged cold, the
  // CNN's incoming gradient at batch 128, 6.4 MB, put its first stage's backward at 1.13x its
  // real time on the host measured, where the cooling curve said its wait emptied the cache.)
  const double act = static_cast<double>(kFloatBytes) * b;
  w.backward.add_idle_cold(act * static_cast<double>(model.activation_elems(begin, end)));
  // What the forward keeps for the backward (Stage::forward): the layers' saved activations, or
  // without weight stashing only the input (the backward recomputes the rest). Whether the
  // backward finds them in the cache depends on what the device ran in between (DeviceHistory).
  w.forward.add_saved(act * static_cast<double>(training.weight_stashing
                                                    ? model.activation_elems(begin, end)
                                                    : model.input_elems_of(begin)));
  return w;
}

Seconds stage_pass_time(const StageWork& w, const ComputeProfile& device, int ahead) {
  RV_CHECK(ahead >= 0, "stage_pass_time: ahead must be 0 or more");
  const double saved = w.forward.saved_bytes();
  return time_of(w.forward, device) +
         time_of(w.backward, device, 0, 0, evicted_bytes(saved, 2.0 * ahead * saved, device));
}

Seconds stage_compute_time(const StageWork& w, const ComputeProfile& device, int ahead) {
  return stage_pass_time(w, device, ahead) + time_of(w.update, device);
}

}  // namespace rv
