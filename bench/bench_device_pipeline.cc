// A pipeline of stages sharing one GPU against the same model trained plainly on that GPU:
// `ravnest real SCENARIO` with real.device = DEVICE (one process per node, each keeping its stage
// on the device; by default scenarios/gpt-pipeline.toml, a 4-stage GPT) against one process's
// plain training loop (bench/plain_training.h) of the same model, optimizer and samples on the
// same device. Prints samples/s of both (over the whole run, and in steady state: the run's
// steady window; for the plain loop, a second loop over the other half of the micro-batches, on a
// device already warm), their ratio, each node's peak GPU memory (its
// caching allocator's peak allocated bytes; 0 where this LibTorch keeps no such statistics, and
// on the CPU) and peak resident memory, and the plain process's peak GPU memory.
//
//   bench_device_pipeline [--scenario FILE] [--device cuda|cpu] [--steps N] [--out FILE]
//
// With --device cuda and no GPU visible it stops with exit status 2 and a message.
#include <ATen/ATen.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <filesystem>
#include <fstream>

#include "bench/bench_common.h"
#include "bench/plain_training.h"
#include "core/data/dataset.h"
#include "core/memory/allocator.h"
#include "core/model/model.h"
#include "core/scenario/scenario.h"
#include "exec/compute_threads.h"
#include "real/compute_device.h"

using namespace rv;
namespace fs = std::filesystem;

int main(int argc, char** argv) try {
  rv::configure_allocator();  // as ravnest does (core/memory/allocator.h)
  std::string scenario_path = std::string(RV_SOURCE_DIR) + "/scenarios/gpt-pipeline.toml";
  std::string device_name = "cuda", out;
  int64_t steps = 0;
  CLI::App app{"a pipeline of stages on one device vs plain training of the same model there"};
  app.add_option("--scenario", scenario_path, "the scenario (one cluster: the pipeline)");
  app.add_option("--device", device_name, "cuda or cpu")->check(CLI::IsMember({"cuda", "cpu"}));
  app.add_option("--steps", steps, "micro-batches (default: the scenario's training.steps)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 40));
  app.add_option("--out", out);
  CLI11_PARSE(app, argc, argv);

  Scenario s = load_scenario(scenario_path);
  if (steps > 0) s.training.steps = steps;
  s.real.device = *choice_of<DeviceChoice>(device_name);
  const c10::Device device = compute_device(s, 0);  // refuses cuda without a GPU (exit status 2)

  // 1. The pipeline: one process per node, each on `device`.
  const fs::path run_dir =
      fs::temp_directory_path() / ("bench_device_pipeline_" + std::to_string(getpid()));
  fs::remove_all(run_dir);
  const double t0 = bench::wall_now();
  const int rc =
      bench::run_program({std::string(RV_BINARY_DIR) + "/ravnest", "real", scenario_path, "--set",
                          "training.steps=" + std::to_string(s.training.steps), "--set",
                          "training.eval_every=0", "--set", "real.device=\"" + device_name + "\"",
                          "--run-dir", run_dir.string(), "--progress", "off"});
  const double real_wall = bench::wall_now() - t0;
  if (rc != 0) {
    std::cerr << "ravnest real failed with status " << rc << "\n";
    return 1;
  }
  const nlohmann::json summary = nlohmann::json::parse(std::ifstream(run_dir / "summary.json"));
  nlohmann::json nodes = nlohmann::json::array();
  for (const auto& n : summary["per_node"])
    nodes.push_back({{"node", n["node"]},
                     {"stage", n.value("stage", -1)},
                     {"device_peak_allocated_mb", n.value("measured_device_peak_bytes", 0.0) / 1e6},
                     {"peak_rss_mb", n["measured_peak_memory_bytes"].get<double>() / 1e6},
                     {"busy_fraction", n["busy_fraction"]}});

  // 2. One plain process on the same device: the same model, optimizer and samples.
  set_compute_threads(1);
  const Dataset data = load_dataset(s.data, s.seed);
  const ModelDesc model = build_model(s);
  const int64_t half = s.training.steps / 2;
  const double p0 = bench::wall_now();
  (void)bench::train_plain(s, model, data, half, device);  // returns once the device is done
  const double plain_first = bench::wall_now() - p0;
  const double p1 = bench::wall_now();
  (void)bench::train_plain(s, model, data, s.training.steps - half, device);
  const double plain_second = bench::wall_now() - p1;
  const double batch = static_cast<double>(s.data.batch_size);
  const double plain_sps =
      static_cast<double>(s.training.steps) * batch / (plain_first + plain_second);
  const double plain_steady = static_cast<double>(s.training.steps - half) * batch / plain_second;
  const std::optional<DeviceMemoryPeak> plain_mem = device_memory_peak(device);

  const double real_sps = summary["samples_per_s"].get<double>();
  const double real_steady = summary.value("steady_samples_per_s", 0.0);
  nlohmann::json j = {{"benchmark", "device_pipeline"},
                      {"scenario", s.name},
                      {"device", device.str()},
                      {"nodes", summary["nodes"]},
                      {"micro_batches", s.training.steps},
                      {"batch_size", s.data.batch_size},
                      {"pipeline_samples_per_s", real_sps},
                      {"pipeline_steady_samples_per_s", real_steady},
                      {"pipeline_process_wall_s", real_wall},
                      {"plain_samples_per_s", plain_sps},
                      {"plain_steady_samples_per_s", plain_steady},
                      {"ratio_pipeline_to_plain", real_sps / plain_sps},
                      {"ratio_steady", plain_steady > 0 ? real_steady / plain_steady : 0.0},
                      {"plain_device_peak_allocated_mb",
                       plain_mem ? static_cast<double>(plain_mem->allocated) / 1e6 : 0.0},
                      {"plain_device_peak_reserved_mb",
                       plain_mem ? static_cast<double>(plain_mem->reserved) / 1e6 : 0.0},
                      {"per_node", nodes}};
  bench::emit(j, out);
  fs::remove_all(run_dir);
  return 0;
} catch (const std::exception& e) {
  return bench::failed(e);
}
