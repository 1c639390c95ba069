#include "core/model/model.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <cmath>

#include "core/data/dataset.h"
#include "core/error.h"
#include "core/model/optimizer.h"

namespace rv {
namespace {

// Appends `layer` and its profile given the shape that enters it; returns the shape that leaves.
std::vector<int64_t> add_layer(ModelDesc& m, LayerPtr layer, const std::vector<int64_t>& in) {
  LayerProfile p = layer->profile(in);
  std::vector<int64_t> out = p.out_shape;
  m.layers.push_back(std::move(layer));
  m.profile.push_back(std::move(p));
  return out;
}

}  // namespace

int64_t ModelDesc::params(int begin, int end) const {
  return prefix_params[end] - prefix_params[begin];
}

int64_t ModelDesc::buffers(int begin, int end) const {
  return prefix_buffers[end] - prefix_buffers[begin];
}

Flops ModelDesc::forward_flops(int begin, int end) const {
  return prefix_flops[end] - prefix_flops[begin];
}

namespace {

// Bytes one operation of layer `l` moves for `batch` samples: its input, its output and its
// parameters, in float32.
double op_bytes(const ModelDesc& m, int l, int64_t batch) {
  const LayerProfile& p = m.profile[static_cast<size_t>(l)];
  return static_cast<double>(kFloatBytes) *
         (static_cast<double>(batch) * static_cast<double>(m.input_elems_of(l) + p.out_elems) +
          static_cast<double>(p.params));
}

}  // namespace

// Bytes one operation of `op` moves for `batch` samples (float32).
double op_bytes(const LayerOp& op, int64_t batch) {
  return static_cast<double>(kFloatBytes) * (static_cast<double>(batch) * op.elems + op.fixed);
}

Work ModelDesc::forward_work(int begin, int end, int64_t batch) const {
  Work w;
  for (int l = begin; l < end; ++l) {
    const LayerProfile& p = profile[static_cast<size_t>(l)];
    for (const LayerOp& op : p.ops)
      w.add(op.kind, Pass::kForward, static_cast<double>(batch) * op.flops / op.count,
            op_bytes(op, batch), op.count);
    if (p.ops.empty() && p.forward_ops > 0)
      w.add(p.op_kind, Pass::kForward, static_cast<double>(batch) * p.forward_flops / p.forward_ops,
            op_bytes(*this, l, batch), p.forward_ops);
  }
  return w;
}

Work ModelDesc::backward_work(int begin, int end, int64_t batch) const {
  Work w;
  // Whether the gradient reaching layer l must go on to its input: the stage's input needs one
  // unless it is the model's input, and so does anything computed from parameters.
  bool input_grad = begin > 0;
  for (int l = begin; l < end; ++l) {
    const LayerProfile& p = profile[static_cast<size_t>(l)];
    const bool has_params = p.params > 0;
    if (input_grad || has_params) {
      for (const LayerOp& op : p.ops) {
        const bool gemm = op.kind == OpKind::kMatmul || op.kind == OpKind::kConv;
        w.add(op.kind, Pass::kBackward, static_cast<double>(batch) * op.flops / op.count,
              op_bytes(op, batch), static_cast<double>(op.count) * (gemm ? op.grads : 1));
      }
    }
    if (p.ops.empty() && p.forward_ops > 0 && (input_grad || has_params)) {
      const double op_flops = static_cast<double>(batch) * p.forward_flops / p.forward_ops;
      const double ops = p.forward_ops;
      if (p.op_kind == OpKind::kMatmul || p.op_kind == OpKind::kConv)
        w.add(p.op_kind, Pass::kBackward, op_flops, op_bytes(*this, l, batch),
              ops * ((input_grad ? 1 : 0) + (has_params ? 1 : 0)));
      else
        w.add(p.op_kind, Pass::kBackward, op_flops, op_bytes(*this, l, batch), ops);
    }
    input_grad = input_grad || has_params;
  }
  return w;
}

Work ModelDesc::update_work(int begin, int end, const TrainingSpec& training) const {
  Work w;
  for (int l = begin; l < end; ++l)
    for (int64_t elements : profile[static_cast<size_t>(l)].param_elems)
      Optimizer::add_step_work(training, static_cast<double>(elements), w);
  return w;
}

int64_t ModelDesc::activation_elems(int begin, int end) const {
  return input_elems_of(begin) + prefix_saved_elems[end] - prefix_saved_elems[begin];
}

int64_t ModelDesc::input_elems_of(int layer) const {
  return layer == 0 ? input_elems : profile[layer - 1].out_elems;
}

namespace {
// The prefix sums over a model's layers (ModelDesc).
void add_prefix_sums(ModelDesc& m) {
  m.prefix_params.assign(1, 0);
  m.prefix_buffers.assign(1, 0);
  m.prefix_saved_elems.assign(1, 0);
  m.prefix_flops.assign(1, 0.0);
  for (const auto& p : m.profile) {
    m.prefix_params.push_back(m.prefix_params.back() + p.params);
    m.prefix_buffers.push_back(m.prefix_buffers.back() + p.buffers);
    m.prefix_saved_elems.push_back(m.prefix_saved_elems.back() + p.saved_elems);
    m.prefix_flops.push_back(m.prefix_flops.back() + p.forward_flops);
  }
}
// Models beyond these sizes are refused, so that every size computed from them (a stage's bytes,
// a batch's activations, a plan's memory) stays far inside 64 bits: 2^40 parameters (a thousand
// times the largest shipped scenario's 10^10) and 2^40 floats per sample entering or leaving any
// layer.
constexpr int64_t kMaxModelParams = int64_t{1} << 40;
constexpr int64_t kMaxSampleElems = int64_t{1} << 40;

void check_size(const ModelDesc& m, const ModelSpec& spec) {
  const char* key = spec.kind == ModelKind::kCnn           ? "model.channels"
                    : spec.kind == ModelKind::kBlocks      ? "model.blocks"
                    : spec.kind == ModelKind::kTransformer ? "model.d_model"
                                                           : "model.hidden";
  int64_t params = 0;
  for (const LayerProfile& p : m.profile) {
    if (p.out_elems > kMaxSampleElems || p.saved_elems > kMaxSampleElems ||
        p.params > kMaxModelParams)
      throw KeyError(key, "a layer of " + std::to_string(p.params) + " parameters, " +
                              std::to_string(p.out_elems) + " outputs and " +
                              std::to_string(p.saved_elems) +
                              " saved floats per sample: more than 2^40");
    params += p.params;  // at most (layers) x 2^40: no overflow below 2^23 layers
    if (params > kMaxModelParams) throw KeyError(key, "the model has more than 2^40 parameters");
  }
}

}  // namespace

namespace {

// Convolution blocks (conv, batch norm, ReLU, 2x2 max pool where the image is large enough) over
// image inputs; the MLP part follows them.
std::vector<int64_t> add_conv_blocks(ModelDesc& m, const ModelSpec& spec,
                                     std::vector<int64_t> shape) {
  if (shape.size() != 3) throw KeyError("model.kind", "\"cnn\" needs image inputs (C x H x W)");
  for (int64_t c : spec.channels) {
    shape = add_layer(m, make_conv2d(shape[0], c, spec.kernel, spec.kernel / 2), shape);
    if (spec.batch_norm) shape = add_layer(m, make_batch_norm2d(c), shape);
    shape = add_layer(m, make_relu(), shape);
    if (shape[1] >= 2 && shape[2] >= 2) shape = add_layer(m, make_max_pool2d(2), shape);
  }
  return shape;
}

// The additive block model: parameter blocks of near-equal column ranges, then the readout.
ModelDesc build_blocks(ModelDesc m, const ModelSpec& spec, std::vector<int64_t> shape,
                       int64_t outputs) {
  if (shape.size() != 2 || shape[1] < 2)
    throw KeyError(
        "model.kind",
        "\"blocks\" needs a problem's samples (data.kind = \"quadratic\" or \"logistic\")");
  const int64_t rows = shape[0], dim = shape[1] - 1;
  if (spec.blocks > dim)
    throw KeyError("model.blocks", "at most the problem's dimension, " + std::to_string(dim));
  for (int64_t k = 0; k < spec.blocks; ++k)
    shape = add_layer(m, make_block(rows, dim, dim * k / spec.blocks, dim * (k + 1) / spec.blocks),
                      shape);
  shape = add_layer(m, make_readout(rows, dim, outputs == 2 && rows == 1), shape);
  m.record_params = true;
  if (shape != std::vector<int64_t>{outputs})
    throw KeyError("model.kind", "\"blocks\": the readout gives " + shape_text(shape) +
                                     " but the task needs " + std::to_string(outputs) + " outputs");
  add_prefix_sums(m);
  return m;
}

// A GPT-style decoder over a sequence of token ids: embeddings, blocks, the head; stages cut
// between them. Its outputs per sample are [tokens, vocab] logits (the next-token task).
ModelDesc build_transformer(ModelDesc m, const ModelSpec& spec, std::vector<int64_t> shape,
                            int64_t outputs) {
  if (shape.size() != 1)
    throw KeyError("model.kind",
                   "\"transformer\" needs token sequences (data.kind = \"sort\" or \"text\")");
  const int64_t tokens = shape[0];
  const int64_t positions = spec.seq_len > 0 ? spec.seq_len : tokens;
  const int64_t vocab = spec.vocab > 0 ? spec.vocab : outputs;
  if (positions < tokens)
    throw KeyError("model.seq_len", "the data's sequences have " + std::to_string(tokens) +
                                        " tokens: the model needs at least as many positions");
  if (vocab < outputs)
    throw KeyError("model.vocab", "the data has " + std::to_string(outputs) +
                                      " token ids: the model's vocabulary needs at least as many");
  if (spec.d_model % spec.heads != 0)
    throw KeyError("model.heads", "d_model (" + std::to_string(spec.d_model) +
                                      ") must be a multiple of heads (" +
                                      std::to_string(spec.heads) + ")");
  const int64_t d_ff = spec.d_ff > 0 ? spec.d_ff : 4 * spec.d_model;
  shape = add_layer(m, make_token_embedding(vocab, positions, spec.d_model, spec.dropout), shape);
  for (int64_t i = 0; i < spec.layers; ++i)
    shape = add_layer(
        m, make_transformer_block(spec.d_model, spec.heads, d_ff, spec.dropout, spec.layers),
        shape);
  shape = add_layer(m, make_lm_head(spec.d_model, vocab), shape);
  m.outputs = tokens * vocab;  // logits per sample
  m.input_vocab = vocab;
  add_prefix_sums(m);
  check_size(m, spec);
  return m;
}

// Fully connected layers (model.hidden, each with its ReLU, dropout before each where set), then
// the head: the MLP, and the part of a CNN after its convolution blocks.
ModelDesc build_dense(ModelDesc m, const ModelSpec& spec, std::vector<int64_t> shape,
                      int64_t outputs) {
  auto dropout = [&] {
    if (spec.dropout > 0) shape = add_layer(m, make_dropout(spec.dropout), shape);
  };
  const bool head = spec.head == Head::kLinear;
  // Linear layers take flat inputs: flatten only where one follows.
  if (shape.size() > 1 && (!spec.hidden.empty() || head))
    shape = add_layer(m, make_flatten(), shape);
  for (int64_t h : spec.hidden) {
    dropout();
    shape = add_layer(m, make_linear(shape[0], h), shape);
    shape = add_layer(m, make_relu(), shape);
  }
  if (head) {
    dropout();
    shape = add_layer(m, make_linear(shape[0], outputs), shape);
  }
  if (m.layers.empty())
    throw KeyError("model.hidden", "no layers (give model.hidden or model.head = \"linear\")");
  if (shape != std::vector<int64_t>{outputs})
    throw KeyError(
        "model.head",
        "the model's last layer gives " + shape_text(shape) + " per sample but the task needs " +
            std::to_string(outputs) +
            " outputs: set model.head = \"linear\" (a final linear layer to the task's outputs) "
            "or end the model with them");
  add_prefix_sums(m);
  check_size(m, spec);
  return m;
}

}  // namespace

ModelDesc build_model(const ModelSpec& spec, const std::vector<int64_t>& input_shape,
                      int64_t outputs) {
  ModelDesc m;
  m.name = name_of(spec.kind);
  m.input_shape = input_shape;
  m.input_elems = 1;
  for (auto x : input_shape) m.input_elems *= x;
  m.outputs = outputs;
  switch (spec.kind) {
    case ModelKind::kBlocks:
      return build_blocks(std::move(m), spec, input_shape, outputs);
    case ModelKind::kTransformer:
      return build_transformer(std::move(m), spec, input_shape, outputs);
    case ModelKind::kCnn: {
      std::vector<int64_t> shape = add_conv_blocks(m, spec, input_shape);
      return build_dense(std::move(m), spec, std::move(shape), outputs);
    }
    case ModelKind::kMlp:
      break;
  }
  return build_dense(std::move(m), spec, input_shape, outputs);
}

ModelDesc build_model(const Scenario& s) {
  return s.at_key([&] {
    const DatasetShape shape = dataset_shape(s.data);
    // Token sequences and the transformer go together: one without the other would meet ids as
    // features, or features as ids.
    const bool tokens = shape.task == TaskKind::kNextToken;
    if (tokens != (s.model.kind == ModelKind::kTransformer))
      throw KeyError(
          "model.kind",
          tokens ? "data.kind \"" + std::string(name_of(s.data.kind)) +
                       "\" gives token sequences: it needs model.kind "
                       "= \"transformer\""
                 : std::string("\"transformer\" needs token sequences (data.kind = \"sort\" or "
                               "\"text\"), not data.kind \"") +
                       name_of(s.data.kind) + "\"");
    return build_model(s.model, shape.sample_shape, shape.outputs);
  });
}

StageModule::StageModule(const ModelDesc& model, int begin, int end, uint64_t seed)
    : model_(&model), begin_(begin), end_(end) {
  RV_CHECK(0 <= begin && begin < end && end <= model.layer_count(), "bad stage layer range");
  for (int i = begin; i < end; ++i) {
    param_offset_.push_back(static_cast<int>(params_.size()));
    buffer_offset_.push_back(static_cast<int>(buffers_.size()));
    // A layer's initial weights depend on (seed, layer index) only, however the model is cut.
    at::Generator gen =
        at::make_generator<at::CPUGeneratorImpl>(mix_seed(seed, static_cast<uint64_t>(i)));
    for (auto& p : model.layers[i]->init_params(gen)) params_.push_back(std::move(p));
    for (auto& b : model.layers[i]->init_buffers()) buffers_.push_back(std::move(b));
  }
}

void StageModule::to(c10::Device device) {
  for (auto& p : params_) p = p.detach().to(device).requires_grad_(true);
  for (auto& b : buffers_) b = b.to(device);
}

int64_t StageModule::walk_state(const std::function<void(int, int64_t)>& param,
                                const std::function<void(int, int64_t)>& buffer) const {
  int64_t off = 0;
  for (int k = 0; k < end_ - begin_; ++k) {
    const int pe = k + 1 < end_ - begin_ ? param_offset_[k + 1] : static_cast<int>(params_.size());
    const int be =
        k + 1 < end_ - begin_ ? buffer_offset_[k + 1] : static_cast<int>(buffers_.size());
    for (int i = param_offset_[k]; i < pe; ++i) {
      param(i, off);
      off += params_[i].numel();
    }
    for (int i = buffer_offset_[k]; i < be; ++i) {
      buffer(i, off);
      off += buffers_[i].numel();
    }
  }
  return off;
}

at::Tensor StageModule::flat_state() const {
  std::vector<at::Tensor> parts;
  walk_state([&](int i, int64_t) { parts.push_back(params_[i].detach().reshape({-1})); },
             [&](int i, int64_t) { parts.push_back(buffers_[i].reshape({-1})); });
  if (parts.empty()) return at::empty({0}, at::kFloat);
  return at::cat(parts);
}

void StageModule::set_flat_state(const at::Tensor& flat) {
  const int64_t n = walk_state(
      [&](int i, int64_t off) {
        params_[i] = flat.narrow(0, off, params_[i].numel())
                         .view(params_[i].sizes())
                         .clone()
                         .requires_grad_(true);
      },
      [&](int i, int64_t off) {
        // Through a view with its own version counter: graphs of micro-batches in flight saved the
        // buffer (BatchNorm's backward keeps it) and must not see a version bump, as with the
        // running-statistics update inside batch_norm itself.
        buffers_[i].variable_data().copy_(
            flat.narrow(0, off, buffers_[i].numel()).view(buffers_[i].sizes()));
      });
  RV_CHECK(n == flat.numel(), "set_flat_state: size mismatch");
}

at::Tensor StageModule::flatten_like_state(const std::vector<at::Tensor>& per_param) const {
  RV_CHECK(per_param.size() == params_.size(),
           "flatten_like_state: one tensor per parameter needed");
  std::vector<at::Tensor> parts;
  walk_state([&](int i, int64_t) { parts.push_back(per_param[i].detach().reshape({-1})); },
             [&](int i, int64_t) {
               parts.push_back(at::zeros({buffers_[i].numel()}, buffers_[i].options()));
             });
  if (parts.empty()) return at::empty({0}, at::kFloat);
  return at::cat(parts);
}

std::vector<at::Tensor> StageModule::unflatten_params(const at::Tensor& flat) const {
  std::vector<at::Tensor> out(params_.size());
  const int64_t n = walk_state(
      [&](int i, int64_t off) {
        out[i] = flat.narrow(0, off, params_[i].numel()).view(params_[i].sizes()).clone();
      },
      [](int, int64_t) {});
  RV_CHECK(n == flat.numel(), "unflatten_params: size mismatch");
  return out;
}

at::Tensor StageModule::forward(const at::Tensor& input, const std::vector<at::Tensor>& params,
                                bool train, uint64_t dropout_seed, bool update_buffers) const {
  RV_CHECK(params.size() == params_.size(), "stage forward with a wrong number of parameters");
  at::Tensor x = input;
  ForwardContext ctx;
  ctx.train = train;
  ctx.dropout_seed = dropout_seed;
  ctx.update_buffers = update_buffers;
  for (int i = begin_; i < end_; ++i) {
    const int k = i - begin_;
    ctx.index = i;
    const at::Tensor* b = buffers_.empty() ? nullptr : buffers_.data() + buffer_offset_[k];
    x = model_->layers[i]->forward(x, params.data() + param_offset_[k], b, ctx);
  }
  return x;
}

}  // namespace rv
