// Numeric mode's overhead: the quickstart scenario simulated with real maths against the same
// LibTorch maths (forward, backward, SGD step of the whole model on the same micro-batches) in one
// plain loop. Reports both wall times and their ratio.
//
//   bench_numeric_overhead [--scenario scenarios/quickstart.toml] [--steps 1500] [--out FILE]
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <CLI/CLI.hpp>
#include <c10/core/GradMode.h>
#include <torch/csrc/autograd/autograd.h>

#include "bench/bench_common.h"
#include "bench/plain_training.h"
#include "core/compute_threads.h"
#include "core/data/dataset.h"
#include "core/model/model.h"
#include "core/model/optimizer.h"
#include "core/scenario/scenario.h"
#include "planner/planner.h"
#include "sim/sim_runner.h"

using namespace rv;

int main(int argc, char** argv) {
  std::string path = std::string(RV_SOURCE_DIR) + "/scenarios/quickstart.toml", out;
  int64_t steps = 1500;
  CLI::App app{"numeric-mode overhead"};
  app.add_option("--scenario", path);
  app.add_option("--steps", steps);
  app.add_option("--out", out);
  CLI11_PARSE(app, argc, argv);

  Scenario s = load_scenario(path, {"training.steps=" + std::to_string(steps), "training.eval_every=0"});
  ModelDesc model = build_model(s);
  Plan plan = make_plan(s, model);
  Dataset data = load_dataset(s.data, s.seed);
  set_compute_threads(1);

  // The plain loop: same model, same samples, same optimizer, one process, no pipeline.
  double t0 = bench::wall_now();
  bench::train_plain(s, model, data, steps);
  const double plain = bench::wall_now() - t0;

  RunSpec spec{&s, &plan, &model, &data};
  t0 = bench::wall_now();
  SimResult r = run_simulation(spec);
  const double sim = bench::wall_now() - t0;
  nlohmann::json j = {{"benchmark", "numeric_overhead"},
                      {"scenario", s.name},
                      {"micro_batches", steps},
                      {"stages", plan.clusters[0].stages.size()},
                      {"plain_loop_wall_s", plain},
                      {"sim_numeric_wall_s", sim},
                      {"overhead_ratio", sim / plain},
                      {"events", r.events.size()}};
  bench::emit(j, out);
}
