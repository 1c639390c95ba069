// GPT-style decoder layers (layers.h: make_token_embedding, make_transformer_block, make_lm_head).
//
// Profiles, per sample of T tokens, d_model D, H heads, d_ff F, vocabulary V:
//   embedding  params V D + P D (P positions); kernels: the gather, the position add, the dropout
//   block      params 4 D^2 + 2 D F + 9 D + F (LayerNorm 2 D twice, QKV 3 D^2 + 3 D, projection
//              D^2 + D, MLP 2 D F + F + D); forward flops 2 T (4 D^2 + 2 D F) in its four linear
//              maps plus 4 T^2 D in attention's two products (QK^T and AV over all T x T pairs, as
//              computed: the causal mask hides half of them but does not skip them), then the
//              norms and elementwise kernels (softmax, mask and scale, GELU, residual adds, head
//              reshapes, dropout); saved for the backward 8 T D + 2 T F + H T^2 floats (the
//              attention probabilities), and with dropout 2 H T^2 + 2 T D more (the masks, and
//              the dropped probabilities AV keeps besides the softmax's output)
//   head       params 2 D + D V (the final LayerNorm and an unbiased linear map); flops 2 T D V
// A dropout is three kernels (mask, product, scaling), as the Dropout layer counts it.
#include <ATen/ATen.h>

#include <cmath>
#include <string>

#include "core/error.h"
#include "core/model/layers.h"

namespace rv {
namespace {

constexpr double kInitStd = 0.02;  // GPT-2's
constexpr double kNormEps = 1e-5;
constexpr double kNormFlopsPerElem = 5;             // mean, variance, normalise, scale, shift
constexpr double kMaxSavedElems = 1099511627776.0;  // 2^40, as core/model/model.cc bounds a layer

at::Tensor normal(at::Generator& gen, std::vector<int64_t> shape, double std) {
  return at::empty(shape, at::kFloat).normal_(0.0, std, gen).requires_grad_(true);
}
at::Tensor zeros(std::vector<int64_t> shape) {
  return at::zeros(shape, at::kFloat).requires_grad_(true);
}
at::Tensor ones(std::vector<int64_t> shape) {
  return at::ones(shape, at::kFloat).requires_grad_(true);
}

// Dropout `which` of a layer, its mask fixed by (the forward's seed, the layer's index, which).
at::Tensor dropout(const at::Tensor& x, double p, const ForwardContext& ctx, uint64_t which) {
  if (!ctx.train || p <= 0) return x;
  return seeded_dropout(
      x, p, mix_seed(mix_seed(ctx.dropout_seed, static_cast<uint64_t>(ctx.index)), which));
}

// The kernels of `count` dropouts over `elems` floats each (3 kernels apiece, of the random kind:
// core/compute/work.h).
void add_dropouts(LayerProfile& p, double dropout, double elems, int count) {
  if (dropout <= 0 || count == 0) return;
  p.ops.push_back({OpKind::kRandom, 3 * count, 3.0 * count * elems, 2.0 * elems, 0.0, 1});
}

class TokenEmbedding : public Layer {
 public:
  TokenEmbedding(int64_t vocab, int64_t positions, int64_t d_model, double dropout)
      : vocab_(vocab), positions_(positions), d_(d_model), dropout_(dropout) {}
  LayerProfile profile(const std::vector<int64_t>& in) const override {
    expect_input(in.size() == 1 && in[0] >= 1 && in[0] <= positions_, "token embedding", in,
                 "a sequence of 1 to " + std::to_string(positions_) + " token ids (model.seq_len)");
    const double t = static_cast<double>(in[0]), d = static_cast<double>(d_);
    LayerProfile p;
    p.name = "embedding(" + std::to_string(vocab_) + "x" + std::to_string(d_) + ", " +
             std::to_string(positions_) + " positions)";
    p.out_shape = {in[0], d_};
    p.param_elems = {vocab_ * d_, positions_ * d_};
    // The gather (its backward fills the table's gradient, V D floats), the position add.
    p.ops.push_back(
        {OpKind::kElementwise, 1, t * d, t + t * d, static_cast<double>(vocab_) * d, 1});
    p.ops.push_back({OpKind::kElementwise, 1, t * d, 3.0 * t * d, 0.0, 1});
    add_dropouts(p, dropout_, t * d, 1);
    return finish_profile(p);
  }
  std::vector<at::Tensor> init_params(at::Generator& gen) const override {
    return {normal(gen, {vocab_, d_}, kInitStd), normal(gen, {positions_, d_}, kInitStd)};
  }
  at::Tensor forward(const at::Tensor& x, const at::Tensor* w, const at::Tensor*,
                     const ForwardContext& ctx) const override {
    const at::Tensor ids = x.scalar_type() == at::kLong ? x : x.to(at::kLong);
    const at::Tensor h = at::embedding(w[0], ids) + w[1].narrow(0, 0, ids.size(1));
    return dropout(h, dropout_, ctx, 0);
  }

