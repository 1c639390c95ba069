// Tasks: what a model's outputs mean and how they are scored. The data kind decides the task; the
// pipeline asks the task for the loss and its gradient (last stage) and for evaluation scores, so
// a new task (next-token prediction: token-id inputs, [batch, tokens, vocabulary] outputs and
// [batch, tokens] targets) fits without touching the algorithms.
//
//   classification  outputs: one score per class; targets: int64 class ids; loss: cross-entropy;
//                   evaluation: mean cross-entropy and accuracy
//   regression      outputs: the targets' values; targets: float32 [batch, targets]; loss: mean
//                   squared error (over samples and targets); evaluation: the same, no accuracy
//   next-token      outputs: [batch, tokens, vocabulary] logits; targets: int64 [batch, tokens]
//                   token ids, -1 where a position is not scored; loss: cross-entropy, mean over
//                   the scored positions; evaluation: per sample the mean over its scored positions
//                   of the cross-entropy and of correct predictions (an accuracy per token)
//
// Thread-safety: tasks are immutable singletons.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

namespace rv {

enum class TaskKind { kClassification, kRegression, kNextToken };

struct LossResult {
  double loss = 0;        // the task's loss, mean over the micro-batch
  at::Tensor grad_input;  // gradient of that loss w.r.t. the outputs
};

struct Score {
  double loss_sum = 0;  // loss summed over the batch's samples
  double correct = 0;   // correctly predicted samples (tasks with an accuracy; next-token: the
                        // share of each sample's positions predicted correctly, summed)
};

class Task {
 public:
  virtual ~Task() = default;
  virtual const char* name() const = 0;
  // Whether evaluations report an accuracy (else it is left empty).
  virtual bool has_accuracy() const = 0;
  // Loss of `outputs` against `targets` and its gradient w.r.t. the outputs.
  virtual LossResult loss_and_grad(const at::Tensor& outputs, const at::Tensor& targets) const = 0;
  // Evaluation: summed loss and correct count, without a graph.
  virtual Score score(const at::Tensor& outputs, const at::Tensor& targets) const = 0;
};

const Task& task_for(TaskKind kind);

}  // namespace rv
