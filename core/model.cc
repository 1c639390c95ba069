#include "core/model.h"

#include <cmath>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include "core/error.h"

namespace rv {
namespace {

int64_t product(const std::vector<int64_t>& v) {
  int64_t p = 1;
  for (auto x : v) p *= x;
  return p;
}

std::string shape_str(const std::vector<int64_t>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? "x" : "") + std::to_string(v[i]);
  return s;
}

// Appends `layer` and its profile given the shape that enters it; returns the shape that leaves.
std::vector<int64_t> add_layer(ModelDesc& m, const LayerSpec& l, const std::vector<int64_t>& in) {
  LayerProfile p;
  std::vector<int64_t> out = in;
  const int64_t in_elems = product(in);
  switch (l.kind) {
    case LayerKind::kFlatten:
      out = {in_elems};
      p.name = "flatten";
      break;
    case LayerKind::kLinear:
      RV_CHECK(in.size() == 1 && in[0] == l.in, "linear layer input mismatch");
      out = {l.out};
      p.params = l.in * l.out + l.out;
      p.forward_flops = 2.0 * l.in * l.out;
      p.name = "linear(" + std::to_string(l.in) + "->" + std::to_string(l.out) + ")";
      break;
    case LayerKind::kReLU:
      p.forward_flops = in_elems;
      p.name = "relu";
      break;
    case LayerKind::kDropout:
      p.forward_flops = in_elems;
      p.name = "dropout(" + std::to_string(l.p).substr(0, 4) + ")";
      break;
    case LayerKind::kConv2d: {
      RV_CHECK(in.size() == 3 && in[0] == l.in, "conv layer input mismatch");
      const int64_t h = in[1] + 2 * l.padding - l.kernel + 1;
      const int64_t w = in[2] + 2 * l.padding - l.kernel + 1;
      out = {l.out, h, w};
      p.params = l.out * l.in * l.kernel * l.kernel + l.out;
      p.forward_flops = 2.0 * l.in * l.kernel * l.kernel * l.out * h * w;
      p.name = "conv" + std::to_string(l.kernel) + "x" + std::to_string(l.kernel) + "(" +
               std::to_string(l.in) + "->" + std::to_string(l.out) + ")";
      break;
    }
    case LayerKind::kBatchNorm2d:
      RV_CHECK(in.size() == 3 && in[0] == l.in, "batchnorm layer input mismatch");
      p.params = 2 * l.in;
      p.buffers = 2 * l.in;
      p.forward_flops = 4.0 * in_elems;
      p.name = "batchnorm(" + std::to_string(l.in) + ")";
      break;
    case LayerKind::kMaxPool2d:
      RV_CHECK(in.size() == 3, "maxpool layer input mismatch");
      out = {in[0], in[1] / l.kernel, in[2] / l.kernel};
      p.forward_flops = in_elems;
      p.name = "maxpool" + std::to_string(l.kernel);
      break;
  }
  p.out_shape = out;
  p.out_elems = product(out);
  p.name += " -> " + shape_str(out);
  m.layers.push_back(l);
  m.profile.push_back(p);
  return out;
}

uint64_t mix(uint64_t a, uint64_t b) {
  // splitmix64 of a combination: independent, reproducible seeds per (seed, index).
  uint64_t z = a * 0x9E3779B97F4A7C15ULL + b + 0x632BE59BD9B4E019ULL;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

}  // namespace

int64_t ModelDesc::params(int begin, int end) const { return prefix_params[end] - prefix_params[begin]; }

int64_t ModelDesc::buffers(int begin, int end) const {
  return prefix_buffers[end] - prefix_buffers[begin];
}

Flops ModelDesc::forward_flops(int begin, int end) const {
  return prefix_flops[end] - prefix_flops[begin];
}

int64_t ModelDesc::activation_elems(int begin, int end) const {
  return input_elems_of(begin) + prefix_out_elems[end] - prefix_out_elems[begin];
}

int64_t ModelDesc::input_elems_of(int layer) const {
  return layer == 0 ? input_elems : profile[layer - 1].out_elems;
}

ModelDesc build_model(const ModelSpec& spec, const std::vector<int64_t>& input_shape,
                      int64_t classes) {
  ModelDesc m;
  m.name = spec.kind;
  m.input_shape = input_shape;
  m.input_elems = product(input_shape);
  m.classes = classes;
  std::vector<int64_t> shape = input_shape;
  auto dropout = [&] {
    if (spec.dropout > 0) shape = add_layer(m, {LayerKind::kDropout, 0, 0, 0, 0, spec.dropout}, shape);
  };
  if (spec.kind == "cnn") {
    if (shape.size() != 3) throw InputError("model.kind = \"cnn\" needs image inputs (C x H x W)");
    for (int64_t c : spec.channels) {
      shape = add_layer(m, {LayerKind::kConv2d, shape[0], c, spec.kernel, spec.kernel / 2, 0}, shape);
      if (spec.batch_norm) shape = add_layer(m, {LayerKind::kBatchNorm2d, c, c, 0, 0, 0}, shape);
      shape = add_layer(m, {LayerKind::kReLU}, shape);
      if (shape[1] >= 2 && shape[2] >= 2)
        shape = add_layer(m, {LayerKind::kMaxPool2d, 0, 0, 2, 0, 0}, shape);
    }
  } else if (spec.kind != "mlp") {
    throw InputError("unknown model kind '" + spec.kind + "'");
  }
  shape = add_layer(m, {LayerKind::kFlatten}, shape);
  for (int64_t h : spec.hidden) {
    dropout();
    shape = add_layer(m, {LayerKind::kLinear, shape[0], h}, shape);
    shape = add_layer(m, {LayerKind::kReLU}, shape);
  }
  dropout();
  add_layer(m, {LayerKind::kLinear, shape[0], classes}, shape);
  m.prefix_params.assign(1, 0);
  m.prefix_buffers.assign(1, 0);
  m.prefix_out_elems.assign(1, 0);
  m.prefix_flops.assign(1, 0.0);
  for (const auto& p : m.profile) {
    m.prefix_params.push_back(m.prefix_params.back() + p.params);
    m.prefix_buffers.push_back(m.prefix_buffers.back() + p.buffers);
    m.prefix_out_elems.push_back(m.prefix_out_elems.back() + p.out_elems);
    m.prefix_flops.push_back(m.prefix_flops.back() + p.forward_flops);
  }
  return m;
}

StageModule::StageModule(const ModelDesc& model, int begin, int end, uint64_t seed)
    : model_(&model), begin_(begin), end_(end) {
  RV_CHECK(0 <= begin && begin < end && end <= model.layer_count(), "bad stage layer range");
  for (int i = begin; i < end; ++i) {
    const LayerSpec& l = model.layers[i];
    param_offset_.push_back(static_cast<int>(params_.size()));
    buffer_offset_.push_back(static_cast<int>(buffers_.size()));
    auto gen = at::make_generator<at::CPUGeneratorImpl>(mix(seed, static_cast<uint64_t>(i)));
    // PyTorch's default initialisation: U(-1/sqrt(fan_in), 1/sqrt(fan_in)) for weight and bias.
    auto uniform = [&](std::vector<int64_t> shape, int64_t fan_in) {
      const double bound = 1.0 / std::sqrt(static_cast<double>(fan_in));
      return at::empty(shape, at::kFloat).uniform_(-bound, bound, gen).requires_grad_(true);
    };
    switch (l.kind) {
      case LayerKind::kLinear:
        params_.push_back(uniform({l.out, l.in}, l.in));
        params_.push_back(uniform({l.out}, l.in));
        break;
      case LayerKind::kConv2d:
        params_.push_back(uniform({l.out, l.in, l.kernel, l.kernel}, l.in * l.kernel * l.kernel));
        params_.push_back(uniform({l.out}, l.in * l.kernel * l.kernel));
        break;
      case LayerKind::kBatchNorm2d:
        params_.push_back(at::ones({l.in}, at::kFloat).requires_grad_(true));
        params_.push_back(at::zeros({l.in}, at::kFloat).requires_grad_(true));
        buffers_.push_back(at::zeros({l.in}, at::kFloat));
        buffers_.push_back(at::ones({l.in}, at::kFloat));
        break;
      default:
        break;
    }
  }
}

int64_t StageModule::walk_state(const std::function<void(int, int64_t)>& param,
                                const std::function<void(int, int64_t)>& buffer) const {
  int64_t off = 0;
  for (int k = 0; k < end_ - begin_; ++k) {
    const int pe = k + 1 < end_ - begin_ ? param_offset_[k + 1] : static_cast<int>(params_.size());
    const int be = k + 1 < end_ - begin_ ? buffer_offset_[k + 1] : static_cast<int>(buffers_.size());
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
        params_[i] = flat.narrow(0, off, params_[i].numel()).view(params_[i].sizes()).clone().requires_grad_(true);
      },
      [&](int i, int64_t off) {
        // Through a view with its own version counter: graphs of micro-batches in flight saved the
        // buffer (BatchNorm's backward keeps it) and must not see a version bump, as with the
        // running-statistics update inside batch_norm itself.
        buffers_[i].variable_data().copy_(flat.narrow(0, off, buffers_[i].numel()).view(buffers_[i].sizes()));
      });
  RV_CHECK(n == flat.numel(), "set_flat_state: size mismatch");
}

