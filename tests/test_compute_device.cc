// Where a real run's ranks compute (real.device, devices[].gpu; issue 19): the CPU always, a GPU
// where the LibTorch built against has CUDA and one is visible, and "cuda" refused with exit
// status 2 elsewhere. A stage on a GPU keeps its parameters and activations there while every
// tensor crossing its interface is a CPU tensor. The GPU parts skip themselves without a GPU.
#include <ATen/ATen.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>

#include "catch.h"
#include "cli_support.h"
#include "core/error.h"
#include "core/model/model.h"
#include "core/model/stage.h"
#include "core/output/run_output.h"
#include "core/scenario/scenario.h"
#include "exec/wall_env.h"
#include "real/compute_device.h"
#include "snippets.h"

using namespace rv;
namespace fs = std::filesystem;

namespace {

const std::string kTwoRanks = std::string(R"(name = "device"
)") + test::kDigitsMlp + R"([training]
steps = 4
[[devices]]
count = 2
)";

Scenario two_ranks(const std::vector<std::string>& sets) {
  return parse_scenario(kTwoRanks, "d.toml", sets);
}

TrainingSpec adam() {
  TrainingSpec t;
  t.optimizer = OptimizerKind::kAdam;
  t.lr = 0.01;
  return t;
}

}  // namespace

TEST_CASE("real.device: cpu is the CPU, auto a GPU only where one is visible", "[device]") {
  CHECK(compute_device(two_ranks({"real.device=\"cpu\""}), 1) == c10::Device(c10::kCPU));
  const c10::Device automatic = compute_device(two_ranks({}), 1);
  if (visible_gpus() == 0) {
    CHECK(automatic.is_cpu());
  } else {
    CHECK(automatic ==
          c10::Device(c10::DeviceType::CUDA, static_cast<c10::DeviceIndex>(1 % visible_gpus())));
  }
}

TEST_CASE("real.device: cuda without CUDA or a GPU is refused, naming the key", "[device]") {
  if (visible_gpus() > 0) {
    std::cout << "SKIPPED: this process sees a GPU, so cuda is not refused here\n";
    return;
  }
  try {
    compute_device(two_ranks({"real.device=\"cuda\""}), 0);
    FAIL("no error");
  } catch (const KeyError& e) {
    CHECK(std::string(e.what()).find("real.device") != std::string::npos);
  }
  // And the command line: exit status 2 before any rank starts.
  const fs::path d = test::fresh_dir("rv-device", "refused");
  std::ofstream(d / "s.toml") << kTwoRanks;
  const test::Result r = test::ravnest(
      {"real", "s.toml", "--set", "real.device=\"cuda\"", "--run-dir", "run", "--progress", "off"},
      d);
  INFO(r.err);
  CHECK(r.status == 2);
  CHECK(r.err.find("real.device") != std::string::npos);
  CHECK_FALSE(fs::exists(d / "run"));
  fs::remove_all(d);
}

TEST_CASE("devices[].gpu past the last GPU is refused", "[device]") {
  if (visible_gpus() == 0) {
    std::cout << "SKIPPED: no GPU visible (the LibTorch built against has no CUDA, or the machine "
                 "no GPU)\n";
    return;
  }
  CHECK_THROWS_AS(compute_device(two_ranks({"real.device=\"cuda\"",
                                            "devices.0.gpu=" + std::to_string(visible_gpus())}),
                                 0),
                  KeyError);
  CHECK(compute_device(two_ranks({"real.device=\"cuda\"", "devices.0.gpu=0"}), 1).index() == 0);
}

TEST_CASE("a stage on the CPU device is the stage by default, to the bit", "[device]") {
  const ModelDesc m = build_model(parse_scenario(kTwoRanks, "d.toml", {}));
  Stage a(m, 0, m.layer_count(), adam(), 9), b(m, 0, m.layer_count(), adam(), 9, c10::kCPU);
  const at::Tensor x = at::randn({8, 1, 8, 8});
  const at::Tensor ya = a.forward(0, x), yb = b.forward(0, x);
  CHECK(at::equal(ya, yb));
  CHECK(b.device().is_cpu());
}

