// The baseline every benchmark compares with: the whole model trained in one plain LibTorch loop
// (forward, loss, backward, optimizer step), on the same samples as the pipeline's cluster 0.
#pragma once

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <torch/csrc/autograd/autograd.h>

#include "core/data/dataset.h"
#include "core/model/model.h"
#include "core/model/optimizer.h"
#include "core/scenario/scenario.h"

namespace rv::bench {

// Trains `steps` micro-batches and returns the final module.
inline StageModule train_plain(const Scenario& s, const ModelDesc& model, const Dataset& data,
                               int64_t steps) {
  StageModule whole(model, 0, model.layer_count(), s.seed);
  Optimizer opt(s.training);
  Sampler sampler(data.train_size(), s.data.batch_size, s.seed);
  for (int64_t mb = 0; mb < steps; ++mb) {
    auto rows = sampler.indices(mb);
    c10::AutoGradMode g(true);
    at::Tensor logits = whole.forward(data.inputs(rows, false), whole.params(), true, mb, true);
    at::Tensor loss = at::nll_loss(at::log_softmax(logits, 1), data.targets(rows, false));
    auto grads = torch::autograd::grad({loss}, whole.params());
    whole.set_params(opt.step(whole.params(), grads));
  }
  return whole;
}

}  // namespace rv::bench
