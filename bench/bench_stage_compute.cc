// Stage compute in isolation against the calibrated model: each stage of cluster 0 of a scenario's
// plan runs its micro-batches alone in this process (no pipeline, no network, one LibTorch thread
// per the profile), and each layer's forward and backward is timed on its own; beside each figure,
// what the model (core/compute/profile.h) predicts for the stage's device. Every input is what the
// layers before make of the scenario's data (pooling and ReLU cost depends on the values: random
// inputs of the CNN's first max-pool, batch 128, took 11.4 ms against 8.3 ms on its real input).
// --evict-mib N writes N MiB before each span, so that the stage finds its weights out of the
// caches, as it may in a pipeline (between two spans its node's transport and the other nodes run);
// --sleep-us N sleeps that long before each span, as a stage waits for its next message.
//
//   bench_stage_compute --scenario FILE [--micro-batches 60] [--evict-mib 0] [--sleep-us 0] [--out
//   FILE]
#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <torch/csrc/autograd/autograd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <thread>

#include "bench/bench_common.h"
#include "core/data/dataset.h"
#include "core/memory/allocator.h"
#include "core/model/cost_model.h"
#include "core/model/model.h"
#include "core/model/stage.h"
#include "core/scenario/scenario.h"
#include "exec/compute_threads.h"
#include "planner/planner.h"

using namespace rv;

namespace {
using bench::median;  // the mean of the middle two for an even count, as compute_model.py's
std::vector<char> evict_buf;
void evict(int64_t mib) {
  evict_buf.resize(static_cast<size_t>(mib) << 20);
  for (size_t i = 0; i < evict_buf.size(); i += 64)
    evict_buf[i] = static_cast<char>(evict_buf[i] + 1);
}
}  // namespace

