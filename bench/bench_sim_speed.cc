// Simulator speed in timing mode: simulated micro-batch events (forward and backward passes) per
// wall second, for one pipeline of N nodes over a model of about N linear layers of width W
// (W = 1448 and N = 1000 is a 1.05-billion-parameter model on 1,000 nodes).
//
//   bench_sim_speed --nodes 1000 --steps 20 [--width 1448] [--out FILE]
// One simulation per process (SimGrid allows one engine per process): bench/run.sh loops over N.
#include <CLI/CLI.hpp>

#include "bench/bench_common.h"
#include "core/data/dataset.h"
#include "core/model/model.h"
#include "core/scenario/scenario.h"
#include "planner/planner.h"
#include "sim/sim_runner.h"

using namespace rv;

int main(int argc, char** argv) {
  int nodes = 10, steps = 20, width = 1448;
  std::string out;
  CLI::App app{"simulator speed in timing mode"};
  app.add_option("--nodes", nodes);
  app.add_option("--steps", steps);
  app.add_option("--width", width);
  app.add_option("--out", out);
  CLI11_PARSE(app, argc, argv);

  std::string hidden;
  for (int i = 0; i < nodes; ++i) hidden += (i ? ", " : "") + std::to_string(width);
  const std::string text = "name = \"sim-speed\"\n[model]\nhead = \"linear\"\nkind = \"mlp\"\nhidden = [" + hidden +
                           "]\n[data]\nkind = \"synthetic\"\nside = 32\nbatch_size = 32\n"
                           "[training]\nmax_in_flight = 16\nsteps = " + std::to_string(steps) +
                           "\n[sim]\nmode = \"timing\"\n[[devices]]\nname = \"slow\"\ncount = " +
                           std::to_string(nodes / 2) +
                           "\ntflops = 2\nram_gb = 8\nup_mbps = 20\ndown_mbps = 100\nlatency_ms = 30\n"
                           "[[devices]]\nname = \"fast\"\ncount = " + std::to_string(nodes - nodes / 2) +
                           "\ntflops = 20\nram_gb = 16\nup_mbps = 100\ndown_mbps = 500\nlatency_ms = 10\n";
  Scenario s = parse_scenario(text, "bench_sim_speed");
  double t0 = bench::wall_now();
  ModelDesc model = build_model(s);
  Plan plan = make_plan(s, model);
  double t_plan = bench::wall_now() - t0;
  RunSpec spec{&s, &plan, &model, nullptr};
  t0 = bench::wall_now();
  SimResult r = run_simulation(spec);
  const double wall = bench::wall_now() - t0;
  int64_t compute_events = 0, messages = 0;
  for (const auto& e : r.events) {
    compute_events += e.kind == EventKind::kForward || e.kind == EventKind::kBackward;
    messages += e.kind == EventKind::kSend;
  }
  nlohmann::json j = {{"benchmark", "sim_speed"},
                      {"nodes", nodes},
                      {"stages", plan.clusters[0].stages.size()},
                      {"parameters", model.total_params()},
                      {"micro_batches", steps},
                      {"simulated_s", r.simulated_time},
                      {"wall_s", wall},
                      {"plan_wall_s", t_plan},
                      {"micro_batch_events", compute_events},
                      {"messages", messages},
                      {"events_per_wall_s", compute_events / wall},
                      {"messages_per_wall_s", messages / wall}};
  bench::emit(j, out);
}
