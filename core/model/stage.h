// Stage: the maths of one pipeline stage (numeric mode only): forward, backward and optimizer
// step of layers [begin, end), with weight stashing, gradient accumulation and evaluation.
//
// Weight stashing on: a forward keeps its autograd graph, which holds the parameter tensors of
// that moment; the optimizer replaces parameters out of place, so the backward differentiates with
// the forward's weights (PipeDream semantics) and the gradient is applied to the current ones.
// Weight stashing off: a forward keeps only its input; the backward recomputes the forward with
// the current weights (same dropout masks), then differentiates.
//
// Devices: a stage keeps its parameters, optimizer state, gradients and saved activations on its
// device (a GPU with real.device = "cuda"). Every tensor that crosses its interface (inputs,
// outputs, gradients, flat states) is a CPU tensor, as messages are (core/env.h); from a GPU they
// come through pinned host memory.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <cstdint>
#include <functional>
#include <map>
#include <vector>

#include "core/data/task.h"
#include "core/model/model.h"
#include "core/model/optimizer.h"
#include "core/scenario/scenario.h"

namespace rv {

class Stage {
 public:
  Stage(const ModelDesc& model, int begin, int end, const TrainingSpec& training, uint64_t seed,
        c10::Device device = c10::kCPU);
  c10::Device device() const { return device_; }

  bool is_first() const { return module_.begin() == 0; }
  int64_t version() const { return version_; }  // optimizer steps applied so far

  // Training forward of micro-batch `mb`; returns the output activations (detached).
  at::Tensor forward(int64_t mb, const at::Tensor& x);
  // Backward of micro-batch `mb` given the gradient w.r.t. its output; accumulates parameter
  // gradients and returns the gradient w.r.t. its input (undefined on a first stage).
  // `forward_version` receives the version its forward used.
  at::Tensor backward(int64_t mb, const at::Tensor& grad_out, int64_t* forward_version = nullptr);
  // Applies the accumulated gradients, divided by the number of backwards since the last update.
  void update();
  // The squared norm of the gradient the last update() applied (the mean over its micro-batches;
  // 0 for a stage without parameters), NaN if no update applied one since the last call; releases
  // that gradient. Call after update(), outside its timing.
  double take_applied_norm2();
  // Data parallelism: the accumulated gradients (averaged over this node's backwards) in the flat
  // state layout, the buffers in their places, go through `exchange` (an all-reduce mean), and
  // come back as this node's gradients and buffers. Call before update().
  void exchange_gradients(const std::function<at::Tensor(const at::Tensor&)>& exchange);
  // Cross-cluster averaging: [1 + k, n], the flat state (StageModule::flat_state) and, with
  // `optimizer`, the optimizer's k state slots in the same layout (zeros at the buffers); and back.
  at::Tensor averaged_state(bool optimizer) const;
  void set_averaged_state(const at::Tensor& rows);
  // 1 where the flat state holds a parameter, 0 at buffers ([n], float).
  at::Tensor parameter_mask() const;
  // Checkpoints: averaged_state(true) with the optimizer's step count, and back (nothing pending).
  int64_t optimizer_steps() const { return optimizer_.steps(); }
  void restore(const at::Tensor& rows, int64_t version, int64_t optimizer_steps);
  // Inference forward (no dropout, running BatchNorm statistics, no graph).
  at::Tensor eval_forward(const at::Tensor& x) const;
  // The flat state (StageModule::flat_state), on the CPU.
  at::Tensor flat_state() const;

  int64_t pending() const { return static_cast<int64_t>(saved_.size()); }
  // Churn: forgets every micro-batch whose backward has not come, and gradients not yet applied.
  void drop_pending();
  // The micro-batches whose forward ran and whose backward has not.
  std::vector<int64_t> pending_ids() const;
  const StageModule& module() const { return module_; }
  StageModule& module() { return module_; }
  // A tensor of the interface to the stage's device, and one of the device to the CPU.
  at::Tensor to_device(const at::Tensor& t) const;
  at::Tensor to_host(const at::Tensor& t) const;

 private:
  struct Saved {
    at::Tensor input;                // requires grad unless first stage
    at::Tensor output;               // with graph (stashing only)
    std::vector<at::Tensor> params;  // the version used (stashing only)
    int64_t version = 0;
  };
  void accumulate(const std::vector<at::Tensor>& grads);
  uint64_t dropout_seed(int64_t mb) const {
    return seed_ * 0x100000001B3ULL + static_cast<uint64_t>(mb);
  }

  StageModule module_;
  TrainingSpec training_;
  Optimizer optimizer_;
  uint64_t seed_;
  c10::Device device_;
  int64_t version_ = 0;
  std::map<int64_t, Saved> saved_;
  std::vector<at::Tensor> grad_sum_;
  std::vector<at::Tensor> applied_;  // the last update's gradient, until take_applied_norm2()
  bool applied_valid_ = false;       // an update applied it (possibly no tensors: no parameters)
  int64_t grad_count_ = 0;
};

}  // namespace rv