int main(int argc, char** argv) try {
  rv::configure_allocator();  // as ravnest does (core/memory/allocator.h)
  std::string path, out;
  int64_t mbs = 60;
  CLI::App app{"stage compute in isolation"};
  app.add_option("--scenario", path)->required();
  app.add_option("--micro-batches", mbs);
  app.add_option("--out", out);
  int64_t evict_mib = 0, sleep_us = 0;
  app.add_option("--sleep-us", sleep_us,
                 "before each span, sleep this long (as a stage waits for its next message)");
  app.add_option("--evict-mib", evict_mib, "before each span, write this many MiB (evicts caches)");
  CLI11_PARSE(app, argc, argv);

  Scenario s = load_scenario(path, {});
  ModelDesc model = build_model(s);
  Plan plan = make_plan(s, model);
  Dataset data = load_dataset(s.data, s.seed);
  const int64_t batch = s.data.batch_size;
  nlohmann::json stages = nlohmann::json::array();
  for (const auto& st : plan.clusters[0].stages) {
    const DeviceGroup& dev = s.device_of(st.node);
    const ComputeProfile prof = dev.compute_profile();
    set_compute_threads(prof.threads > 0 ? prof.threads : 1);
    Stage stage(model, st.layer_begin, st.layer_end, s.training, s.seed);
    Sampler sampler(data.train_size(), batch, s.seed);
    StageModule before(model, 0, std::max(st.layer_begin, 1), s.seed);
    const bool first = st.layer_begin == 0, last = st.layer_end == model.layer_count();
    std::vector<double> fw, bw, up;
    for (int64_t mb = 0; mb < mbs; ++mb) {
      // A later stage's input is what the layers before it make of the data (not random values:
      // pooling and ReLU cost depends on them), computed untimed.
      at::Tensor x;
      if (!first) {
        c10::NoGradGuard no_grad;
        x = before.forward(data.inputs(sampler.indices(mb), false), before.params(), true, 1, false)
                .contiguous();
      }
      if (evict_mib > 0) evict(evict_mib);
      if (sleep_us > 0) std::this_thread::sleep_for(std::chrono::microseconds(sleep_us));
      double t0 = bench::wall_now();
      if (first) x = data.inputs(sampler.indices(mb), false);
      at::Tensor y = stage.forward(mb, x);
      if (!last) y = y.contiguous();
      double t1 = bench::wall_now();
      at::Tensor g;
      if (last) {
        LossResult r = data.task().loss_and_grad(y, data.targets(sampler.indices(mb), false));
        g = r.grad_input;
      } else {
        g = at::randn_like(y);
      }
      if (evict_mib > 0 && !last) evict(evict_mib);
      if (sleep_us > 0 && !last) std::this_thread::sleep_for(std::chrono::microseconds(sleep_us));
      double t2 = bench::wall_now();
      if (last) t2 = t1;  // loss counts in the backward span, as the worker does
      at::Tensor gi = stage.backward(mb, g, nullptr);
      if (gi.defined()) gi = gi.contiguous();
      double t3 = bench::wall_now();
      stage.update();
      double t4 = bench::wall_now();
      if (mb >= 5) {
        fw.push_back(t1 - t0);
        bw.push_back(t3 - t2);
        up.push_back(t4 - t3);
      }
    }
    const StageWork w = stage_work(model, st.layer_begin, st.layer_end, s.training, batch);
    // The model's wait before a span: --sleep-us (--evict-mib stands for a wait the cache forgets).
    const Seconds idle = evict_mib > 0 ? 1e9 : static_cast<double>(sleep_us) * 1e-6;
    const Seconds wake =
        static_cast<double>(sleep_us) * 1e-6;  // each span's code runs after the sleep
    // What time_of charges for a span after `idle`, with the wake-up curve's span cost of the sleep
    // itself (--evict-mib's stand-in wait is for the cold bytes only).
    auto model_time = [&](const Work& work, Seconds idle_s) {
      return time_of(work, prof, idle_s, wake) - wake_span_cost(prof, idle_s) +
             (idle_s > 0 ? wake_span_cost(prof, wake) : 0.0);
    };
    nlohmann::json layers = nlohmann::json::array();
    for (int l = st.layer_begin; l < st.layer_end; ++l) {
      StageModule m(model, l, l + 1, s.seed);
      StageModule layers_before(model, 0, std::max(l, 1), s.seed);
      std::vector<double> lf, lb;
      for (int r = 0; r < 30; ++r) {
        at::Tensor xi = data.inputs(sampler.indices(r), false);
        if (l > 0) {
          c10::NoGradGuard no_grad;
          xi = layers_before.forward(xi, layers_before.params(), true, 1, false).contiguous();
        }
        xi.requires_grad_(l != 0);
        c10::AutoGradMode grad(true);
        double t0 = bench::wall_now();
        at::Tensor y = m.forward(xi, m.params(), true, 1, true);
        double t1 = bench::wall_now();
        std::vector<at::Tensor> ins = m.params();
        if (l != 0) ins.push_back(xi);
        at::Tensor gy = at::randn_like(y);
        double t2 = bench::wall_now();
        if (y.requires_grad()) torch::autograd::grad({y}, ins, {gy}, false, false, true);
        double t3 = bench::wall_now();
        if (r >= 3) {
          lf.push_back(t1 - t0);
          lb.push_back(t3 - t2);
        }
      }
      const Work fwk = model.forward_work(l, l + 1, batch),
                 bwk = model.backward_work(l, l + 1, batch);
      layers.push_back({{"layer", model.profile[l].name},
                        {"forward_ms", median(lf) * 1e3},
                        {"model_forward_ms", time_of(fwk, prof) * 1e3},
                        {"backward_ms", median(lb) * 1e3},
                        {"model_backward_ms", time_of(bwk, prof) * 1e3}});
    }
    stages.push_back({{"stage", &st - plan.clusters[0].stages.data()},
                      {"forward_ms", median(fw) * 1e3},
                      {"model_forward_ms", model_time(w.forward, idle) * 1e3},
                      {"backward_ms", median(bw) * 1e3},
                      // The last stage's backward follows its forward, yet runs code the forward
                      // did not (core/compute/profile.h DeviceHistory): the same wake.
                      {"model_backward_ms", model_time(w.backward, last ? 0.0 : idle) * 1e3},
                      // The optimizer step follows the backward at once.
                      {"update_ms", median(up) * 1e3},
                      {"model_update_ms", model_time(w.update, 0.0) * 1e3},
                      {"layers", layers}});
  }
  bench::emit(
      {{"benchmark", "stage_compute"}, {"scenario", s.name}, {"batch", batch}, {"stages", stages}},
      out);
} catch (const std::exception& e) {
  return bench::failed(e);
}