TEST_CASE("a stage on a GPU keeps its parameters and activations there, its interface on the CPU",
          "[device][gpu]") {
  if (visible_gpus() == 0) {
    std::cout << "SKIPPED: no GPU visible (the LibTorch built against has no CUDA, or the machine "
                 "no GPU)\n";
    return;
  }
  const c10::Device gpu(c10::DeviceType::CUDA, 0);
  const ModelDesc m = build_model(parse_scenario(kTwoRanks, "d.toml", {}));
  Stage cpu(m, 1, m.layer_count(), adam(), 9), dev(m, 1, m.layer_count(), adam(), 9, gpu);
  for (const at::Tensor& p : dev.module().params()) CHECK(p.device() == gpu);
  const at::Tensor x = at::randn({16, m.profile[0].out_elems});
  const at::Tensor y_cpu = cpu.forward(0, x), y_dev = dev.forward(0, x);
  CHECK(y_dev.is_cpu());                          // the interface: CPU tensors
  CHECK(at::allclose(y_cpu, y_dev, 1e-4, 1e-5));  // the same maths
  const at::Tensor g = at::randn(y_cpu.sizes());
  const at::Tensor gi_cpu = cpu.backward(0, g), gi_dev = dev.backward(0, g);
  CHECK(gi_dev.is_cpu());
  CHECK(at::allclose(gi_cpu, gi_dev, 1e-4, 1e-5));
  cpu.update();
  dev.update();
  for (const at::Tensor& p : dev.module().params())
    CHECK(p.device() == gpu);  // the optimizer's step stays there
  CHECK(at::allclose(cpu.flat_state(), dev.flat_state(), 1e-4, 1e-5));
  CHECK(dev.averaged_state(true).is_cpu());
  // A forward's saved activations stay on the GPU: its output is on the GPU inside the stage.
  dev.forward(1, x);
  CHECK(dev.pending() == 1);
  CHECK(dev.module().forward(dev.to_device(x), dev.module().params(), false, 0, false).device() ==
        gpu);
}

TEST_CASE("wall compute on the CPU measures no device time", "[device]") {
  const Work work;  // no emulation: the work's size does not matter
  WallCompute cpu;
  at::Tensor a = at::randn({64, 64});
  bool ran = false;
  CHECK(std::isnan(cpu.run(work, {}, [&] {
    a = at::mm(a, a);
    ran = true;
  })));
  CHECK(ran);
}

TEST_CASE("wall compute times a GPU's kernels with device events", "[device][gpu]") {
  if (visible_gpus() == 0) {
    std::cout << "SKIPPED: no GPU visible (the LibTorch built against has no CUDA, or the machine "
                 "no GPU)\n";
    return;
  }
  const Work work;  // no emulation: the work's size does not matter
  const c10::Device gpu(c10::DeviceType::CUDA, 0);
  WallCompute dev(std::nullopt, gpu);
  at::Tensor m = at::randn({2048, 2048}).to(gpu);
  dev.run(work, {}, [&] { m = at::mm(m, m).div_(2048.0); });  // the first product sets cuBLAS up
  const Seconds small = dev.run(work, {}, [&] { m = at::mm(m, m).div_(2048.0); });
  const Seconds large = dev.run(work, {}, [&] {
    for (int i = 0; i < 20; ++i) m = at::mm(m, m).div_(2048.0);
  });
  INFO("one product " << small << " s, twenty " << large << " s");
  REQUIRE(std::isfinite(small));
  CHECK(small > 0);
  CHECK(large > 5 * small);  // the kernels' time, not a constant: 20 products take longer than 1
}

TEST_CASE("a real run on a GPU records its spans' kernel time and each node's GPU memory",
          "[device][gpu]") {
  if (visible_gpus() == 0) {
    std::cout << "SKIPPED: no GPU visible (the LibTorch built against has no CUDA, or the machine "
                 "no GPU)\n";
    return;
  }
  const fs::path d = test::fresh_dir("rv-device", "gpu-run");
  std::ofstream(d / "s.toml") << R"(name = "gpu-run"
seed = 5
[model]
kind = "mlp"
hidden = [256, 256]
head = "linear"
[data]
kind = "synthetic"
side = 16
classes = 4
batch_size = 32
[training]
steps = 12
[[devices]]
count = 2
)";
  const test::Result r = test::ravnest(
      {"real", "s.toml", "--set", "real.device=\"cuda\"", "--run-dir", "run", "--progress", "off"},
      d);
  INFO(r.err);
  REQUIRE(r.status == 0);
  const nlohmann::json summary = nlohmann::json::parse(std::ifstream(d / "run" / "summary.json"));
  for (const auto& n : summary["per_node"])
    CHECK(n["measured_device_peak_bytes"].get<int64_t>() > 0);
  std::ifstream csv(d / "run" / "metrics.csv");
  const std::vector<Event> events = parse_events_csv(csv, "metrics.csv");
  int timed = 0, forwards = 0;
  for (const Event& e : events) {
    if (e.kind != EventKind::kForward) continue;
    ++forwards;
    if (std::isfinite(e.device) && e.device > 0 && e.device <= e.end - e.start + 1e-3) ++timed;
  }
  CHECK(forwards > 0);
  CHECK(timed == forwards);  // every forward span carries its kernels' time, within the span
  fs::remove_all(d);
}