 private:
  int64_t vocab_, positions_, d_;
  double dropout_;
};

class TransformerBlock : public Layer {
 public:
  TransformerBlock(int64_t d_model, int64_t heads, int64_t d_ff, double dropout, int64_t layers)
      : d_(d_model), h_(heads), f_(d_ff), dropout_(dropout), layers_(layers) {}
  LayerProfile profile(const std::vector<int64_t>& in) const override {
    expect_input(in.size() == 2 && in[0] >= 1 && in[1] == d_, "transformer block", in,
                 "tokens x " + std::to_string(d_));
    const double t = static_cast<double>(in[0]), d = static_cast<double>(d_),
                 f = static_cast<double>(f_), h = static_cast<double>(h_);
    const double scores = h * t * t;  // attention scores of one sample
    LayerProfile p;
    p.name = "block(" + std::to_string(d_) + ", " + std::to_string(h_) + " heads, ff " +
             std::to_string(f_) + ")";
    p.out_shape = in;
    // As init_params: ln1, qkv, projection, ln2, fc1, fc2 (weights and biases).
    p.param_elems = {d_, d_, 3 * d_ * d_, 3 * d_, d_ * d_, d_, d_, d_, f_ * d_, f_, d_ * f_, d_};
    // The linear maps: QKV, the projection, the MLP's two (their weights read once each).
    p.ops.push_back({OpKind::kMatmul, 4, 2.0 * t * (4 * d * d + 2 * d * f),
                     (8 * t * d + 2 * t * f) / 4, (4 * d * d + 2 * d * f) / 4, 2});
    // Attention's products QK^T and AV, both operands needing gradients.
    p.ops.push_back({OpKind::kMatmul, 2, 4.0 * t * t * d, (4 * t * d + 2 * scores) / 2, 0.0, 2});
    p.ops.push_back({OpKind::kNorm, 2, 2 * kNormFlopsPerElem * t * d, 2 * t * d, 2 * d, 1});
    // Scale, mask and softmax over the scores; GELU; two residual adds; q, k, v and the output
    // made contiguous across heads.
    p.ops.push_back({OpKind::kElementwise, 3, 3 * scores, 2 * scores, 0.0, 1});
    p.ops.push_back({OpKind::kElementwise, 1, t * f, 2 * t * f, 0.0, 1});
    p.ops.push_back({OpKind::kElementwise, 6, 6 * t * d, 2.5 * t * d, 0.0, 1});
    add_dropouts(p, dropout_, scores, 1);
    add_dropouts(p, dropout_, t * d, 2);
    // In floating point: H T^2 can pass 2^63 for sizes the keys allow; such a layer is refused.
    const double saved =
        8 * t * d + 2 * t * f + scores + (dropout_ > 0 ? 2 * scores + 2 * t * d : 0.0);
    expect_input(saved <= kMaxSavedElems, "transformer block", in,
                 "at most 2^40 saved floats per sample");
    p.saved_elems = static_cast<int64_t>(saved);
    return finish_profile(p);
  }
  std::vector<at::Tensor> init_params(at::Generator& gen) const override {
    const double residual_std = kInitStd / std::sqrt(2.0 * static_cast<double>(layers_));
    return {ones({d_}),
            zeros({d_}),  // ln1
            normal(gen, {3 * d_, d_}, kInitStd),
            zeros({3 * d_}),  // qkv
            normal(gen, {d_, d_}, residual_std),
            zeros({d_}),  // projection
            ones({d_}),
            zeros({d_}),  // ln2
            normal(gen, {f_, d_}, kInitStd),
            zeros({f_}),  // fc1
            normal(gen, {d_, f_}, residual_std),
            zeros({d_})};  // fc2
  }
  at::Tensor forward(const at::Tensor& x, const at::Tensor* w, const at::Tensor*,
                     const ForwardContext& ctx) const override {
    const int64_t b = x.size(0), t = x.size(1), dh = d_ / h_;
    // Causal self-attention.
    const at::Tensor qkv = at::linear(at::layer_norm(x, {d_}, w[0], w[1], kNormEps), w[2], w[3]);
    auto heads = [&](int64_t i) {
      return qkv.narrow(2, i * d_, d_).view({b, t, h_, dh}).transpose(1, 2);
    };
    const at::Tensor q = heads(0), k = heads(1), v = heads(2);
    at::Tensor att =
        at::matmul(q, k.transpose(-2, -1)) * (1.0 / std::sqrt(static_cast<double>(dh)));
    const at::Tensor future =
        at::ones({t, t}, at::TensorOptions().dtype(at::kBool).device(x.device())).triu(1);
    att = dropout(at::softmax(att.masked_fill(future, -INFINITY), -1), dropout_, ctx, 0);
    const at::Tensor y = at::matmul(att, v).transpose(1, 2).contiguous().view({b, t, d_});
    const at::Tensor x1 = x + dropout(at::linear(y, w[4], w[5]), dropout_, ctx, 1);
    // The MLP.
    const at::Tensor m =
        at::linear(at::gelu(at::linear(at::layer_norm(x1, {d_}, w[6], w[7], kNormEps), w[8], w[9])),
                   w[10], w[11]);
    return x1 + dropout(m, dropout_, ctx, 2);
  }

