#include "core/model/optimizer.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include <cmath>

#include "core/error.h"
#include "core/model/cost_model.h"

namespace rv {

std::vector<at::Tensor> Optimizer::step(const std::vector<at::Tensor>& params,
                                        const std::vector<at::Tensor>& grads) {
  RV_CHECK(params.size() == grads.size(), "optimizer: parameters and gradients differ in number");
  c10::NoGradGuard no_grad;
  ++t_;
  const bool adam = adaptive_optimizer(spec_);
  const bool decoupled =
      spec_.optimizer == OptimizerKind::kAdamW;  // weight decay on the weights, not the gradient
  for (int k = 0; k < slots(); ++k)
    if (slot_ref(k).empty()) slot_ref(k) = slot(k, params);
  std::vector<at::Tensor> out;
  out.reserve(params.size());
  const double lr = spec_.lr;
  for (size_t i = 0; i < params.size(); ++i) {
    at::Tensor p = params[i].detach();
    at::Tensor g = grads[i].defined() ? grads[i].detach() : at::zeros_like(p);
    if (spec_.weight_decay > 0 && !decoupled) g = g + spec_.weight_decay * p;
    if (spec_.weight_decay > 0 && decoupled) p = p * (1 - lr * spec_.weight_decay);
    at::Tensor np;
    if (adam) {
      constexpr double b1 = 0.9, b2 = 0.999, eps = 1e-8;
      m_[i].mul_(b1).add_(g, 1 - b1);
      v_[i].mul_(b2).addcmul_(g, g, 1 - b2);
      const double c1 = 1 - std::pow(b1, static_cast<double>(t_));
      const double c2 = 1 - std::pow(b2, static_cast<double>(t_));
      // p - lr/c1 * m / (sqrt(v/c2) + eps), as torch.optim.Adam computes it: two new tensors
      // (the denominator, the new weights) rather than one per operation.
      const at::Tensor denom = v_[i].sqrt().div_(std::sqrt(c2)).add_(eps);
      np = p.addcdiv(m_[i], denom, -lr / c1);
    } else if (spec_.momentum > 0) {
      m_[i].mul_(spec_.momentum).add_(g);
      np = p - lr * m_[i];
    } else {
      np = p - lr * g;
    }
    out.push_back(np.requires_grad_(true));
  }
  return out;
}

void Optimizer::add_step_work(const TrainingSpec& training, double elements, Work& w) {
  auto kernel = [&](int reads) { w.add_elementwise(elements, reads); };
  const bool adam = adaptive_optimizer(training);
  if (training.weight_decay > 0) {
    if (training.optimizer == OptimizerKind::kAdamW) {
      kernel(1);  // p * (1 - lr wd)
    } else {
      kernel(1);  // wd p
      kernel(2);  // g + that
    }
  }
  if (adam) {
    kernel(1);  // m *= b1
    kernel(2);  // m += (1 - b1) g
    kernel(1);  // v *= b2
    kernel(2);  // v += (1 - b2) g g
    kernel(1);  // sqrt(v)
    kernel(1);  // / sqrt(c2)
    kernel(1);  // + eps
    kernel(3);  // p - lr / c1 m / denominator
  } else {
    if (training.momentum > 0) {
      kernel(1);  // m *= momentum
      kernel(2);  // m += g
    }
    kernel(1);  // lr g (or lr m)
    kernel(2);  // p - that
  }
}

int Optimizer::slots(const TrainingSpec& training) { return optimizer_state_floats(training); }

std::vector<at::Tensor>& Optimizer::slot_ref(int k) {
  RV_CHECK(k >= 0 && k < slots(), "optimizer: no state slot " + std::to_string(k));
  return k == 0 ? m_ : v_;
}

std::vector<at::Tensor> Optimizer::slot(int k, const std::vector<at::Tensor>& params) const {
  RV_CHECK(k >= 0 && k < slots(), "optimizer: no state slot " + std::to_string(k));
  const std::vector<at::Tensor>& s = k == 0 ? m_ : v_;
  if (!s.empty()) return s;
  std::vector<at::Tensor> zeros;
  for (const auto& p : params) zeros.push_back(at::zeros_like(p.detach()));
  return zeros;
}

void Optimizer::set_slot(int k, std::vector<at::Tensor> values) { slot_ref(k) = std::move(values); }

}  // namespace rv
