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
#include "core/seed.h"
#include "core/units.h"

namespace rv {

// One group of a layer's kernels, for layers made of kernels of several kinds (a transformer
// block: its linear maps, its attention's batched products, its norms and elementwise kernels):
// `count` operations of `kind` with `flops` per sample among them all, each moving `elems` floats
// per sample and `fixed` floats besides (its weights). A backward computes `grads` gradients per
// matmul or conv operation (a linear map's weights and input, or both operands of an attention
// product), and runs other kinds once.
struct LayerOp {
  OpKind kind = OpKind::kElementwise;
  int count = 1;
  Flops flops = 0;   // per sample, the group's `count` operations together
  double elems = 0;  // per sample, per operation
  double fixed = 0;  // per operation
  int grads = 2;     // matmul and conv only
};

// What one layer costs, per sample.
struct LayerProfile {
  std::string name;  // "linear(784->256) -> 256"
  // The elements of each tensor that holds trainable parameters, in init_params' order: the
  // optimizer runs its kernels tensor by tensor, and a kernel's size decides its rate.
  std::vector<int64_t> param_elems;
  int64_t params = 0;              // trainable parameters: their sum (finish_profile)
  int64_t buffers = 0;             // non-trainable state (BatchNorm running statistics)
  std::vector<int64_t> out_shape;  // output shape of one sample
  int64_t out_elems = 0;           // product of out_shape
  Flops forward_flops = 0;         // per sample
  // The forward's kernels (core/compute/work.h): `forward_ops` operations of `op_kind` sharing
  // the forward's flops (0 for a view such as flatten).
  OpKind op_kind = OpKind::kElementwise;
  int forward_ops = 1;
  // A layer of several kinds of kernels lists them here instead (op_kind and forward_ops are then
  // unused); forward_flops is their sum.
  std::vector<LayerOp> ops;
  // Floats per sample the layer keeps for its backward besides its input (its output, or for a
  // transformer block every intermediate, attention's seq_len^2 scores per head included); 0:
  // out_elems.
  int64_t saved_elems = 0;
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
// GPT-style decoder layers (model.kind = "transformer", core/model/transformer.cc). A sample is a
// sequence of token ids (as floats, exact below 2^24); the embedding maps it to [tokens, d_model]
// (token plus position embeddings, then dropout), each block is pre-norm causal self-attention and
// an MLP (GELU), each with a residual connection and dropout, and the head is the final LayerNorm
// and a linear map to the vocabulary, giving [tokens, vocab] logits. Weights are initialised as
// GPT-2's: normal(0, 0.02), the residual projections normal(0, 0.02 / sqrt(2 layers)), biases zero.
LayerPtr make_token_embedding(int64_t vocab, int64_t positions, int64_t d_model, double dropout);
LayerPtr make_transformer_block(int64_t d_model, int64_t heads, int64_t d_ff, double dropout,
                                int64_t layers);
LayerPtr make_lm_head(int64_t d_model, int64_t vocab);

// For layer kinds: the product of a shape's dimensions; a profile with out_elems (a default
// saved_elems, and the forward flops of its kernel groups, if it lists any) filled in and the
// output shape appended to its name; rv::InputError naming the
// layer and what it needs unless `ok`.
int64_t shape_product(const std::vector<int64_t>& v);
LayerProfile finish_profile(LayerProfile p);
void expect_input(bool ok, const std::string& layer, const std::vector<int64_t>& in,
                  const std::string& needs);

// Inverted dropout of `x` with probability `p`, its mask fixed by `seed` (so that a forward can be
// recomputed exactly): drawn on the CPU, whose generator the seed fixes on every device, and moved
// to x's device.
at::Tensor seeded_dropout(const at::Tensor& x, double p, uint64_t seed);

// "1x28x28": a shape for messages and layer names.
std::string shape_text(const std::vector<int64_t>& shape);

}  // namespace rv