at::Tensor StageModule::flatten_like_state(const std::vector<at::Tensor>& per_param) const {
  RV_CHECK(per_param.size() == params_.size(), "flatten_like_state: one tensor per parameter needed");
  std::vector<at::Tensor> parts;
  walk_state([&](int i, int64_t) { parts.push_back(per_param[i].detach().reshape({-1})); },
             [&](int i, int64_t) { parts.push_back(at::zeros({buffers_[i].numel()}, at::kFloat)); });
  if (parts.empty()) return at::empty({0}, at::kFloat);
  return at::cat(parts);
}

std::vector<at::Tensor> StageModule::unflatten_params(const at::Tensor& flat) const {
  std::vector<at::Tensor> out(params_.size());
  const int64_t n = walk_state(
      [&](int i, int64_t off) { out[i] = flat.narrow(0, off, params_[i].numel()).view(params_[i].sizes()).clone(); },
      [](int, int64_t) {});
  RV_CHECK(n == flat.numel(), "unflatten_params: size mismatch");
  return out;
}

at::Tensor StageModule::forward(const at::Tensor& input, const std::vector<at::Tensor>& params,
                                bool train, uint64_t dropout_seed, bool update_buffers) const {
  RV_CHECK(params.size() == params_.size(), "stage forward with a wrong number of parameters");
  at::Tensor x = input;
  for (int i = begin_; i < end_; ++i) {
    const LayerSpec& l = model_->layers[i];
    const int k = i - begin_;
    const int po = param_offset_[k], bo = buffer_offset_[k];
    switch (l.kind) {
      case LayerKind::kFlatten:
        x = x.reshape({x.size(0), -1});
        break;
      case LayerKind::kLinear:
        x = at::linear(x, params[po], params[po + 1]);
        break;
      case LayerKind::kReLU:
        x = at::relu(x);
        break;
      case LayerKind::kConv2d:
        x = at::conv2d(x, params[po], params[po + 1], {1, 1}, {l.padding, l.padding});
        break;
      case LayerKind::kBatchNorm2d: {
        at::Tensor rm, rv;
        if (!train || update_buffers) {
          rm = buffers_[bo];
          rv = buffers_[bo + 1];
        }
        x = at::batch_norm(x, params[po], params[po + 1], rm, rv, train, 0.1, 1e-5, false);
        break;
      }
      case LayerKind::kMaxPool2d:
        x = at::max_pool2d(x, {l.kernel, l.kernel});
        break;
      case LayerKind::kDropout:
        if (train && l.p > 0) {
          auto gen = at::make_generator<at::CPUGeneratorImpl>(mix(dropout_seed, static_cast<uint64_t>(i)));
          at::Tensor mask = at::empty_like(x).bernoulli_(1.0 - l.p, gen);
          x = x * mask / (1.0 - l.p);
        }
        break;
    }
  }
  return x;
}

}  // namespace rv
