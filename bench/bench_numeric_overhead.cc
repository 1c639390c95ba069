// Numeric mode's overhead: a scenario simulated with real maths against the same LibTorch maths
// (forward, loss, backward and optimizer step of the whole model on the same micro-batches) in one
// plain loop, one intra-op thread on both sides. The two alternate, `--repeats` times each; the
// figures are the ratio of their medians and the median of each run's own ratio (paired: robust
// to a host whose speed drifts between runs).
//
// The pipeline itself asks for no more flops than the plain loop: the gradient a stage sends back
// is the one the whole model's backward computes at the same layer anyway. It does hold several
// micro-batches in flight (training.max_in_flight), each with its activations and, stashed, its
// weights: a larger working set, which on a wide model costs the maths itself 10-15% (caches).
// So the plain loop runs twice: as written (one micro-batch at a time) and with as many in flight
// as the pipeline, the same maths on the same memory. The second ratio is the simulator's own
// cost: its spans and messages, the metrics, and the per-stage bookkeeping.
//
//   bench_numeric_overhead [--scenario FILE]... [--set key=value]... [--steps N] [--repeats 5]
//                          [--out FILE]
// Without --scenario, three cases: the quickstart (an MLP, SGD, 2 stages; 1,500 micro-batches),
// digits-cnn with 96 and 192 channels (a CNN with BatchNorm, dropout and Adam, 3 stages, 12 ms per
// micro-batch on a 2-core AMD EPYC host: the plain loop's figure is in the output; 400), and
// digits-cnn as shipped (under 5 ms per micro-batch, where the
// fixed cost of each simulated span and message shows; 1,500).
#include <CLI/CLI.hpp>
#include <algorithm>
#include <vector>

#include "bench/bench_common.h"
#include "bench/plain_training.h"
#include "core/data/dataset.h"
#include "core/error.h"
#include "core/memory/allocator.h"
#include "core/model/model.h"
#include "core/scenario/scenario.h"
#include "exec/compute_threads.h"
#include "planner/planner.h"
#include "sim/sim_runner.h"

using namespace rv;

