// Optimizers that update out of place: step() returns new parameter tensors and never modifies the
// old ones, so a stashed version stays valid for the backward passes that still need it.
#pragma once

#include <ATen/core/Tensor.h>

#include <vector>

#include "core/compute/work.h"
#include "core/scenario/scenario.h"

namespace rv {

class Optimizer {
 public:
  explicit Optimizer(const TrainingSpec& training) : spec_(training) {}
  // New parameters from `params` and their gradients. Tensors returned require grad.
  std::vector<at::Tensor> step(const std::vector<at::Tensor>& params,
                               const std::vector<at::Tensor>& grads);
  // The work of step() on one parameter tensor of `elements` values, kernel by kernel as step()
  // runs them (core/compute/work.h: each an elementwise forward kernel, its reads counted, so
  // that it is charged for the bytes it moves): the compute model charges an optimizer step with
  // it, so the two change together. Plain SGD 2 kernels, with momentum 4, Adam 8; weight decay 1
  // or 2 more.
  static void add_step_work(const TrainingSpec& training, double elements, Work& w);
  int64_t steps() const { return t_; }
  void set_steps(int64_t t) { t_ = t; }  // resuming from a checkpoint

  // Per-parameter state tensors the optimizer keeps: sgd with momentum 1 (the momentum), adam 2
  // (first and second moments), plain sgd 0.
  static int slots(const TrainingSpec& training);
  int slots() const { return slots(spec_); }
  // Slot k, one tensor per parameter, shaped like `params` (zeros before the first step).
  std::vector<at::Tensor> slot(int k, const std::vector<at::Tensor>& params) const;
  // Replaces slot k (e.g. by its mean over clusters).
  void set_slot(int k, std::vector<at::Tensor> values);

 private:
  TrainingSpec spec_;
  int64_t t_ = 0;
  std::vector<at::Tensor>& slot_ref(int k);
  std::vector<at::Tensor> m_, v_;  // sgd: momentum buffer in m_; adam: first and second moments
};

}  // namespace rv
