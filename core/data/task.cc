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
    s.correct = static_cast<double>(outputs.argmax(1).eq(targets).sum().item<int64_t>());
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

class NextToken : public Task {
 public:
  static constexpr int64_t kIgnored = -1;
  const char* name() const override { return "next-token"; }
  bool has_accuracy() const override { return true; }
  LossResult loss_and_grad(const at::Tensor& outputs, const at::Tensor& targets) const override {
    return differentiate(outputs, [&](const at::Tensor& out) {
      return at::nll_loss(at::log_softmax(out.reshape({-1, out.size(-1)}), 1),
                          targets.reshape({-1}), {}, at::Reduction::Mean, kIgnored);
    });
  }
  Score score(const at::Tensor& outputs, const at::Tensor& targets) const override {
    c10::NoGradGuard no_grad;
    const int64_t b = outputs.size(0);
    const at::Tensor scored = targets.ne(kIgnored);
    const at::Tensor per_token =
        at::nll_loss(at::log_softmax(outputs.reshape({-1, outputs.size(-1)}), 1),
                     targets.reshape({-1}), {}, at::Reduction::None, kIgnored)
            .view({b, -1});
    const at::Tensor count = scored.sum(1).clamp_min(1).to(at::kDouble);
    Score s;
    s.loss_sum = (per_token.to(at::kDouble).sum(1) / count).sum().item<double>();
    const at::Tensor right = outputs.argmax(-1).eq(targets).logical_and(scored);
    s.correct = (right.sum(1).to(at::kDouble) / count).sum().item<double>();
    return s;
  }
};

}  // namespace

const Task& task_for(TaskKind kind) {
  static const Classification kClassification;
  static const Regression kRegression;
  static const NextToken kNextToken;
  switch (kind) {
    case TaskKind::kRegression:
      return kRegression;
    case TaskKind::kNextToken:
      return kNextToken;
    case TaskKind::kClassification:
      break;
  }
  return kClassification;
}

}  // namespace rv
