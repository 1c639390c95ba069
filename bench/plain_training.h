// The baseline every benchmark compares with: the whole model trained in one plain LibTorch loop
// (forward, loss, backward, optimizer step), on the same samples as the pipeline's cluster 0, and
// evaluated as a pipeline run's final evaluation is.
#pragma once

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <torch/csrc/autograd/autograd.h>

#include <algorithm>
#include <deque>
#include <limits>
#include <vector>

#include "core/data/dataset.h"
#include "core/model/model.h"
#include "core/model/optimizer.h"
#include "core/scenario/scenario.h"

namespace rv::bench {

// The loss a plain training loop of the task writes (core/data/task.h), as a tensor with a graph.
inline at::Tensor plain_loss(TaskKind task, const at::Tensor& out, const at::Tensor& targets) {
  switch (task) {
    case TaskKind::kRegression:
      return at::mse_loss(out, targets);
    case TaskKind::kNextToken:  // [batch, tokens, vocabulary]; -1: a position not scored
      return at::nll_loss(at::log_softmax(out.reshape({-1, out.size(2)}), 1), targets.reshape({-1}),
                          {}, at::Reduction::Mean, -1);
    case TaskKind::kClassification:
      break;
  }
  return at::nll_loss(at::log_softmax(out, 1), targets);
}

// Trains `steps` micro-batches with `in_flight` of them in flight, as an asynchronous pipeline
// holds them, and returns the final module: each step runs a new micro-batch's forward (its graph,
// activations and weights kept alive) and, once `in_flight` are pending, the backward and update
// of the oldest, with the weights its forward used (weight stashing). So up to `in_flight`
// micro-batches' activations and weight versions are alive at once, as in the pipeline; the maths
// per micro-batch is the same whatever `in_flight` (1: forward, backward, update, one at a time).
// On a GPU (`device`) the module, its optimizer state and each micro-batch live there; the call
// returns once the device has finished (it reads the loss of the last micro-batch back).
inline StageModule train_plain_in_flight(const Scenario& s, const ModelDesc& model,
                                         const Dataset& data, int64_t steps, int64_t in_flight,
                                         c10::Device device = c10::kCPU) {
  StageModule whole(model, 0, model.layer_count(), s.seed);
  if (!device.is_cpu()) whole.to(device);
  Optimizer opt(s.training);
  Sampler sampler(data.train_size(), s.data.batch_size, s.seed);
  struct Pending {
    at::Tensor loss;
    std::vector<at::Tensor> params;  // the weights its forward used
  };
  std::deque<Pending> pending;
  at::Tensor last_loss;
  auto oldest_back = [&] {
    Pending p = std::move(pending.front());
    pending.pop_front();
    last_loss = p.loss.detach();
    auto grads = torch::autograd::grad({p.loss}, p.params);
    whole.set_params(opt.step(whole.params(), grads));
  };
  for (int64_t mb = 0; mb < steps; ++mb) {
    auto rows = sampler.indices(mb);
    c10::AutoGradMode g(true);
    Pending p;
    p.params = whole.params();
    at::Tensor logits =
        whole.forward(data.inputs(rows, false).to(device), p.params, true, mb, true);
    p.loss = plain_loss(data.shape.task, logits, data.targets(rows, false).to(device));
    pending.push_back(std::move(p));
    if (static_cast<int64_t>(pending.size()) >= in_flight) oldest_back();
  }
  while (!pending.empty()) oldest_back();
  if (last_loss.defined()) (void)last_loss.item<float>();  // waits for the device's queue
  return whole;
}

// The plain loop: one micro-batch at a time.
inline StageModule train_plain(const Scenario& s, const ModelDesc& model, const Dataset& data,
                               int64_t steps, c10::Device device = c10::kCPU) {
  return train_plain_in_flight(s, model, data, steps, 1, device);
}

// The final evaluation a pipeline run makes: the test set (the first `training.eval_samples`
// samples, or all) forward in micro-batches, no graph. Returns the accuracy (NaN for a task
// without one).
inline double evaluate_plain(const Scenario& s, const StageModule& whole, const Dataset& data,
                             c10::Device device = c10::kCPU) {
  c10::NoGradGuard no_grad;
  const int64_t n = s.training.eval_samples > 0
                        ? std::min(s.training.eval_samples, data.test_size())
                        : data.test_size();
  const int64_t batch = s.data.batch_size;
  double correct = 0;
  for (int64_t start = 0; start < n; start += batch) {
    std::vector<int64_t> rows;
    for (int64_t r = start; r < std::min(n, start + batch); ++r) rows.push_back(r);
    at::Tensor y =
        whole.forward(data.inputs(rows, true).to(device), whole.params(), false, 0, false).cpu();
    correct += data.task().score(y, data.targets(rows, true)).correct;
  }
  return data.task().has_accuracy() && n > 0 ? correct / static_cast<double>(n)
                                             : std::numeric_limits<double>::quiet_NaN();
}

}  // namespace rv::bench
