// Planner benchmark: how good and how fast the cluster-formation methods are.
//
//   quality  ga's predicted throughput against the exhaustive optimum on seeded random pools of
//            4..12 nodes (speeds up to 10x apart, RAM 4-32 GB, up 10-100 Mbps, down 50-500 Mbps,
//            latency 5-50 ms): min and mean ratio, how many within 1%.
//   compare  ga against ravnest-ga (the reference's fitness) and greedy on heterogeneous pools of
//            16..1000 nodes (speeds 25x apart): predicted throughput ratios; ravnest-ga may produce
//            a cluster that cannot hold the model, which is reported as such.
//   scale    wall time and peak resident memory (getrusage) to plan 100..10000 nodes with ga and
//            greedy, each run in a fresh process (this executable again, with --scale-one).
//
//   bench_planner [--part all|quality|compare|scale] [--model cnn|mlp] [--set KEY=VALUE]...
//                 [--pools 50] [--seed 1] [--compare-sizes 16,64,256,1000]
//                 [--scale-sizes 100,1000,10000] [--network lv08|ideal] [--show] [--out FILE]
// Predictions are the planner's cost model (planner/cost.h). Prints figures; asserts nothing.
#include <sys/resource.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <sstream>

#include "bench/bench_common.h"
#include "core/data/dataset.h"
#include "core/error.h"
#include "core/model/model.h"
#include "core/scenario/scenario.h"
#include "planner/planner.h"

using namespace rv;
using nlohmann::json;

