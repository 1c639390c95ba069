#include "core/model/stage.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <torch/csrc/autograd/autograd.h>

#include <limits>

#include "core/error.h"

namespace rv {

Stage::Stage(const ModelDesc& model, int begin, int end, const TrainingSpec& training,
             uint64_t seed, c10::Device device)
    : module_(model, begin, end, seed),
      training_(training),
      optimizer_(training),
      seed_(seed),
      device_(device) {
  // Initialised on the CPU (its generator fixes the weights on every device), then moved.
  if (!device_.is_cpu()) module_.to(device_);
}

at::Tensor Stage::to_device(const at::Tensor& t) const {
  if (!t.defined() || device_.is_cpu()) return t;
  return t.to(device_, /*non_blocking=*/t.is_pinned());
}

at::Tensor Stage::to_host(const at::Tensor& t) const {
  if (!t.defined() || t.is_cpu()) return t;
  at::Tensor host = at::empty(t.sizes(), t.options().device(at::kCPU).pinned_memory(true));
  host.copy_(t);  // waits for the copy: the caller may read it at once
  return host;
}

at::Tensor Stage::forward(int64_t mb, const at::Tensor& x_in) {
  const at::Tensor x = to_device(x_in);
  Saved s;
  s.input = is_first() ? x : x.detach().requires_grad_(true);
  s.version = version_;
  at::Tensor out;
  if (training_.weight_stashing) {
    c10::AutoGradMode grad(true);
    s.params = module_.params();
    s.output = module_.forward(s.input, s.params, true, dropout_seed(mb), true);
    out = s.output.detach();
  } else {
    c10::NoGradGuard no_grad;
    out = module_.forward(s.input, module_.params(), true, dropout_seed(mb), true);
  }
  saved_[mb] = std::move(s);
  return to_host(out);
}

at::Tensor Stage::backward(int64_t mb, const at::Tensor& grad_out_in, int64_t* forward_version) {
  const at::Tensor grad_out = to_device(grad_out_in);
  auto it = saved_.find(mb);
  RV_CHECK(it != saved_.end(),
           "backward of micro-batch " + std::to_string(mb) + " without its forward");
  Saved s = std::move(it->second);
  saved_.erase(it);
  if (forward_version) *forward_version = s.version;
  c10::AutoGradMode grad(true);
  std::vector<at::Tensor> params = s.params;
  at::Tensor output = s.output;
  if (!training_.weight_stashing) {
    params = module_.params();
    // Recompute with the current weights; BatchNorm statistics moved in the first forward already.
    output = module_.forward(s.input, params, true, dropout_seed(mb), false);
  }
  std::vector<at::Tensor> inputs = params;
  if (!is_first()) inputs.push_back(s.input);
  if (!output.requires_grad()) {  // e.g. a first stage that holds only parameter-free layers
    ++grad_count_;
    return at::Tensor();
  }
  auto grads = torch::autograd::grad({output}, inputs, {grad_out}, false, false, true);
  at::Tensor grad_in;
  if (!is_first()) {
    grad_in = grads.back();
    grads.pop_back();
  }
  accumulate(grads);
  return to_host(grad_in);
}

void Stage::accumulate(const std::vector<at::Tensor>& grads) {
  c10::NoGradGuard no_grad;
  if (grad_sum_.empty()) {
    // Gradients returned by autograd are fresh tensors: own them, no copy.
    grad_sum_ = grads;
  } else {
    for (size_t i = 0; i < grads.size(); ++i) {
      if (!grads[i].defined()) continue;
      if (grad_sum_[i].defined())
        grad_sum_[i].add_(grads[i]);
      else
        grad_sum_[i] = grads[i].detach().clone();
    }
  }
  ++grad_count_;
}

std::vector<int64_t> Stage::pending_ids() const {
  std::vector<int64_t> ids;
  for (const auto& [mb, saved] : saved_) ids.push_back(mb);
  return ids;
}

void Stage::drop_pending() {
  saved_.clear();
  grad_sum_.clear();
  grad_count_ = 0;
}

void Stage::update() {
  if (grad_count_ == 0) return;
  c10::NoGradGuard no_grad;
  if (grad_count_ > 1)
    for (auto& g : grad_sum_)
      if (g.defined()) g.div_(static_cast<double>(grad_count_));
  module_.set_params(optimizer_.step(module_.params(), grad_sum_));
  applied_ = std::move(grad_sum_);
  applied_valid_ = true;
  grad_sum_.clear();
  grad_count_ = 0;
  ++version_;
}

double Stage::take_applied_norm2() {
  // One pass over each gradient (one multi-tensor norm), each norm squared and summed in double; a
  // stage without parameters applied a gradient of norm 0. Where the gradients live on the CPU the
  // norms are read one by one (a dispatch each: a numeric run's overhead is in dispatches, not in
  // this arithmetic); on a device they are summed there and read back once (a single sync).
  std::vector<at::Tensor> defined;
  for (const at::Tensor& g : applied_)
    if (g.defined()) defined.push_back(g);
  double sum = 0.0;
  if (!defined.empty()) {
    const std::vector<at::Tensor> norms = at::_foreach_norm(defined);
    if (defined.front().is_cpu()) {
      for (const at::Tensor& n : norms) {
        const double v = n.item<double>();
        sum += v * v;
      }
    } else {
      sum = at::stack(norms).to(at::kDouble).square().sum().item<double>();
    }
  }
  const bool valid = applied_valid_;
  applied_.clear();
  applied_valid_ = false;
  return valid ? sum : std::numeric_limits<double>::quiet_NaN();
}

void Stage::exchange_gradients(const std::function<at::Tensor(const at::Tensor&)>& exchange) {
  c10::NoGradGuard no_grad;
  // The module's flat state, with each parameter's place holding its mean gradient instead.
  std::vector<at::Tensor> saved = module_.params();
  std::vector<at::Tensor> as_grads;
  for (size_t i = 0; i < saved.size(); ++i) {
    at::Tensor g =
        i < grad_sum_.size() && grad_sum_[i].defined() ? grad_sum_[i] : at::zeros_like(saved[i]);
    as_grads.push_back(grad_count_ > 1 ? g / static_cast<double>(grad_count_) : g);
  }
  module_.set_params(as_grads);
  at::Tensor flat = module_.flat_state();
  module_.set_params(saved);
  at::Tensor mean = to_device(exchange(to_host(flat)));
  // Read the averaged gradients back through the same layout, keep the averaged buffers.
  module_.set_flat_state(mean);
  grad_sum_ = module_.params();
  for (auto& g : grad_sum_) g = g.detach();
  grad_count_ = 1;
  module_.set_params(saved);
}

at::Tensor Stage::eval_forward(const at::Tensor& x) const {
  c10::NoGradGuard no_grad;
  return to_host(module_.forward(to_device(x), module_.params(), false, 0, false));
}

at::Tensor Stage::flat_state() const { return to_host(module_.flat_state()); }

at::Tensor Stage::averaged_state(bool optimizer) const {
  std::vector<at::Tensor> rows{module_.flat_state()};
  if (optimizer)
    for (int k = 0; k < optimizer_.slots(); ++k)
      rows.push_back(module_.flatten_like_state(optimizer_.slot(k, module_.params())));
  return to_host(at::stack(rows));
}

at::Tensor Stage::parameter_mask() const {
  std::vector<at::Tensor> ones;
  for (const auto& p : module_.params()) ones.push_back(at::ones_like(p.detach()));
  return to_host(module_.flatten_like_state(ones));
}

void Stage::set_averaged_state(const at::Tensor& rows_in) {
  RV_CHECK(rows_in.dim() == 2 && rows_in.size(0) >= 1, "set_averaged_state: [rows, n] expected");
  const at::Tensor rows = to_device(rows_in);
  module_.set_flat_state(rows[0]);
  RV_CHECK(rows.size(0) == 1 || rows.size(0) == 1 + optimizer_.slots(),
           "set_averaged_state: wrong number of rows");
  for (int k = 0; k + 1 < rows.size(0); ++k)
    optimizer_.set_slot(k, module_.unflatten_params(rows[k + 1]));
}

void Stage::restore(const at::Tensor& rows, int64_t version, int64_t optimizer_steps) {
  RV_CHECK(saved_.empty() && grad_count_ == 0, "Stage::restore: micro-batches pending");
  RV_CHECK(rows.dim() == 2 && rows.size(0) == 1 + optimizer_.slots(),
           "Stage::restore: the optimizer's rows are missing");
  set_averaged_state(rows);  // checks their length
  version_ = version;
  optimizer_.set_steps(optimizer_steps);
}

}  // namespace rv
