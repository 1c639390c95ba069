// The outer step of a periodic pipeline (algo/algorithm.h run_periodic_pipeline): DiLoCo's outer
// optimizer (arXiv 2311.08105), and local SGD as its special case. An algorithm asks for it with
// its hooks.outer_step (algo/registry.h), which gives the settings (OuterSgd).
//
// Every cluster starts an outer period from the same parameters (the anchor), takes
// training.average_every inner steps on its own data, and the clusters average their
// parameters. The anchor minus that mean is the outer gradient (the mean of the parameter deltas);
// SGD with Nesterov momentum turns it into the next anchor, which every cluster trains on from:
//   g = anchor - mean,  v = mu v + g,  anchor -= lr (g + mu v)
// (PyTorch's SGD(nesterov=True) with dampening 0). Learning rate 1 and no momentum give the
// mean itself: local SGD. Buffers (batch-norm statistics) are no parameters: they take the mean.
// The inner optimizer's state never leaves its node; the pipeline drains before each outer step.
#pragma once

#include <ATen/core/Tensor.h>

namespace rv {

// The outer step's settings: learning rate > 0, Nesterov momentum in [0, 1).
struct OuterSgd {
  double lr = 1.0;
  double momentum = 0.0;
};

class OuterOptimizer {
 public:
  // `lr` > 0, `momentum` in [0, 1).
  OuterOptimizer(double lr, double momentum);
  // The parameters every cluster starts from (the state row: parameters and buffers).
  void set_anchor(at::Tensor anchor);
  const at::Tensor& anchor() const { return anchor_; }
  // One outer step from the clusters' `mean` state row (the anchor's layout); `parameters` is 1
  // where the row holds a parameter and 0 at buffers. Returns the new anchor (kept).
  const at::Tensor& step(const at::Tensor& mean, const at::Tensor& parameters);

 private:
  double lr_, momentum_;
  at::Tensor anchor_, velocity_;
};

}  // namespace rv
