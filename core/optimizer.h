// Optimizers that update out of place: step() returns new parameter tensors and never modifies the
// old ones, so a stashed version stays valid for the backward passes that still need it.
#pragma once

#include <vector>

#include <ATen/core/Tensor.h>

#include "core/scenario.h"

namespace rv {

class Optimizer {
 public:
  explicit Optimizer(const TrainingSpec& training) : spec_(training) {}
  // New parameters from `params` and their gradients. Tensors returned require grad.
  std::vector<at::Tensor> step(const std::vector<at::Tensor>& params,
                               const std::vector<at::Tensor>& grads);
  int64_t steps() const { return t_; }

 private:
  TrainingSpec spec_;
  int64_t t_ = 0;
  std::vector<at::Tensor> m_, v_;  // sgd: momentum buffer in m_; adam: first and second moments
};

}  // namespace rv
