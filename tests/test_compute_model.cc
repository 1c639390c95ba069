// The calibrated compute model (core/compute/): work counted as kernels by kind and size class,
// a device's time for it (one function, time_of), profile files, and the simulator and the planner
// charging exactly that time.
#include <cmath>
#include <filesystem>
#include <fstream>
#include <unistd.h>

#include "catch.h"
#include "core/compute/profile.h"
#include "core/compute/work.h"
#include "core/error.h"
#include "core/model/cost_model.h"
#include "planner/cost.h"
#include "sim/sim_runner.h"
#include "test_support.h"

using namespace rv;
namespace fs = std::filesystem;

namespace {

ComputeProfile example_profile() {
  ComputeProfile p;
  p.name = "example";
  p.peak_flops_per_s = 2e11;
  p.op_overhead = 20e-6;
  p.threads = 2;
  p.efficiency = {{{{0.1, 0.5, 0.9}}, {{0.05, 0.3, 0.6}}, {{0.01, 0.02, 0.03}}}};
  return p;
}

fs::path temp_file(const std::string& name, const std::string& text) {
  const fs::path p = fs::temp_directory_path() / ("rv-compute-" + std::to_string(getpid()) + "-" + name);
  std::ofstream(p) << text;
  return p;
}

}  // namespace

TEST_CASE("work counts kernels by kind and size class", "[compute]") {
  Work w;
  w.add(OpKind::kMatmul, 1000);                 // small
  w.add(OpKind::kMatmul, kSmallOpFlops, 3);     // medium (the class starts at its bound)
  w.add(OpKind::kElementwise, kMediumOpFlops);  // large
  CHECK(w.ops(OpKind::kMatmul, 0) == 1);
  CHECK(w.flops(OpKind::kMatmul, 1) == 3 * kSmallOpFlops);
  CHECK(w.ops(OpKind::kElementwise, 2) == 1);
  CHECK(w.total_ops() == 5);
  CHECK(w.total_flops() == 1000 + 3 * kSmallOpFlops + kMediumOpFlops);
  const Work twice = w.scaled(2);
  CHECK(twice.total_ops() == 10);
  CHECK(twice.flops(OpKind::kMatmul, 0) == 2000);
  CHECK_THROWS_AS(w.add(OpKind::kConv, -1), Error);
}

TEST_CASE("a device's time: a fixed cost per kernel plus flops at its efficiency", "[compute]") {
  const ComputeProfile p = example_profile();
  Work w;
  w.add(OpKind::kMatmul, 1e9, 2);     // large: 2 kernels of 1 GFLOP at 0.9 of the peak
  w.add(OpKind::kConv, 1e5, 4);       // small convolutions at 0.05
  w.add(OpKind::kElementwise, 2e6);   // medium elementwise at 0.02
  const double expected = 7 * 20e-6 + 2e9 / (2e11 * 0.9) + 4e5 / (2e11 * 0.05) + 2e6 / (2e11 * 0.02);
  CHECK(time_of(w, p) == Approx(expected).epsilon(1e-12));
  // The default profile is the peak model: flops over the peak, nothing per kernel.
  ComputeProfile peak;
  peak.peak_flops_per_s = 5e12;
  CHECK(time_of(w, peak) == Approx(w.total_flops() / 5e12).epsilon(1e-12));
  CHECK(time_of(Work(), p) == 0);
}

TEST_CASE("a model's work: its layers' kernels, the backward twice the forward", "[compute]") {
  auto prep = test::prepare(R"(
name = "w"
[model]
head = "linear"
kind = "cnn"
channels = [4, 8]
hidden = [32]
[data]
kind = "synthetic"
side = 8
classes = 10
batch_size = 16
[sim]
mode = "timing"
[[devices]]
count = 1
)",
                            {}, false);
  const ModelDesc& m = prep.model;
  const int n = m.layer_count();
  const Work f = m.forward_work(0, n, 16), b = m.backward_work(0, n, 16);
  CHECK(f.total_flops() == Approx(16 * m.forward_flops(0, n)).epsilon(1e-12));
  CHECK(b.total_flops() == Approx(2 * f.total_flops()).epsilon(1e-12));
  int convs = 0, linears = 0, views = 0;
  for (const LayerProfile& p : m.profile) {
    convs += p.op_kind == OpKind::kConv;
    linears += p.op_kind == OpKind::kMatmul;
    views += p.forward_ops == 0;
  }
  double conv_ops = 0, matmul_ops = 0;
  for (int c = 0; c < kSizeClasses; ++c) {
    conv_ops += f.ops(OpKind::kConv, c);
    matmul_ops += f.ops(OpKind::kMatmul, c);
    CHECK(b.ops(OpKind::kConv, c) == 2 * f.ops(OpKind::kConv, c));
  }
  CHECK(convs == 2);
  CHECK(conv_ops == 2);
  CHECK(matmul_ops == linears);
  CHECK(views == 1);  // the flatten
  // The stage's work carries the stage cost's flops, and its update charges every parameter.
  TrainingSpec tr = prep.scenario.training;
  tr.optimizer = "adam";
  const StageCost c = stage_cost(m, 0, n, tr, 16, 1);
  const StageWork sw = stage_work(m, 0, n, tr, 16);
  CHECK(sw.update.total_flops() == Approx(c.update).epsilon(1e-12));
  CHECK(sw.forward.total_flops() == Approx(c.forward).epsilon(1e-12));
  CHECK(sw.backward.total_flops() == Approx(c.backward).epsilon(1e-12));
}

