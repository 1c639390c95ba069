// The real executor on scenarios/digits-cnn.toml (the Ravnest reference's own CNN example: three
// node processes on this machine over c10d/Gloo) against the same model trained in one plain
// LibTorch process: seconds per epoch, accuracy after E epochs, each node's peak resident memory,
// and CPU used beyond the compute (a node that polls while it waits would burn a core).
//
//   bench_real_digits [--epochs 10] [--out FILE]
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <c10/core/GradMode.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <torch/csrc/autograd/autograd.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <filesystem>
#include <fstream>

#include "bench/bench_common.h"
#include "bench/plain_training.h"
#include "core/data/dataset.h"
#include "core/memory/allocator.h"
#include "core/model/model.h"
#include "core/model/optimizer.h"
#include "core/scenario/scenario.h"
#include "exec/compute_threads.h"

using namespace rv;
namespace fs = std::filesystem;

namespace {

double cpu_of_children() {
  rusage u{};
  getrusage(RUSAGE_CHILDREN, &u);
  return u.ru_utime.tv_sec + u.ru_utime.tv_usec * 1e-6 + u.ru_stime.tv_sec +
         u.ru_stime.tv_usec * 1e-6;
}

}  // namespace

int main(int argc, char** argv) {
  rv::configure_allocator();  // as ravnest does (core/memory/allocator.h)
  int epochs = 10;
  std::string out;
  const std::string scenario_path = std::string(RV_SOURCE_DIR) + "/scenarios/digits-cnn.toml";
  CLI::App app{"real executor vs one plain process on digits-cnn"};
  app.add_option("--epochs", epochs);
  app.add_option("--out", out);
  CLI11_PARSE(app, argc, argv);

  Scenario s = load_scenario(scenario_path);
  Dataset data = load_dataset(s.data, s.seed);
  const int64_t per_epoch = data.train_size() / s.data.batch_size;
  const int64_t steps = per_epoch * epochs;
  s.training.steps = steps;

  // 1. The real executor: three processes.
  fs::path run_dir = fs::temp_directory_path() / ("bench_real_digits_" + std::to_string(getpid()));
  fs::remove_all(run_dir);
  const double cpu0 = cpu_of_children();
  double t0 = bench::wall_now();
  int rc = bench::run_program({std::string(RV_BINARY_DIR) + "/ravnest", "real", scenario_path,
                               "--set", "training.steps=" + std::to_string(steps), "--set",
                               "training.eval_every=0", "--run-dir", run_dir.string()});
  const double real_wall = bench::wall_now() - t0;
  const double real_cpu = cpu_of_children() - cpu0;
  if (rc != 0) {
    std::cerr << "ravnest real failed with status " << rc << "\n";
    return 1;
  }
  nlohmann::json summary = nlohmann::json::parse(std::ifstream(run_dir / "summary.json"));
  double busy = 0, wait = 0;
  nlohmann::json nodes = nlohmann::json::array();
  for (const auto& n : summary["per_node"]) {
    busy += n["busy_s"].get<double>();
    wait += n["wait_s"].get<double>();
    nodes.push_back({{"node", n["node"]},
                     {"peak_rss_mb", n["measured_peak_memory_bytes"].get<double>() / 1e6},
                     {"busy_s", n["busy_s"]},
                     {"wait_s", n["wait_s"]}});
  }

  // 2. One plain process: the same model, optimizer and samples, no pipeline.
  set_compute_threads(1);
  ModelDesc model = build_model(s);
  t0 = bench::wall_now();
  StageModule whole = bench::train_plain(s, model, data, steps);
  const double plain_wall = bench::wall_now() - t0;
  const double plain_acc = bench::evaluate_plain(s, whole, data);

  const double real_epoch = summary["time_s"].get<double>() / epochs;
  nlohmann::json j = {{"benchmark", "real_digits"},
                      {"epochs", epochs},
                      {"micro_batches", steps},
                      {"real_training_s_per_epoch", real_epoch},
                      {"real_process_wall_s", real_wall},
                      {"plain_s_per_epoch", plain_wall / epochs},
                      {"ratio_real_to_plain", real_epoch / (plain_wall / epochs)},
                      {"real_test_accuracy", summary["final"]["test_accuracy"]},
                      {"plain_test_accuracy", plain_acc},
                      {"nodes", nodes},
                      {"cpu_total_s", real_cpu},
                      {"busy_total_s", busy},
                      {"wait_total_s", wait},
                      {"cpu_beyond_compute_s", real_cpu - busy}};
  bench::emit(j, out);
  fs::remove_all(run_dir);
}
