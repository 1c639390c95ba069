// Layer kinds as units: each kind is one class that knows, in one place, its shape rule and
// per-sample profile (computed from sizes alone, so the simulator's timing mode can describe
// billion-parameter models), its parameters and buffers with their initialisation, and its
// forward. A model (model.h) is a sequence of such layers; adding a kind is one class in
// layers.cc plus its factory here.
//
// Layers are functional: forward() takes the parameter tensors explicitly (the current weights or
// a stashed version). Buffers (BatchNorm running statistics) are updated in place.
#pragma once

#include <ATen/core/Generator.h>
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/compute/work.h"
#include "core/units.h"

namespace rv {

// What one layer costs, per sample.
struct LayerProfile {
  std::string name;                // "linear(784->256) -> 256"
  int64_t params = 0;              // trainable parameters
  int64_t buffers = 0;             // non-trainable state (BatchNorm running statistics)
  int param_tensors = 0;           // how many tensors hold the parameters (the optimizer's kernels)
  std::vector<int64_t> out_shape;  // output shape of one sample
  int64_t out_elems = 0;           // product of out_shape
  Flops forward_flops = 0;         // per sample
  // The forward's kernels (core/compute/work.h): `forward_ops` operations of `op_kind` sharing
  // the forward's flops (0 for a view such as flatten).
  OpKind op_kind = OpKind::kElementwise;
  int forward_ops = 1;
};

// How a forward runs.
struct ForwardContext {
  bool train = false;           // batch statistics and dropout
  uint64_t dropout_seed = 0;    // fixes the dropout masks (with the layer's index), so a forward
                                // can be recomputed exactly
  bool update_buffers = false;  // whether BatchNorm running statistics move
  int index = 0;                // the layer's index in the model
};

class Layer {
 public:
  virtual ~Layer() = default;
  // The profile of one sample entering with shape `in`. Throws rv::InputError when the layer
  // cannot take that shape.
  virtual LayerProfile profile(const std::vector<int64_t>& in) const = 0;
  // Fresh parameters in order, drawn from `gen` (PyTorch's default initialisations); they
  // require grad. Fresh buffers.
  virtual std::vector<at::Tensor> init_params(at::Generator& gen) const;
  virtual std::vector<at::Tensor> init_buffers() const;
  // The layer on a batch `x`; `params` and `buffers` point to this layer's first parameter and
  // buffer (as many as init_params()/init_buffers() return).
  virtual at::Tensor forward(const at::Tensor& x, const at::Tensor* params,
                             const at::Tensor* buffers, const ForwardContext& ctx) const = 0;
};

using LayerPtr = std::shared_ptr<const Layer>;

LayerPtr make_flatten();
LayerPtr make_linear(int64_t in, int64_t out);
LayerPtr make_relu();
LayerPtr make_dropout(double p);
// Stride 1; `padding` on every side.
LayerPtr make_conv2d(int64_t in_channels, int64_t out_channels, int64_t kernel, int64_t padding);
LayerPtr make_batch_norm2d(int64_t channels);
LayerPtr make_max_pool2d(int64_t kernel);
// The additive block model (model.kind = "blocks"; core/problem/problem.h): samples of `rows` rows,
// `dim` features and a running sum. A block holds parameters [c0, c1) (starting at zero) and adds
// X[:, c0:c1] w to the sum; the readout gives the sum (rows values), or with `logits` (one row)
// the two-class logits (0, sum).
LayerPtr make_block(int64_t rows, int64_t dim, int64_t c0, int64_t c1);
LayerPtr make_readout(int64_t rows, int64_t dim, bool logits);

// "1x28x28": a shape for messages and layer names.
std::string shape_text(const std::vector<int64_t>& shape);

// splitmix64 of a combination: independent, reproducible seeds per (seed, index).
uint64_t mix_seed(uint64_t a, uint64_t b);

}  // namespace rv
