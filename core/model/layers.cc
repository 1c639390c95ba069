#include "core/model/layers.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <cmath>

#include "core/error.h"

namespace rv {

int64_t shape_product(const std::vector<int64_t>& v) {
  int64_t p = 1;
  for (auto x : v) p *= x;
  return p;
}

LayerProfile finish_profile(LayerProfile p) {
  p.out_elems = shape_product(p.out_shape);
  p.params = 0;
  for (int64_t n : p.param_elems) p.params += n;
  if (p.saved_elems == 0) p.saved_elems = p.out_elems;
  if (!p.ops.empty()) {
    p.forward_flops = 0;
    for (const LayerOp& op : p.ops) p.forward_flops += op.flops;
  }
  p.name += " -> " + shape_text(p.out_shape);
  return p;
}

void expect_input(bool ok, const std::string& layer, const std::vector<int64_t>& in,
                  const std::string& needs) {
  if (!ok)
    throw InputError("model: a " + layer + " layer cannot take inputs of shape " + shape_text(in) +
                     " (it needs " + needs + ")");
}

namespace {

// PyTorch's default initialisation: U(-1/sqrt(fan_in), 1/sqrt(fan_in)).
at::Tensor uniform(at::Generator& gen, std::vector<int64_t> shape, int64_t fan_in) {
  const double bound = 1.0 / std::sqrt(static_cast<double>(fan_in));
  return at::empty(shape, at::kFloat).uniform_(-bound, bound, gen).requires_grad_(true);
}

class Flatten : public Layer {
 public:
  LayerProfile profile(const std::vector<int64_t>& in) const override {
    LayerProfile p;
    p.name = "flatten";
    p.out_shape = {shape_product(in)};
    p.forward_ops = 0;  // a view
    return finish_profile(p);
  }
  at::Tensor forward(const at::Tensor& x, const at::Tensor*, const at::Tensor*,
                     const ForwardContext&) const override {
    return x.reshape({x.size(0), -1});
  }
};

class Linear : public Layer {
 public:
  Linear(int64_t in, int64_t out) : in_(in), out_(out) {}
  LayerProfile profile(const std::vector<int64_t>& in) const override {
    expect_input(in.size() == 1 && in[0] == in_, "linear", in, std::to_string(in_) + " features");
    LayerProfile p;
    p.name = "linear(" + std::to_string(in_) + "->" + std::to_string(out_) + ")";
    p.out_shape = {out_};
    p.param_elems = {in_ * out_, out_};
    p.forward_flops = 2.0 * in_ * out_;
    p.op_kind = OpKind::kMatmul;  // one addmm
    return finish_profile(p);
  }
  std::vector<at::Tensor> init_params(at::Generator& gen) const override {
    return {uniform(gen, {out_, in_}, in_), uniform(gen, {out_}, in_)};
  }
  at::Tensor forward(const at::Tensor& x, const at::Tensor* w, const at::Tensor*,
                     const ForwardContext&) const override {
    return at::linear(x, w[0], w[1]);
  }

 private:
  int64_t in_, out_;
};

class ReLU : public Layer {
 public:
  LayerProfile profile(const std::vector<int64_t>& in) const override {
    LayerProfile p;
    p.name = "relu";
    p.out_shape = in;
    p.forward_flops = static_cast<Flops>(shape_product(in));
    return finish_profile(p);
  }
  at::Tensor forward(const at::Tensor& x, const at::Tensor*, const at::Tensor*,
                     const ForwardContext&) const override {
    return at::relu(x);
  }
};

class Dropout : public Layer {
 public:
  explicit Dropout(double p) : p_(p) {}
  LayerProfile profile(const std::vector<int64_t>& in) const override {
    LayerProfile p;
    p.name = "dropout(" + std::to_string(p_).substr(0, 4) + ")";
    p.out_shape = in;
    p.op_kind = OpKind::kRandom;  // its mask draws every element (core/compute/work.h)
    p.forward_ops = 3;            // the mask, the product, the scaling
    p.forward_flops = 3.0 * static_cast<double>(shape_product(in));
    return finish_profile(p);
  }
  at::Tensor forward(const at::Tensor& x, const at::Tensor*, const at::Tensor*,
                     const ForwardContext& ctx) const override {
    if (!ctx.train || p_ <= 0) return x;
    return seeded_dropout(x, p_, mix_seed(ctx.dropout_seed, static_cast<uint64_t>(ctx.index)));
  }

