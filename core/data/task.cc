#include "core/data/task.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <torch/csrc/autograd/autograd.h>

#include <algorithm>

namespace rv {
namespace {

// Runs `loss_of` on a fresh leaf copy of `outputs` and returns the loss with its gradient.
template <typename LossOf>
LossResult differentiate(const at::Tensor& outputs, LossOf loss_of) {
  c10::AutoGradMode grad(true);
  at::Tensor out = outputs.detach().requires_grad_(true);
  at::Tensor loss = loss_of(out);
  LossResult r;
  r.grad_input = torch::autograd::grad({loss}, {out})[0];
  r.loss = loss.item<double>();
  return r;
}

class Classification : public Task {
 public:
  const char* name() const override { return "classification"; }
  bool has_accuracy() const override { return true; }
  LossResult loss_and_grad(const at::Tensor& outputs, const at::Tensor& targets) const override {
    return differentiate(outputs, [&](const at::Tensor& out) {
      return at::nll_loss(at::log_softmax(out, 1), targets);
    });
  }
  Score score(const at::Tensor& outputs, const at::Tensor& targets) const override {
    c10::NoGradGuard no_grad;
    Score s;
    s.loss_sum =
        at::nll_loss(at::log_softmax(outputs, 1), targets, {}, at::Reduction::Sum).item<double>();
    s.correct = outputs.argmax(1).eq(targets).sum().item<int64_t>();
    return s;
  }
};

class Regression : public Task {
 public:
  const char* name() const override { return "regression"; }
  bool has_accuracy() const override { return false; }
  LossResult loss_and_grad(const at::Tensor& outputs, const at::Tensor& targets) const override {
    return differentiate(outputs,
                         [&](const at::Tensor& out) { return at::mse_loss(out, targets); });
  }
  Score score(const at::Tensor& outputs, const at::Tensor& targets) const override {
    c10::NoGradGuard no_grad;
    Score s;
    // Per sample: the mean over its targets, as the training loss averages them.
    const double per_target =
        static_cast<double>(targets.numel() / std::max<int64_t>(1, targets.size(0)));
    s.loss_sum = at::mse_loss(outputs, targets, at::Reduction::Sum).item<double>() / per_target;
    return s;
  }
};

}  // namespace

const Task& task_for(TaskKind kind) {
  static const Classification kClassification;
  static const Regression kRegression;
  switch (kind) {
    case TaskKind::kRegression:
      return kRegression;
    case TaskKind::kClassification:
      break;
  }
  return kClassification;
}

}  // namespace rv