namespace {

// The models (--model): cnn is the default, a 13-layer CNN (three conv-relu-pool blocks of 128,
// 256 and 512 channels, a 1024-wide head; 77 M parameters) on 96x96 images in micro-batches of
// 256: its activations (GBs per micro-batch in flight) make memory bind on the smaller nodes and
// its compute (2.3 Tflop, 0.5-5 s per micro-batch) lets pipelines and several clusters pay for
// their transfers; with averaging every 50 updates one fast node alone still often wins, so
// bench/run.sh also runs --set training.average_every=500. mlp is a 12-layer MLP (0.33 M
// parameters) on 28x28 inputs, micro-batches of 64: it fits any node many times over and
// computes in microseconds, so one fast node alone is the best plan of any small pool.
std::string base_scenario(const std::string& model, const std::string& network) {
  const std::string m =
      model == "mlp"
          ? "[model]\nhead = \"linear\"\nkind = \"mlp\"\nhidden = [256, 256, 128, 128, 64]\n"
            "[data]\nkind = \"synthetic\"\nside = 28\nbatch_size = 64\n"
          : "[model]\nhead = \"linear\"\nkind = \"cnn\"\nchannels = [128, 256, 512]\nbatch_norm = "
            "false\nhidden = [1024]\n"
            "[data]\nkind = \"synthetic\"\nside = 96\nbatch_size = 256\n";
  return "name = \"bench-planner\"\n" + m + "[network]\nmodel = \"" + network + "\"\n" +
         "[[devices]]\nname = \"placeholder\"\n";
}

struct PoolShape {
  double min_tflops, max_tflops;
};

double log_uniform(std::mt19937_64& rng, double lo, double hi) {
  std::uniform_real_distribution<double> u(std::log(lo), std::log(hi));
  return std::exp(u(rng));
}

double uniform(std::mt19937_64& rng, double lo, double hi) {
  return std::uniform_real_distribution<double>(lo, hi)(rng);
}

// `n` random nodes, each its own device group.
std::vector<DeviceGroup> random_pool(std::mt19937_64& rng, int n, PoolShape shape) {
  std::vector<DeviceGroup> pool;
  pool.reserve(n);
  for (int i = 0; i < n; ++i) {
    DeviceGroup g;
    g.name = "n" + std::to_string(i);
    g.count = 1;
    g.tflops = log_uniform(rng, shape.min_tflops, shape.max_tflops);
    g.ram_gb = std::round(uniform(rng, 4, 32));
    g.up_mbps = std::round(uniform(rng, 10, 100));
    g.down_mbps = std::round(uniform(rng, 50, 500));
    g.latency_ms = std::round(uniform(rng, 5, 50));
    pool.push_back(g);
  }
  return pool;
}

struct Setup {
  Scenario scenario;
  ModelDesc model;
};

std::string g_model = "cnn";           // --model
std::vector<std::string> g_overrides;  // --set

Setup setup(const std::string& network) {
  Setup s;
  s.scenario = parse_scenario(base_scenario(g_model, network), "bench_planner", g_overrides);
  s.model = build_model(s.scenario);
  return s;
}

bool g_show = false;  // --show: print every plan

struct Outcome {
  bool ok = false;
  double throughput = 0;
  int clusters = 0;
  int used_nodes = 0;
  double wall_s = 0;
  std::string error;
};

Outcome plan_with(Scenario s, const ModelDesc& model, const std::string& method) {
  s.planner.method = *choice_of<PlannerMethod>(method);
  Outcome o;
  const double t0 = bench::wall_now();
  try {
    Plan p = make_plan(s, model);
    if (g_show) std::cerr << method << ": " << to_json(p).dump() << "\n";
    o.ok = true;
    o.throughput = p.throughput;
    o.clusters = static_cast<int>(p.clusters.size());
    for (const auto& c : p.clusters) o.used_nodes += static_cast<int>(c.stages.size());
  } catch (const ScenarioError& e) {
    o.error = e.what();
  }
  o.wall_s = bench::wall_now() - t0;
  return o;
}

json quality(const std::string& network, int pools, uint64_t seed) {
  Setup base = setup(network);
  std::mt19937_64 rng(seed);
  json rows = json::array();
  double min_ratio = 1e300, sum = 0, ex_wall = 0, ex_wall_max = 0, ga_wall = 0;
  int within = 0, counted = 0, ga_better = 0;
  for (int i = 0; i < pools; ++i) {
    const int n = 4 + static_cast<int>(rng() % 9);  // 4..12
    Scenario s = base.scenario;
    s.seed = seed * 1000 + i;
    s.devices = random_pool(rng, n, {0.5, 5.0});
    Outcome ex = plan_with(s, base.model, "exhaustive");
    Outcome ga = plan_with(s, base.model, "ga");
    json row = {{"nodes", n},
                {"exhaustive", ex.throughput},
                {"ga", ga.throughput},
                {"exhaustive_clusters", ex.clusters},
                {"ga_clusters", ga.clusters},
                {"exhaustive_used_nodes", ex.used_nodes},
                {"ga_used_nodes", ga.used_nodes},
                {"exhaustive_wall_s", ex.wall_s},
                {"ga_wall_s", ga.wall_s}};
    if (ex.ok && ga.ok) {
      const double r = ga.throughput / ex.throughput;
      row["ratio"] = r;
      min_ratio = std::min(min_ratio, r);
      sum += r;
      ++counted;
      within += r >= 0.99;
      ga_better += r > 1 + 1e-12;
    } else {
      row["error"] = ex.ok ? ga.error : ex.error;
    }
    ex_wall += ex.wall_s;
    ex_wall_max = std::max(ex_wall_max, ex.wall_s);
    ga_wall += ga.wall_s;
    std::fprintf(stderr,
                 "quality %2d/%d: %2d nodes  ga/exhaustive %.4f  exhaustive %d clusters on %d "
                 "nodes (%.2f s), "
                 "ga %d on %d (%.2f s)\n",
                 i + 1, pools, n, ga.ok && ex.ok ? ga.throughput / ex.throughput : 0.0, ex.clusters,
                 ex.used_nodes, ex.wall_s, ga.clusters, ga.used_nodes, ga.wall_s);
    rows.push_back(row);
  }
  return {{"pools", pools},
          {"compared", counted},
          {"ratio_min", counted ? min_ratio : 0.0},
          {"ratio_mean", counted ? sum / counted : 0.0},
          {"within_1pct", within},
          {"ga_above_exhaustive", ga_better},
          {"exhaustive_wall_s_mean", ex_wall / pools},
          {"exhaustive_wall_s_max", ex_wall_max},
          {"ga_wall_s_mean", ga_wall / pools},
          {"runs", rows}};
}

int g_simulate_up_to = 64;  // --simulate-up-to: simulate each method's plan on pools this small

// Simulated samples per second of `method`'s plan for `s` (timing mode, three averaging periods),
// in a child `ravnest sim` process (one SimGrid engine per process); NaN if it fails.
double simulate_plan(Scenario s, const std::string& method) {
  s.sim.mode = SimMode::kTiming;
  s.planner.method = *choice_of<PlannerMethod>(method);
  s.training.steps = 3 * s.training.average_every;
  const std::string dir = "/tmp/bench_planner_" + std::to_string(getpid());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/s.toml") << to_toml(s);
  const std::string cmd = std::string(RV_BINARY_DIR) + "/ravnest sim " + dir +
                          "/s.toml --progress off --run-dir " + dir + "/run > /dev/null 2>&1";
  double x = std::nan("");
  if (std::system(cmd.c_str()) == 0) {
    std::ifstream in(dir + "/run/summary.json");
    x = json::parse(in)["samples_per_s"].get<double>();
  }
  std::filesystem::remove_all(dir);
  return x;
}

json compare(const std::string& network, const std::vector<int>& sizes, uint64_t seed) {
  Setup base = setup(network);
  json rows = json::array();
  for (int n : sizes) {
    std::mt19937_64 rng(seed * 7919 + n);
    Scenario s = base.scenario;
    s.seed = seed;
    s.devices = random_pool(rng, n, {0.2, 5.0});
    json row = {{"nodes", n}};
    Outcome ga = plan_with(s, base.model, "ga");
    Outcome greedy = plan_with(s, base.model, "greedy");
    Outcome rv = plan_with(s, base.model, "ravnest-ga");
    auto put = [&](const std::string& name, const Outcome& o) {
      row[name] = o.ok ? json{{"throughput", o.throughput},
                              {"clusters", o.clusters},
                              {"used_nodes", o.used_nodes},
                              {"wall_s", o.wall_s}}
                       : json{{"infeasible", o.error}, {"wall_s", o.wall_s}};
    };
    put("ga", ga);
    put("greedy", greedy);
    put("ravnest_ga", rv);
    if (n <= g_simulate_up_to) {
      for (auto [name, o] :
           {std::pair{"ga", &ga}, std::pair{"greedy", &greedy}, std::pair{"ravnest-ga", &rv}})
        if (o->ok)
          row[name == std::string("ravnest-ga") ? "ravnest_ga" : name]["simulated_samples_per_s"] =
              simulate_plan(s, name);
      if (ga.ok && greedy.ok)
        row["simulated_ga_over_greedy"] = row["ga"]["simulated_samples_per_s"].get<double>() /
                                          row["greedy"]["simulated_samples_per_s"].get<double>();
    }
    if (ga.ok && greedy.ok) row["ga_over_greedy"] = ga.throughput / greedy.throughput;
    if (ga.ok && rv.ok) row["ga_over_ravnest_ga"] = ga.throughput / rv.throughput;
    std::fprintf(stderr,
                 "compare %4d nodes: ga %.1f samples/s (%d clusters)  greedy %.1f  ravnest-ga %s\n",
                 n, ga.throughput, ga.clusters, greedy.throughput,
                 rv.ok ? std::to_string(rv.throughput).c_str() : "infeasible");
    rows.push_back(row);
  }
  return rows;
}

double peak_rss_mb() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_maxrss / 1024.0;  // KiB on Linux
}