 private:
  int64_t d_, h_, f_;
  double dropout_;
  int64_t layers_;
};

class LmHead : public Layer {
 public:
  LmHead(int64_t d_model, int64_t vocab) : d_(d_model), vocab_(vocab) {}
  LayerProfile profile(const std::vector<int64_t>& in) const override {
    expect_input(in.size() == 2 && in[0] >= 1 && in[1] == d_, "language-model head", in,
                 "tokens x " + std::to_string(d_));
    const double t = static_cast<double>(in[0]), d = static_cast<double>(d_),
                 v = static_cast<double>(vocab_);
    LayerProfile p;
    p.name = "head(" + std::to_string(d_) + "->" + std::to_string(vocab_) + ")";
    p.out_shape = {in[0], vocab_};
    p.param_elems = {d_, d_, vocab_ * d_};
    p.ops.push_back({OpKind::kNorm, 1, kNormFlopsPerElem * t * d, 2 * t * d, 2 * d, 1});
    p.ops.push_back({OpKind::kMatmul, 1, 2.0 * t * d * v, t * d + t * v, d * v, 2});
    p.saved_elems = in[0] * d_ + in[0] * vocab_;
    return finish_profile(p);
  }
  std::vector<at::Tensor> init_params(at::Generator& gen) const override {
    return {ones({d_}), zeros({d_}), normal(gen, {vocab_, d_}, kInitStd)};
  }
  at::Tensor forward(const at::Tensor& x, const at::Tensor* w, const at::Tensor*,
                     const ForwardContext&) const override {
    return at::linear(at::layer_norm(x, {d_}, w[0], w[1], kNormEps), w[2]);
  }

 private:
  int64_t d_, vocab_;
};

}  // namespace

LayerPtr make_token_embedding(int64_t vocab, int64_t positions, int64_t d_model, double dropout) {
  return std::make_shared<TokenEmbedding>(vocab, positions, d_model, dropout);
}
LayerPtr make_transformer_block(int64_t d_model, int64_t heads, int64_t d_ff, double dropout,
                                int64_t layers) {
  RV_CHECK(heads > 0 && d_model % heads == 0,
           "transformer block: d_model must be a multiple of heads");
  return std::make_shared<TransformerBlock>(d_model, heads, d_ff, dropout, layers);
}
LayerPtr make_lm_head(int64_t d_model, int64_t vocab) {
  return std::make_shared<LmHead>(d_model, vocab);
}

}  // namespace rv