TEST_CASE("profile files read back as written; bad ones name the key", "[compute]") {
  const ComputeProfile p = example_profile();
  const ComputeProfile q = parse_profile(profile_to_toml(p, "a comment"), "p.toml");
  CHECK(q.name == p.name);
  CHECK(q.peak_flops_per_s == Approx(p.peak_flops_per_s).epsilon(1e-6));
  CHECK(q.op_overhead == Approx(p.op_overhead).epsilon(1e-6));
  CHECK(q.threads == 2);
  for (int k = 0; k < kOpKinds; ++k)
    for (int c = 0; c < kSizeClasses; ++c)
      CHECK(q.efficiency_of(static_cast<OpKind>(k), c) ==
            Approx(p.efficiency_of(static_cast<OpKind>(k), c)).epsilon(1e-6));
  const std::string good = profile_to_toml(p);
  struct Bad {
    std::string text, says;
  };
  for (const Bad& bad : {Bad{"peak_tflops = 1\nop_overhead_us = 1\n", "key 'efficiency'"},
                         Bad{"speed = 3\n" + good, "key 'speed': unknown key"},
                         Bad{good + "attention = [1, 1, 1]\n", "key 'efficiency.attention': unknown key"},
                         Bad{"peak_tflops = -1\nop_overhead_us = 1\n", "key 'peak_tflops'"},
                         Bad{"peak_tflops = 1\nop_overhead_us = 1\n[efficiency]\nmatmul = [1, 1]\n"
                             "conv = [1, 1, 1]\nelementwise = [1, 1, 1]\n",
                             "key 'efficiency.matmul'"},
                         Bad{"peak_tflops = 1\nop_overhead_us = 1\n[efficiency]\nmatmul = [1, 1, 0]\n"
                             "conv = [1, 1, 1]\nelementwise = [1, 1, 1]\n",
                             "(0, 1.5]"},
                         Bad{"peak_tflops = [", "p.toml:1"}}) {
    INFO(bad.text);
    try {
      parse_profile(bad.text, "p.toml");
      FAIL("accepted");
    } catch (const InputError& e) {
      CHECK(std::string(e.what()).find(bad.says) != std::string::npos);
    }
  }
}

const char* kOneNode = R"(
name = "one"
[model]
head = "linear"
kind = "mlp"
hidden = [256, 64]
[data]
kind = "synthetic"
side = 8
classes = 10
batch_size = 32
[training]
steps = 5
eval_every = 0
[sim]
mode = "timing"
[network]
model = "ideal"
[[devices]]
count = 1
tflops = 0.2
)";

TEST_CASE("a device's profile: the simulator and the planner charge time_of, nothing else",
          "[compute][sim]") {
  const fs::path file = temp_file("profile.toml", profile_to_toml(example_profile()));
  auto p = test::prepare(kOneNode, {"devices.0.profile=\"" + file.string() + "\""}, false);
  const ComputeProfile device = p.scenario.devices[0].compute_profile();
  CHECK(device.peak_flops_per_s == 0.2e12);  // the device's peak, the profile's efficiencies
  CHECK(device.op_overhead == Approx(20e-6).epsilon(1e-9));
  const int n = p.model.layer_count();
  const StageCost c = stage_cost(p.model, 0, n, p.scenario.training, 32, 1);
  const StageWork w = stage_work(p.model, 0, n, p.scenario.training, 32);
  SimResult r = run_simulation(p.spec());
  int checked = 0;
  for (const Event& e : r.events) {
    if (e.kind != EventKind::kForward || e.node != 0 || e.micro_batch < 0) continue;  // not evals
    CHECK(e.end - e.start == Approx(time_of(w.forward, device)).epsilon(1e-9));
    ++checked;
  }
  CHECK(checked == 5);
  // The planner predicts the same compute time per micro-batch.
  CostModel cost(p.scenario, p.model);
  CHECK(cost.compute_time(0, 0, n) == Approx(stage_compute_time(w, device)).epsilon(1e-12));
  CHECK(stage_compute_time(w, device) >
        (c.forward + c.backward + c.update) / device.peak_flops_per_s);
  fs::remove(file);
}

TEST_CASE("a missing or bad profile file is a scenario error naming the device's key", "[compute]") {
  const fs::path bad = temp_file("bad.toml", "peak_tflops = 1\n");
  for (const std::string& path : {std::string("/nonexistent/profile.toml"), bad.string()}) {
    try {
      parse_scenario(kOneNode, "one.toml", {"devices.0.profile=\"" + path + "\""});
      FAIL("accepted " << path);
    } catch (const ScenarioError& e) {
      CHECK(std::string(e.what()).find("devices[0].profile") != std::string::npos);
      CHECK(std::string(e.what()).find(path) != std::string::npos);
    }
  }
  fs::remove(bad);
}