// One planning run in this process (a fresh one: --scale-one).
json scale_one(const std::string& network, int n, const std::string& method, uint64_t seed) {
  Setup base = setup(network);
  std::mt19937_64 rng(seed * 104729 + n);
  Scenario s = base.scenario;
  s.seed = seed;
  s.devices = random_pool(rng, n, {0.2, 5.0});
  const double before = peak_rss_mb();
  Outcome o = plan_with(s, base.model, method);
  return {{"nodes", n},
          {"method", method},
          {"wall_s", o.wall_s},
          {"ok", o.ok},
          {"throughput", o.throughput},
          {"clusters", o.clusters},
          {"rss_before_mb", before},
          {"peak_rss_mb", peak_rss_mb()}};
}

std::string self_path() {
  char buf[4096];
  const ssize_t len = readlink("/proc/self/exe", buf, sizeof buf - 1);
  return len > 0 ? std::string(buf, len) : std::string("bench_planner");
}

json scale(const std::string& network, const std::vector<int>& sizes, uint64_t seed) {
  const std::string self = self_path();
  json rows = json::array();
  for (int n : sizes)
    for (const std::string method : {"greedy", "ga"}) {
      std::ostringstream cmd;
      cmd << "'" << self << "' --scale-one " << n << " --method " << method << " --seed " << seed
          << " --network " << network << " --model " << g_model;
      for (const auto& o : g_overrides) cmd << " --set '" << o << "'";
      std::unique_ptr<FILE, int (*)(FILE*)> pipe(popen(cmd.str().c_str(), "r"), pclose);
      std::string text;
      char buf[4096];
      while (pipe && std::fgets(buf, sizeof buf, pipe.get())) text += buf;
      json row;
      try {
        row = json::parse(text);
      } catch (const std::exception&) {
        row = {{"nodes", n}, {"method", method}, {"error", "the child process printed no figures"}};
      }
      std::fprintf(stderr,
                   "scale %5d nodes %-6s: %.2f s, peak RSS %.0f MB (%.0f MB before planning)\n", n,
                   method.c_str(), row.value("wall_s", 0.0), row.value("peak_rss_mb", 0.0),
                   row.value("rss_before_mb", 0.0));
      rows.push_back(row);
    }
  return rows;
}

}  // namespace

