// Model zoo: models as sequences of layer units (layers.h), each with an analytic per-layer
// profile, and StageModule, the layers [begin, end) of a model with their own parameters (one
// pipeline stage).
//
// Layers are functional: a stage's forward takes the parameter tensors explicitly, so a backward
// can use the very weights its forward used (weight stashing) while the optimizer replaces the
// current weights out of place.
//
// A model has exactly the layers its scenario asks for: a flatten only where a linear layer needs
// flat inputs, and an output layer only with model.head = "linear". Its last layer must produce
// the task's outputs per sample (build_model checks).
#pragma once

#include <ATen/core/Generator.h>
#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "core/model/layers.h"
#include "core/scenario/scenario.h"
#include "core/units.h"

namespace rv {

struct ModelDesc {
  std::string name;
  std::vector<int64_t> input_shape;  // one sample, e.g. {1, 28, 28}
  int64_t input_elems = 0;
  int64_t outputs =
      0;  // floats per sample of the last layer (the task's outputs; [tokens, vocab] logits)
  int64_t input_vocab = 0;  // > 0: the inputs are token ids below this (int64), not floats
  std::vector<LayerPtr> layers;
  // Whether runs log every stage's parameters after each update (kParams events, params.csv): the
  // block model of a problem with known constants, whose exact gradient norm is computed from them
  // after the run (theory/measure.h).
  bool record_params = false;
  std::vector<LayerProfile> profile;  // one per layer
  // Prefix sums over layers (size layer_count() + 1), so range queries are O(1).
  std::vector<int64_t> prefix_params, prefix_buffers, prefix_saved_elems;
  std::vector<Flops> prefix_flops;

  int layer_count() const { return static_cast<int>(layers.size()); }
  int64_t params(int begin, int end) const;
  Flops forward_flops(int begin, int end) const;  // per sample
  // The operations of layers [begin, end) for a micro-batch of `batch` samples
  // (core/compute/work.h): the forward; the backward (matmuls and convolutions once per gradient
  // they compute, of the weights and, unless nothing before them needs it, of the input; other
  // layers once); and an optimizer step of `training`'s optimizer (its kernels on each parameter
  // tensor, Optimizer::add_step_work).
  Work forward_work(int begin, int end, int64_t batch) const;
  Work backward_work(int begin, int end, int64_t batch) const;
  Work update_work(int begin, int end, const TrainingSpec& training) const;
  int64_t activation_elems(int begin, int end) const;  // saved for backward, per sample
  int64_t input_elems_of(int layer) const;             // per-sample elements entering `layer`
  int64_t buffers(int begin, int end) const;
  int64_t total_params() const { return params(0, layer_count()); }
  // Where layer `layer`'s state (its parameters, then its buffers) begins in the flat model state.
  int64_t state_offset(int layer) const { return prefix_params[layer] + prefix_buffers[layer]; }
};

// The model of a scenario, for inputs of `input_shape` and `outputs` features out per sample.
// Throws rv::InputError (naming model.head) when the layers asked for do not end in `outputs`.
ModelDesc build_model(const ModelSpec& spec, const std::vector<int64_t>& input_shape,
                      int64_t outputs);
// The model of a scenario, for its data's inputs and its task's outputs.
ModelDesc build_model(const Scenario& s);

// Layers [begin, end) of a model, with parameters initialised from (seed, layer index) so that a
// layer gets the same initial weights however the model is cut.
class StageModule {
 public:
  StageModule(const ModelDesc& model, int begin, int end, uint64_t seed);

  int begin() const { return begin_; }
  int end() const { return end_; }
  // Current trainable parameters, in layer order. Tensors require grad.
  const std::vector<at::Tensor>& params() const { return params_; }
  void set_params(std::vector<at::Tensor> p) { params_ = std::move(p); }
  // BatchNorm running statistics (mean, var per BatchNorm layer), updated by training forwards.
  const std::vector<at::Tensor>& buffers() const { return buffers_; }

  // The stage's state as one flat float tensor: each layer's parameters, then its buffers, layer
  // after layer (the order of ModelDesc::state_offset). A copy.
  at::Tensor flat_state() const;
  // Replaces the state from a flat tensor of that layout: parameters become new tensors (the old
  // ones may be stashed), buffers are overwritten in place.
  void set_flat_state(const at::Tensor& flat);
  // Per-parameter tensors (e.g. an optimizer's momenta, shaped like params()) in the same flat
  // layout, zeros where the buffers are; and back.
  at::Tensor flatten_like_state(const std::vector<at::Tensor>& per_param) const;
  std::vector<at::Tensor> unflatten_params(const at::Tensor& flat) const;

  // Moves the parameters (as new leaves requiring grad) and buffers to `device`.
  void to(c10::Device device);

  // Runs the layers on `x` with the given parameters (params() or a stashed version).
  // train: batch statistics and dropout; `dropout_seed` fixes the dropout masks, so a forward can
  // be recomputed exactly. update_buffers: whether BatchNorm running statistics move.
  at::Tensor forward(const at::Tensor& x, const std::vector<at::Tensor>& params, bool train,
                     uint64_t dropout_seed, bool update_buffers) const;

 private:
  const ModelDesc* model_;
  int begin_, end_;
  std::vector<at::Tensor> params_;
  std::vector<at::Tensor> buffers_;
  std::vector<int> param_offset_;   // per layer in range: index of its first parameter
  std::vector<int> buffer_offset_;  // per layer in range: index of its first buffer
  // Calls param(i, offset) and buffer(i, offset) in flat-state order; returns the total length.
  int64_t walk_state(const std::function<void(int, int64_t)>& param,
                     const std::function<void(int, int64_t)>& buffer) const;
};

}  // namespace rv
