#include "theory/estimate.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <c10/core/GradMode.h>
#include <torch/csrc/autograd/autograd.h>

#include <cmath>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/model/layers.h"

namespace rv {
namespace {

// The whole model at parameters given as one flat double vector: gradients and losses of fixed
// micro-batches.
class Probe {
 public:
  Probe(const Scenario& s, const ModelDesc& model, const Dataset& data,
        const std::vector<std::vector<int64_t>>& rows)
      : data_(data), net_(model, 0, model.layer_count(), s.seed), rows_(rows) {
    for (const at::Tensor& p : net_.params()) {
      shapes_.push_back(p.sizes().vec());
      numel_.push_back(p.numel());
    }
  }

  at::Tensor initial() const {
    std::vector<at::Tensor> flat;
    for (const at::Tensor& p : net_.params())
      flat.push_back(p.detach().reshape(-1).to(at::kDouble));
    return at::cat(flat);
  }

  // The gradient (flat, double) of micro-batch i's mean loss at w; its loss in *loss if given.
  at::Tensor gradient(const at::Tensor& w, size_t i, double* loss = nullptr) const {
    return gradient_on(w, rows_[i], static_cast<uint64_t>(i) + 1, loss);
  }

  // The same on any rows, with dropout masks from `dropout_seed`.
  at::Tensor gradient_on(const at::Tensor& w, const std::vector<int64_t>& rows,
                         uint64_t dropout_seed, double* loss = nullptr) const {
    std::vector<at::Tensor> params;
    int64_t off = 0;
    for (size_t k = 0; k < shapes_.size(); ++k) {
      params.push_back(
          w.narrow(0, off, numel_[k]).to(at::kFloat).view(shapes_[k]).requires_grad_(true));
      off += numel_[k];
    }
    c10::AutoGradMode grad(true);
    const at::Tensor x = data_.inputs(rows, false);
    // Training mode as the run trains (batch statistics, dropout), one fixed mask per micro-batch.
    const at::Tensor y = net_.forward(x, params, true, dropout_seed, false);
    const LossResult r = data_.task().loss_and_grad(y, data_.targets(rows, false));
    if (loss) *loss = r.loss;
    const std::vector<at::Tensor> g =
        torch::autograd::grad({y}, params, {r.grad_input}, false, false, true);
    std::vector<at::Tensor> flat;
    for (size_t k = 0; k < g.size(); ++k)
      flat.push_back(g[k].defined() ? g[k].reshape(-1).to(at::kDouble)
                                    : at::zeros({numel_[k]}, at::kDouble));
    return at::cat(flat);
  }

  // The mean gradient over the first n micro-batches.
  at::Tensor mean_gradient(const at::Tensor& w, size_t n) const {
    at::Tensor sum = gradient(w, 0);
    for (size_t i = 1; i < n; ++i) sum += gradient(w, i);
    return sum / static_cast<double>(n);
  }