int main(int argc, char** argv) {
  std::string part = "all", out, network = "lv08", method = "ga";
  int pools = 50, scale_one_n = 0;
  uint64_t seed = 1;
  std::vector<int> compare_sizes{16, 64, 256, 1000}, scale_sizes{100, 1000, 10000};
  CLI::App app{"planner quality and speed"};
  app.add_option("--part", part, "all | quality | compare | scale")
      ->check(CLI::IsMember({"all", "quality", "compare", "scale"}));
  app.add_option("--pools", pools, "random pools for the quality part");
  app.add_option("--seed", seed);
  app.add_option("--compare-sizes", compare_sizes)->delimiter(',');
  app.add_option("--simulate-up-to", g_simulate_up_to,
                 "compare: simulate the plans of pools up to this size");
  app.add_option("--scale-sizes", scale_sizes)->delimiter(',');
  app.add_option("--network", network, "lv08 | ideal")->check(CLI::IsMember({"lv08", "ideal"}));
  app.add_option("--scale-one", scale_one_n,
                 "internal: plan this many nodes once and print the figures");
  app.add_option("--method", method, "internal, with --scale-one");
  app.add_option("--model", g_model, "cnn | mlp (see the file comment)")
      ->check(CLI::IsMember({"cnn", "mlp"}));
  app.add_option("--set", g_overrides, "scenario overrides, e.g. --set training.average_every=200");
  app.add_flag("--show", g_show, "print every plan (JSON) on stderr");
  app.add_option("--out", out);
  CLI11_PARSE(app, argc, argv);

  if (scale_one_n > 0) {
    std::cout << scale_one(network, scale_one_n, method, seed).dump() << std::endl;
    return 0;
  }
  Setup s = setup(network);
  json j = {{"benchmark", "planner"},
            {"network", network},
            {"seed", seed},
            {"model",
             {{"preset", g_model},
              {"overrides", g_overrides},
              {"layers", s.model.layer_count()},
              {"parameters", s.model.total_params()}}}};
  if (part == "all" || part == "quality") j["quality"] = quality(network, pools, seed);
  if (part == "all" || part == "compare") j["compare"] = compare(network, compare_sizes, seed);
  if (part == "all" || part == "scale") j["scale"] = scale(network, scale_sizes, seed);
  bench::emit(j, out);
}