namespace {

using bench::median;

nlohmann::json measure(const std::string& path, const std::vector<std::string>& sets, int64_t steps,
                       int repeats) {
  std::vector<std::string> overrides = sets;
  overrides.push_back("training.steps=" + std::to_string(steps));
  overrides.push_back("training.eval_every=0");
  Scenario s = load_scenario(path, overrides);
  ModelDesc model = build_model(s);
  Plan plan = make_plan(s, model);
  Dataset data = load_dataset(s.data, s.seed);
  set_compute_threads(1);

  // Each side runs in its own forked child (SimGrid cannot start twice in one process), so both
  // start from the same process state.
  // The pipeline's micro-batches in flight: the plain loop is run with one (the model's maths
  // alone) and with as many as the pipeline holds (the same maths with the same activations and
  // weight versions alive, which the schedule, not the simulator, costs).
  const int64_t in_flight = s.training.max_in_flight > 0
                                ? s.training.max_in_flight
                                : static_cast<int64_t>(plan.clusters.at(0).stages.size());
  std::vector<double> plain, plain_k, sim, ratios, ratios_k;
  for (int r = 0; r < repeats; ++r) {
    // The plain loop: same model, same samples, same optimizer, one process, no pipeline; then the
    // final evaluation that a run makes.
    auto plain_loop = [&](int64_t k) {
      return bench::in_child([&] {
        const double t0 = bench::wall_now();
        StageModule whole = bench::train_plain_in_flight(s, model, data, steps, k);
        bench::evaluate_plain(s, whole, data);
        return bench::wall_now() - t0;
      });
    };
    plain.push_back(plain_loop(1));
    plain_k.push_back(plain_loop(in_flight));
    sim.push_back(bench::in_child([&] {
      RunSpec spec{&s, &plan, &model, &data};
      const double t0 = bench::wall_now();
      run_simulation(spec);
      return bench::wall_now() - t0;
    }));
    RV_CHECK(!std::isnan(plain.back()) && !std::isnan(plain_k.back()) && !std::isnan(sim.back()),
             s.name + ": a run failed");
    ratios.push_back(sim.back() / plain.back());
    ratios_k.push_back(sim.back() / plain_k.back());
    std::cerr << s.name << " run " << r + 1 << "/" << repeats << ": plain " << plain.back()
              << " s, plain with " << in_flight << " in flight " << plain_k.back() << " s, sim "
              << sim.back() << " s\n";
  }
  const double ratio = median(sim) / median(plain);
  const double ratio_k = median(sim) / median(plain_k);
  // Each run's three sides ran within seconds of each other; the median of the runs' own ratios is
  // the figure that a host whose speed drifts between runs moves least.
  const double paired = median(ratios);
  const double paired_k = median(ratios_k);
  std::cerr << s.name << ": overhead " << ratio << " over the plain loop, " << ratio_k
            << " over it with " << in_flight
            << " micro-batches in flight (medians of the runs' own ratios: " << paired << ", "
            << paired_k << ")\n";
  return {{"scenario", s.name},
          {"micro_batches", steps},
          {"clusters", plan.clusters.size()},
          {"stages", plan.clusters.at(0).stages.size()},
          {"repeats", repeats},
          {"plain_loop_wall_s", plain},
          {"sim_numeric_wall_s", sim},
          {"plain_ms_per_micro_batch", 1e3 * median(plain) / static_cast<double>(steps)},
          {"overhead_ratio", ratio},
          {"overhead_ratio_paired", paired},
          {"overhead_ratio_in_flight_paired", paired_k},
          {"overhead_ratio_min", *std::min_element(ratios.begin(), ratios.end())},
          {"overhead_ratio_max", *std::max_element(ratios.begin(), ratios.end())},
          {"in_flight", in_flight},
          {"plain_in_flight_wall_s", plain_k},
          {"overhead_ratio_in_flight", ratio_k},
          {"overhead_ratio_in_flight_min", *std::min_element(ratios_k.begin(), ratios_k.end())},
          {"overhead_ratio_in_flight_max", *std::max_element(ratios_k.begin(), ratios_k.end())}};
}

}  // namespace

int main(int argc, char** argv) try {
  rv::configure_allocator();  // as ravnest does (core/memory/allocator.h)
  std::vector<std::string> paths, sets;
  std::string out;
  int64_t steps = 0;
  int repeats = 5;
  CLI::App app{"numeric-mode overhead"};
  app.add_option("--scenario", paths, "scenario files (default: quickstart and digits-cnn)");
  app.add_option("--set", sets, "key=value overrides for every scenario");
  app.add_option("--steps", steps, "micro-batches per run (default: per case)")
      ->check(CLI::PositiveNumber);
  app.add_option("--repeats", repeats, "runs of each side; the median is reported")
      ->check(CLI::PositiveNumber);
  app.add_option("--out", out);
  CLI11_PARSE(app, argc, argv);
  struct Case {
    std::string path;
    std::vector<std::string> sets;
    int64_t steps;
  };
  std::vector<Case> cases;
  const std::string dir = std::string(RV_SOURCE_DIR) + "/scenarios/";
  if (paths.empty()) {
    cases = {{dir + "quickstart.toml", {}, 1500},
             {dir + "digits-cnn.toml", {"model.channels=[96, 192]", "name=digits-cnn-wide"}, 400},
             {dir + "digits-cnn.toml", {}, 1500}};
    for (auto& c : cases) c.sets.insert(c.sets.end(), sets.begin(), sets.end());
  } else {
    for (const auto& p : paths) cases.push_back({p, sets, 1500});
  }
  nlohmann::json figures = nlohmann::json::array();
  for (const auto& c : cases)
    figures.push_back(measure(c.path, c.sets, steps > 0 ? steps : c.steps, repeats));
  bench::emit({{"benchmark", "numeric_overhead"}, {"intra_op_threads", 1}, {"cases", figures}},
              out);
} catch (const std::exception& e) {
  return bench::failed(e);
}