 private:
  const Dataset& data_;
  StageModule net_;
  std::vector<std::vector<int64_t>> rows_;
  std::vector<std::vector<int64_t>> shapes_;
  std::vector<int64_t> numel_;
};

constexpr int64_t kMinIterations = 10;

// L, sigma² and the loss at w (one EstimatePoint), over the probe's micro-batches.
EstimatePoint estimate_at(const Probe& probe, const at::Tensor& w, int64_t update, int64_t batch,
                          const EstimateOptions& o, uint64_t seed) {
  EstimatePoint e;
  e.update = update;
  // sigma² and the loss, streamed (one gradient alive at a time): sum_i ||g_i - mean||² =
  // sum_i ||g_i||² - M ||mean||², in double.
  const auto m = static_cast<size_t>(o.micro_batches);
  at::Tensor sum;
  double squares = 0, loss_sum = 0;
  for (size_t i = 0; i < m; ++i) {
    double loss = 0;
    const at::Tensor g = probe.gradient(w, i, &loss);
    squares += g.square().sum().item<double>();
    sum = sum.defined() ? sum + g : g;
    loss_sum += loss;
  }
  const double n = static_cast<double>(m);
  const double spread = std::max(0.0, squares - sum.square().sum().item<double>() / n);
  e.sigma2 = static_cast<double>(batch) * spread / (n - 1);
  e.loss = loss_sum / n;

  // The Hessian's eigenvalue of largest magnitude: power iteration, H v by central differences
  // with a step of 1e-3 of max(1, ||w||) (float32 gradients: small enough to stay local, large
  // enough to stay above their rounding).
  const size_t hn = static_cast<size_t>(o.hessian_micro_batches);
  const double step = 1e-3 * std::max(1.0, at::norm(w).item<double>());
  auto gen =
      at::make_generator<at::CPUGeneratorImpl>(mix_seed(seed, static_cast<uint64_t>(update)));
  at::Tensor v = at::randn({w.numel()}, gen, at::kDouble);
  v /= at::norm(v);
  // ||H v|| for a unit v never exceeds the largest |eigenvalue| and, iterated, tends to it whatever
  // the signs (a Rayleigh quotient v.Hv can stall near zero where eigenvalues of both signs lead).
  double lambda = 0;
  for (int64_t it = 1; it <= o.max_iterations; ++it) {
    const at::Tensor hv =
        (probe.mean_gradient(w + step * v, hn) - probe.mean_gradient(w - step * v, hn)) /
        (2 * step);
    const double norm = at::norm(hv).item<double>();
    e.iterations = it;
    if (norm == 0 || !std::isfinite(norm)) {
      lambda = norm;
      break;
    }
    // Settled only after kMinIterations, when it moved by under 1%: it can creep for a while where
    // the top eigenvalues are close.
    const bool settled = it >= kMinIterations && std::abs(norm - lambda) <= 0.01 * norm;
    lambda = std::max(lambda, norm);
    v = hv / norm;
    if (settled) {
      e.converged = true;
      break;
    }
  }
  e.smoothness = lambda;
  return e;
}

}  // namespace

ConstantEstimates estimate_constants(const Scenario& s, const ModelDesc& model, const Dataset& data,
                                     const EstimateOptions& o) {
  if (o.micro_batches < 2) throw InputError("estimate: micro_batches must be at least 2");
  if (o.hessian_micro_batches < 1 || o.hessian_micro_batches > o.micro_batches)
    throw InputError("estimate: hessian_micro_batches must be between 1 and micro_batches");
  if (o.max_iterations < 1) throw InputError("estimate: max_iterations must be at least 1");
  if (o.updates < 0 || o.checkpoints < 1)
    throw InputError("estimate: updates must be >= 0 and checkpoints >= 1");
  const uint64_t seed = mix_seed(s.seed, o.seed ^ 0xE571A7EULL);
  Sampler sampler(data.train_size(), s.data.batch_size, seed);
  std::vector<std::vector<int64_t>> rows;
  for (int64_t i = 0; i < o.micro_batches; ++i) rows.push_back(sampler.indices(i));
  const Probe probe(s, model, data, rows);
  ConstantEstimates e;
  e.batch = static_cast<int64_t>(rows.front().size());
  e.micro_batches = o.micro_batches;
  e.hessian_micro_batches = o.hessian_micro_batches;
  e.replay_updates = o.updates;

  // The replay: plain SGD from w_0 at training.lr on micro-batches of the run's size (its own
  // stream), estimates at `checkpoints` evenly spaced updates from 0 to `updates`.
  Sampler replay(data.train_size(), s.data.batch_size, mix_seed(seed, 1));
  at::Tensor w = probe.initial();
  auto point_at = [&](int64_t i) {
    return o.checkpoints == 1 ? 0 : i * o.updates / (o.checkpoints - 1);
  };
  int64_t next_point = 0;
  for (int64_t k = 0;; ++k) {
    if (next_point < o.checkpoints && point_at(next_point) <= k) {
      e.points.push_back(estimate_at(probe, w, k, e.batch, o, seed));
      while (next_point < o.checkpoints && point_at(next_point) <= k)
        ++next_point;                                   // one per update
      if (!std::isfinite(e.points.back().loss)) break;  // the replay diverged: no later points
    }
    if (k >= o.updates || next_point >= o.checkpoints) break;
    w = w -
        s.training.lr * probe.gradient_on(w, replay.indices(k), static_cast<uint64_t>(k) + 1000003);
  }
  for (const EstimatePoint& p : e.points) {
    if (std::isfinite(p.smoothness)) e.smoothness = std::max(e.smoothness, p.smoothness);
    if (std::isfinite(p.sigma2)) e.sigma2 = std::max(e.sigma2, p.sigma2);
  }
  e.loss0 = e.points.front().loss;
  e.gap = std::max(0.0, e.loss0);
  e.converged = e.points.front().converged;
  return e;
}

}  // namespace rv