 private:
  double p_;
};

class Conv2d : public Layer {
 public:
  Conv2d(int64_t in, int64_t out, int64_t kernel, int64_t padding)
      : in_(in), out_(out), kernel_(kernel), padding_(padding) {}
  LayerProfile profile(const std::vector<int64_t>& in) const override {
    expect_input(in.size() == 3 && in[0] == in_, "conv", in, std::to_string(in_) + " x H x W");
    const int64_t h = in[1] + 2 * padding_ - kernel_ + 1;
    const int64_t w = in[2] + 2 * padding_ - kernel_ + 1;
    LayerProfile p;
    p.name = "conv" + std::to_string(kernel_) + "x" + std::to_string(kernel_) + "(" +
             std::to_string(in_) + "->" + std::to_string(out_) + ")";
    p.out_shape = {out_, h, w};
    p.param_elems = {out_ * in_ * kernel_ * kernel_, out_};
    p.forward_flops = 2.0 * in_ * kernel_ * kernel_ * out_ * h * w;
    p.op_kind = OpKind::kConv;  // bias fused
    return finish_profile(p);
  }
  std::vector<at::Tensor> init_params(at::Generator& gen) const override {
    const int64_t fan_in = in_ * kernel_ * kernel_;
    return {uniform(gen, {out_, in_, kernel_, kernel_}, fan_in), uniform(gen, {out_}, fan_in)};
  }
  at::Tensor forward(const at::Tensor& x, const at::Tensor* w, const at::Tensor*,
                     const ForwardContext&) const override {
    return at::conv2d(x, w[0], w[1], {1, 1}, {padding_, padding_});
  }

 private:
  int64_t in_, out_, kernel_, padding_;
};

class BatchNorm2d : public Layer {
 public:
  explicit BatchNorm2d(int64_t channels) : c_(channels) {}
  LayerProfile profile(const std::vector<int64_t>& in) const override {
    expect_input(in.size() == 3 && in[0] == c_, "batchnorm", in, std::to_string(c_) + " x H x W");
    LayerProfile p;
    p.name = "batchnorm(" + std::to_string(c_) + ")";
    p.out_shape = in;
    p.param_elems = {c_, c_};
    p.buffers = 2 * c_;
    p.forward_flops = 4.0 * static_cast<double>(shape_product(in));
    p.op_kind = OpKind::kNorm;
    return finish_profile(p);
  }
  std::vector<at::Tensor> init_params(at::Generator&) const override {
    return {at::ones({c_}, at::kFloat).requires_grad_(true),
            at::zeros({c_}, at::kFloat).requires_grad_(true)};
  }
  std::vector<at::Tensor> init_buffers() const override {
    return {at::zeros({c_}, at::kFloat), at::ones({c_}, at::kFloat)};  // running mean, variance
  }
  at::Tensor forward(const at::Tensor& x, const at::Tensor* w, const at::Tensor* buffers,
                     const ForwardContext& ctx) const override {
    at::Tensor mean, var;
    if (!ctx.train || ctx.update_buffers) {
      mean = buffers[0];
      var = buffers[1];
    }
    return at::batch_norm(x, w[0], w[1], mean, var, ctx.train, 0.1, 1e-5, false);
  }

 private:
  int64_t c_;
};

class MaxPool2d : public Layer {
 public:
  explicit MaxPool2d(int64_t kernel) : kernel_(kernel) {}
  LayerProfile profile(const std::vector<int64_t>& in) const override {
    expect_input(in.size() == 3, "maxpool", in, "C x H x W");
    LayerProfile p;
    p.name = "maxpool" + std::to_string(kernel_);
    p.out_shape = {in[0], in[1] / kernel_, in[2] / kernel_};
    p.forward_flops = static_cast<Flops>(shape_product(in));
    p.op_kind = OpKind::kPool;
    return finish_profile(p);
  }
  at::Tensor forward(const at::Tensor& x, const at::Tensor*, const at::Tensor*,
                     const ForwardContext&) const override {
    return at::max_pool2d(x, {kernel_, kernel_});
  }

