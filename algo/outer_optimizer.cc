// The outer step of a periodic pipeline (algo/outer_optimizer.h).
#include "algo/outer_optimizer.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include "core/error.h"

namespace rv {

OuterOptimizer::OuterOptimizer(double lr, double momentum) : lr_(lr), momentum_(momentum) {
  RV_CHECK(lr > 0 && momentum >= 0 && momentum < 1,
           "outer optimizer: lr > 0 and momentum in [0, 1)");
}

void OuterOptimizer::set_anchor(at::Tensor anchor) {
  anchor_ = anchor.detach().clone();
  velocity_ = at::Tensor();
}

const at::Tensor& OuterOptimizer::step(const at::Tensor& mean, const at::Tensor& parameters) {
  RV_CHECK(
      anchor_.defined() && mean.sizes() == anchor_.sizes() && parameters.sizes() == anchor_.sizes(),
      "outer optimizer: the mean and the mask must be laid out like the anchor");
  c10::NoGradGuard no_grad;
  const at::Tensor m = mean.detach();
  if (lr_ == 1.0 && momentum_ == 0.0) {  // local SGD: anchor - (anchor - mean) is the mean, exactly
    anchor_ = m.clone();
    return anchor_;
  }
  const at::Tensor g = (anchor_ - m) * parameters;
  if (!velocity_.defined()) velocity_ = at::zeros_like(g);
  velocity_.mul_(momentum_).add_(g);
  at::Tensor next = anchor_ - lr_ * (g + momentum_ * velocity_);
  // Buffers take the mean.
  anchor_ = at::where(parameters > 0, next, m);
  return anchor_;
}

}  // namespace rv