 private:
  int64_t kernel_;
};

// The additive block model's layers (model.kind = "blocks", core/problem/problem.h). A sample is
// m rows of d features and a running sum: [m, d + 1].

// Block [c0, c1) of the parameters: adds X[:, c0:c1] w to the running sum (the last column).
// Starts at zero. Its backward gives w the columns' share of X^T r, r the running sum's gradient
// (the residual), and passes r on unchanged.
class Block : public Layer {
 public:
  Block(int64_t rows, int64_t dim, int64_t c0, int64_t c1)
      : rows_(rows), dim_(dim), c0_(c0), c1_(c1) {}
  LayerProfile profile(const std::vector<int64_t>& in) const override {
    expect_input(in == std::vector<int64_t>{rows_, dim_ + 1}, "block", in,
                 std::to_string(rows_) + "x" + std::to_string(dim_ + 1));
    LayerProfile p;
    p.name = "block(" + std::to_string(c0_) + ":" + std::to_string(c1_) + ")";
    p.out_shape = in;
    p.param_elems = {c1_ - c0_};
    p.forward_flops = 2.0 * static_cast<double>(rows_ * (c1_ - c0_));
    p.op_kind = OpKind::kMatmul;
    return finish_profile(p);
  }
  std::vector<at::Tensor> init_params(at::Generator&) const override {
    return {at::zeros({c1_ - c0_}, at::kFloat).requires_grad_(true)};
  }
  at::Tensor forward(const at::Tensor& x, const at::Tensor* w, const at::Tensor*,
                     const ForwardContext&) const override {
    const at::Tensor sum = x.select(-1, dim_) + at::matmul(x.narrow(-1, c0_, c1_ - c0_), w[0]);
    return at::cat({x.narrow(-1, 0, dim_), sum.unsqueeze(-1)}, -1);
  }

 private:
  int64_t rows_, dim_, c0_, c1_;
};

// The running sum as the model's outputs: m values (regression), or, for one row, the logits
// (0, s) of a two-class classification (logistic regression).
class Readout : public Layer {
 public:
  Readout(int64_t rows, int64_t dim, bool logits) : rows_(rows), dim_(dim), logits_(logits) {}
  LayerProfile profile(const std::vector<int64_t>& in) const override {
    expect_input(in == std::vector<int64_t>{rows_, dim_ + 1}, "readout", in,
                 std::to_string(rows_) + "x" + std::to_string(dim_ + 1));
    LayerProfile p;
    p.name = logits_ ? "readout(logits)" : "readout";
    p.out_shape = {logits_ ? 2 : rows_};
    p.forward_ops = logits_ ? 2 : 0;
    p.forward_flops = logits_ ? 2.0 : 0.0;
    return finish_profile(p);
  }
  at::Tensor forward(const at::Tensor& x, const at::Tensor*, const at::Tensor*,
                     const ForwardContext&) const override {
    const at::Tensor s = x.select(-1, dim_);  // [batch, m]
    return logits_ ? at::cat({at::zeros_like(s), s}, -1) : s;
  }

 private:
  int64_t rows_, dim_;
  bool logits_;
};

}  // namespace

std::vector<at::Tensor> Layer::init_params(at::Generator&) const { return {}; }
std::vector<at::Tensor> Layer::init_buffers() const { return {}; }

LayerPtr make_flatten() { return std::make_shared<Flatten>(); }
LayerPtr make_linear(int64_t in, int64_t out) { return std::make_shared<Linear>(in, out); }
LayerPtr make_relu() { return std::make_shared<ReLU>(); }
LayerPtr make_dropout(double p) { return std::make_shared<Dropout>(p); }
LayerPtr make_conv2d(int64_t in_channels, int64_t out_channels, int64_t kernel, int64_t padding) {
  return std::make_shared<Conv2d>(in_channels, out_channels, kernel, padding);
}
LayerPtr make_batch_norm2d(int64_t channels) { return std::make_shared<BatchNorm2d>(channels); }
LayerPtr make_max_pool2d(int64_t kernel) { return std::make_shared<MaxPool2d>(kernel); }
LayerPtr make_block(int64_t rows, int64_t dim, int64_t c0, int64_t c1) {
  return std::make_shared<Block>(rows, dim, c0, c1);
}
LayerPtr make_readout(int64_t rows, int64_t dim, bool logits) {
  return std::make_shared<Readout>(rows, dim, logits);
}

at::Tensor seeded_dropout(const at::Tensor& x, double p, uint64_t seed) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  const at::Tensor mask = at::empty(x.sizes(), at::kFloat).bernoulli_(1.0 - p, gen).to(x.device());
  return x * mask / (1.0 - p);
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s;
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? "x" : "") + std::to_string(shape[i]);
  return s;
}

}  // namespace rv
