#include "cli/commands.h"

#include <fmt/core.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cctype>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <thread>

#include "algo/registry.h"
#include "core/checkpoint/checkpoint.h"
#include "core/data/dataset.h"
#include "core/data/partition.h"
#include "core/error.h"
#include "core/model/cost_model.h"
#include "core/output/live_run.h"
#include "core/output/run_output.h"
#include "core/output/whole_file.h"
#include "core/spawn.h"
#include "exec/dilation.h"
#include "exec/env_assembly.h"
#include "exec/progress.h"
#include "exec/wall_env.h"
#include "loopback/loopback.h"
#include "planner/planner.h"
#include "real/launcher.h"
#if RV_WITH_SIM
#include "sim/sim_runner.h"
#endif

namespace fs = std::filesystem;

namespace rv {

Scenario load_checked(const std::string& path, const std::vector<std::string>& overrides) {
  Scenario s = load_scenario(path, overrides);
  allreduce_of(s);
  resolve_algorithm_keys(s);
  check_algorithm_settings(s);
  check_churn_support(s);
  check_data_partition(s);
  check_checkpoint_support(s);
  check_recovery_support(s);
  return s;
}

Scenario load_for_run(const CommonOptions& o, std::optional<Resume>* resume) {
  if (o.resume.empty()) {
    if (o.scenario.empty()) throw InputError("give a scenario file (or --resume RUN)");
    return load_checked(o.scenario, o.overrides);
  }
  if (!o.scenario.empty() || !o.overrides.empty())
    throw InputError("--resume " + o.resume +
                     " runs that run's own scenario (its scenario.toml): give no scenario "
                     "file and no --set with it");
  const std::string toml = (fs::path(o.resume) / "scenario.toml").string();
  if (!fs::is_regular_file(toml))
    throw InputError("--resume " + o.resume + ": not a run folder (no scenario.toml)");
  Scenario s = load_checked(toml, {});
  // The resumed run is the same experiment, from the same source.
  if (std::string source = resolved_source(toml); !source.empty()) s.source = source;
  if (!s.checkpoint.enabled())
    throw InputError("--resume " + o.resume +
                     ": the run took no checkpoints (checkpoint.every = 0)");
  const std::string dir = checkpoint_dir(s.checkpoint.dir, o.resume);
  std::optional<CheckpointInfo> point = last_checkpoint(dir);
  if (!point) throw InputError("--resume " + o.resume + ": no complete checkpoint in " + dir);
  // Every file it needs, read before any run folder is made (rv::InputError naming a bad one).
  for (int node : point->nodes) read_node_state(*point, node);
  if (fs::exists(events_file(point->folder))) read_log(events_file(point->folder));
  *resume = Resume{o.resume, *point};
  return s;
}

Prepared prepare(Scenario scenario) {
  Prepared p;
  p.scenario = std::move(scenario);
  p.model = build_model(p.scenario);
  p.plan = make_plan(p.scenario, p.model);
  return p;
}

void check_no_churn(const Scenario& s, Executor executor) {
  if (s.churn.enabled(s.devices))
    throw ScenarioError(
        s.where("churn"), "churn",
        "nodes that leave and arrive (churn, devices[].leave_per_hour, devices[].join_at_s) "
        "are played by the simulator only (ravnest sim); the " +
            std::string(name_of(executor)) +
            " executor runs "
            "every node from start to end");
}

void check_faults_target(const Prepared& p) {
  const Scenario& s = p.scenario;
  const int node = s.faults.node;
  if (node < 0 || node >= p.plan.nodes || p.plan.role_of(node).stage >= 0) return;
  if (s.nodes_may_leave()) return;  // a spare may take a stage
  throw ScenarioError(s.where("faults.node"), "faults.node",
                      "node " + std::to_string(node) +
                          " has no stage in the plan (it stays idle): its faults would "
                          "never act");
}

void check_simulable(const Scenario& s, Executor executor) {
  if (executor != Executor::kSim) check_no_churn(s, executor);
  if (executor == Executor::kLoopback && s.checkpoint.enabled())
    throw ScenarioError(
        s.where("checkpoint.every"), "checkpoint.every",
        "checkpoints are taken by ravnest sim and ravnest real; the loopback executor takes none");
  if (executor != Executor::kSim && !s.network.platform.empty())
    throw ScenarioError(s.where("network.platform"), "network.platform",
                        "a SimGrid platform file is for the simulator (ravnest sim); the " +
                            std::string(name_of(executor)) +
                            " executor runs the devices' own links");
  if (allreduce_of(s).executor_collectives)
    throw ScenarioError(s.where("training.allreduce"), "training.allreduce",
                        "\"" + s.training.allreduce +
                            "\" runs on the executor's own collectives, which only "
                            "the real executor has (ravnest real); the " +
                            name_of(executor) + " executor has none");
}

void print_summary(const std::string& path) {
  const nlohmann::json j = read_json_file((fs::path(path) / "summary.json").string());
  std::cout << fmt::format("run folder: {}\n", path);
  std::cout << fmt::format("  {} on {} ({}), {} nodes: time {:.3f} s, {} samples, {:.1f} samples/s",
                           j["algorithm"].get<std::string>(), j["executor"].get<std::string>(),
                           j["mode"].get<std::string>(), j["nodes"].get<int>(),
                           j["time_s"].get<double>(), j["train_samples"].get<int64_t>(),
                           j["samples_per_s"].get<double>());
  const auto& f = j["final"];
  if (!f["test_accuracy"].is_null())
    std::cout << fmt::format(", test accuracy {:.4f}", f["test_accuracy"].get<double>());
  std::cout << "\n";
}

namespace {

Prepared prepare(const CommonOptions& o) { return prepare(load_checked(o.scenario, o.overrides)); }

#if RV_WITH_SIM
// The checkpoint options of a run in this process writing the folder `path`.
SimCheckpointOptions sim_checkpoints(const Scenario& s, const std::string& path,
                                     const std::optional<Resume>& resume, int64_t stop_after) {
  SimCheckpointOptions c;
  c.every = s.checkpoint.every;
  c.dir = checkpoint_dir(s.checkpoint.dir, path);
  if (resume) c.resume = resume->point;
  c.stop_after = stop_after;
  return c;
}
#endif

std::string human_bytes(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (b >= 1024 && u < 4) {
    b /= 1024;
    ++u;
  }
  return fmt::format("{:.1f} {}", b, units[u]);
}

}  // namespace

int cmd_plan(const CommonOptions& o, const std::string& out_json) {
  Prepared p = prepare(o);
  const Scenario& s = p.scenario;
  std::cout << fmt::format(
      "scenario {} ({}): model {} with {} layers, {} parameters; {} nodes; planner {}\n", s.name,
      s.source, p.model.name, p.model.layer_count(), p.model.total_params(), s.node_count(),
      p.plan.method);
  int used = 0;
  for (size_t c = 0; c < p.plan.clusters.size(); ++c) {
    const ClusterPlan& cl = p.plan.clusters[c];
    std::cout << fmt::format("cluster {}: {} stages, {:.3f} ms per micro-batch, {:.1f} samples/s\n",
                             c, cl.stages.size(), cl.period * 1e3, cl.throughput);
    std::cout << fmt::format("  {:>5} {:>5} {:<12} {:>7} {:>7} {:>9} {:>11} {:>11} {:>10}\n",
                             "stage", "node", "device", "tflops", "layers", "params", "memory",
                             "of RAM", "stage ms");
    size_t bottleneck = 0;
    for (size_t k = 0; k < cl.stages.size(); ++k)
      if (cl.stages[k].predicted_time > cl.stages[bottleneck].predicted_time) bottleneck = k;
    for (size_t k = 0; k < cl.stages.size(); ++k) {
      const StagePlan& st = cl.stages[k];
      const DeviceGroup& d = s.device_of(st.node);
      std::cout << fmt::format(
          "  {:>5} {:>5} {:<12} {:>7.3g} {:>3}..{:<3} {:>9} {:>11} {:>10.1f}% {:>10.3f}{}\n", k,
          st.node, d.name, d.tflops, st.layer_begin, st.layer_end - 1,
          p.model.params(st.layer_begin, st.layer_end), human_bytes(st.memory),
          100.0 * st.memory / d.ram_bytes(), st.predicted_time * 1e3,
          k == bottleneck ? "  <- bottleneck" : "");
      ++used;
    }
  }
  if (p.plan.clusters.size() > 1)
    std::cout << fmt::format(
        "averaging ({}): {} rings, {:.3f} s per round, {}\n", s.training.allreduce,
        allreduce_of(s).topology == AllreduceTopology::kSingleRing ? 1 : p.plan.rings.size(),
        p.plan.averaging_time,
        algorithm_of(s).traits.exchange == Exchange::kParameters
            ? fmt::format("every {} updates", s.training.average_every)
            : std::string("of the gradients, every step"));
  std::cout << fmt::format("predicted: {:.1f} samples/s overall; {} of {} nodes used\n",
                           p.plan.throughput, used, s.node_count());
  std::cout << "why: " << p.plan.reason << "\n";
  for (const std::string& a : p.plan.approximations) std::cout << "approximation: " << a << "\n";
  if (p.plan.search_timed_out)
    std::cout << fmt::format(
        "search: ended by planner.time_limit_s after {} of {} evaluations: this plan "
        "depends on this machine's speed\n",
        p.plan.search_evaluations, p.plan.search_budget);
  if (!out_json.empty()) {
    write_whole_file(out_json, to_json(p.plan).dump(2) + "\n");
    std::cout << "wrote " << out_json << "\n";
  }
  return 0;
}

std::string run_in_process(const Prepared& p, Executor executor, const std::string& run_path,
                           ProgressMode progress_mode, const EngineOptions& engine,
                           const std::optional<Resume>& resume, int64_t stop_after_checkpoint) {
  const Scenario& s = p.scenario;
  check_simulable(s, executor);
  check_faults_target(p);
  if (executor != Executor::kSim && !engine.empty())
    throw InputError("--cfg and --log are SimGrid's options: only for --executor sim");
#if RV_WITH_SIM
  if (executor == Executor::kSim)
    preflight(s, engine);  // before the folder: bad options or platform leave none
#else
  if (executor == Executor::kSim)
    throw InputError(
        "this ravnest was built without the simulator (cmake -DRAVNEST_SIM=OFF): run with "
        "--executor loopback, or `ravnest real`");
#endif
  const bool numeric = executor == Executor::kLoopback || s.sim.mode == SimMode::kNumeric;
  Dataset data;
  if (numeric) data = load_dataset(s.data, s.seed);
  RunSpec spec{&s, &p.plan, &p.model, numeric ? &data : nullptr};
  const std::string path = run_path.empty() ? new_run_path(s, name_of(executor)) : run_path;
  if (fs::exists(path)) throw InputError(path + ": run folder exists already");
  RunInfo info{name_of(executor),
               executor == Executor::kLoopback ? std::string("cpu") : name_of(s.sim.mode), 0,
               variant_label(s)};
  info.started_unix_s = unix_now_s();
  if (resume) {
    info.resumed_from = resume->run;
    info.resumed_at = resume->point.done;
  }
  // The folder exists from here on (live_run.h): rows as they come, run.json running -> complete
  // or failed.
  const WallClock wall;
  LiveRun live(path, s, p.plan, p.model, info, wall);
  std::vector<Event> events;
  const int64_t total = s.training.steps;
  try {
    const bool loopback = executor == Executor::kLoopback;
    Progress progress(total, loopback ? "wall" : "simulated", Progress::enabled_for(progress_mode));
    TeeMetrics both(progress, &live, nullptr);  // one thread at a time: no lock
#if RV_WITH_SIM
    events = loopback ? run_loopback(spec, s.peer_timeout_s(), -1, nullptr, &both)
                      : run_simulation(spec, &both, engine,
                                       sim_checkpoints(s, path, resume, stop_after_checkpoint))
                            .events;
#else
    events = run_loopback(spec, s.peer_timeout_s(), -1, nullptr, &both);
#endif
    progress.finish();
  } catch (const StoppedAtCheckpoint& e) {
    live.stop(e.what());
    throw;
  } catch (const std::exception& e) {
    live.fail(e.what());
    throw;
  }
  return live.finish(std::move(events));
}

int cmd_sim(const CommonOptions& o, Executor executor, const std::string& run_path,
            const EngineOptions& engine) {
  std::optional<Resume> resume;
  Prepared p = prepare(load_for_run(o, &resume));
  if (executor != Executor::kSim && (resume || o.stop_after_checkpoint > 0))
    throw InputError(
        "--resume and --stop-after-checkpoint are for --executor sim (and ravnest real)");
  if (o.stop_after_checkpoint > 0 && !p.scenario.checkpoint.enabled())
    throw InputError(
        "--stop-after-checkpoint: the scenario takes no checkpoints (checkpoint.every = 0)");
  print_summary(
      run_in_process(p, executor, run_path, o.progress, engine, resume, o.stop_after_checkpoint));
  return 0;
}

namespace {

// Before a real run on one machine: this host's speed against the scenario's devices
// (exec/dilation.h host_check_text), on the CPU.
void print_host_check(const Prepared& p) {
  const double cores = static_cast<double>(std::max(1u, std::thread::hardware_concurrency()));
  std::cout << "ravnest real: "
            << host_check_text(p.scenario,
                               choose_dilation(measure_demands(p.scenario, p.model, p.plan), cores))
            << std::flush;
}

}  // namespace

int cmd_real(const CommonOptions& o, const std::string& self_exe, const std::string& run_path,
             const Machines& machines) {
  std::optional<Resume> resume;
  Prepared p = prepare(load_for_run(o, &resume));  // validate before starting any process
  check_no_churn(p.scenario, Executor::kReal);
  check_faults_target(p);
  if (o.stop_after_checkpoint > 0 && !p.scenario.checkpoint.enabled())
    throw InputError(
        "--stop-after-checkpoint: the scenario takes no checkpoints (checkpoint.every = 0)");
  if (resume && machines.nnodes > 1)
    throw InputError(
        "--resume: a run over several machines is resumed rank by rank (ravnest node --resume-from "
        "on each machine, with its own checkpoint folder)");
  if (!run_path.empty() && fs::exists(run_path))
    throw InputError(run_path + ": run folder exists already");
  LaunchOptions lo{resume ? (fs::path(resume->run) / "scenario.toml").string() : o.scenario,
                   o.overrides,
                   self_exe,
                   run_path,
                   o.progress,
                   machines};
  if (resume) lo.node_args = {"--resume-from", resume->point.folder, "--resumed-run", resume->run};
  if (o.stop_after_checkpoint > 0)
    lo.node_args.insert(lo.node_args.end(),
                        {"--stop-after-checkpoint", std::to_string(o.stop_after_checkpoint)});
  Machines& m = lo.machines;
  if (m.nnodes > 1 && m.log_dir.empty())
    m.log_dir = "ravnest-logs";  // one file per rank, as torchrun's
  if (!m.log_dir.empty())
    std::cerr << "ravnest real: each rank's output goes to " << m.log_dir << "/rank-<r>.log\n";
  if (m.nnodes == 1 && !resume && p.scenario.real.device != DeviceChoice::kCuda)
    print_host_check(p);
  const std::string path = run_real(p.scenario, lo);
  if (path.empty()) {
    const auto [first, last] = ranks_of_machine(p.scenario.node_count(), m.nnodes, m.node_rank);
    std::cout << fmt::format(
        "ravnest real: ranks {}..{} of this machine (node rank {}) finished; rank 0 wrote the "
        "run folder on machine 0\n",
        first, last - 1, m.node_rank);
    return 0;
  }
  print_summary(path);
  return 0;
}

namespace {

// Splits "v1,v2,[1, 2],\"a,b\"" at the commas outside brackets and quotes.
std::vector<std::string> split_values(const std::string& s) {
  std::vector<std::string> out;
  std::string cur;
  int depth = 0;
  bool quoted = false;
  for (char ch : s) {
    if (ch == '"') quoted = !quoted;
    if (!quoted && (ch == '[' || ch == '{')) ++depth;
    if (!quoted && (ch == ']' || ch == '}')) --depth;
    if (ch == ',' && depth == 0 && !quoted) {
      out.push_back(cur);
      cur.clear();
    } else {
      cur += ch;
    }
  }
  out.push_back(cur);
  return out;
}

int run_child(const std::vector<std::string>& args) {
  std::cout.flush();
  return wait_process(spawn_process(args.at(0), args));
}

// The grid's axes: each "KEY=V1,V2,..." as its key and its values.
std::vector<std::pair<std::string, std::vector<std::string>>> sweep_axes(
    const std::vector<std::string>& grid) {
  std::vector<std::pair<std::string, std::vector<std::string>>> axes;
  for (const auto& g : grid) {
    const auto eq = g.find('=');
    if (eq == std::string::npos || eq == 0)
      throw ScenarioError("--grid", g, "expected KEY=V1,V2,...");
    axes.emplace_back(g.substr(0, eq), split_values(g.substr(eq + 1)));
  }
  return axes;
}

// Every point of the grid, as its "KEY=V" overrides, the first axis varying slowest.
std::vector<std::vector<std::string>> grid_points(
    const std::vector<std::pair<std::string, std::vector<std::string>>>& axes) {
  std::vector<std::vector<std::string>> combos{{}};
  for (const auto& [key, values] : axes) {
    std::vector<std::vector<std::string>> next;
    for (const auto& c : combos)
      for (const auto& v : values) {
        auto d = c;
        d.push_back(key + "=" + v);
        next.push_back(d);
      }
    combos = next;
  }
  return combos;
}

// A point's folder name: its overrides joined by '_', characters other than letters, digits,
// '.', '-' and '_' as '-' ("base" for none).
std::string point_name(const std::vector<std::string>& point) {
  std::string name;
  for (const auto& kv : point) {
    std::string part = kv;
    for (char& ch : part)
      if (!std::isalnum(static_cast<unsigned char>(ch)) && ch != '.' && ch != '-' && ch != '_')
        ch = '-';
    name += (name.empty() ? "" : "_") + part;
  }
  if (name.empty()) name = "base";
  return name;
}

// Records in dir/name/refused.json that the planner refused the point `sc` (`overrides`).
void record_refusal(const fs::path& dir, const std::string& name, const Scenario& sc,
                    const std::vector<std::string>& overrides, const PlanRefused& e) {
  nlohmann::json r = {{"scenario", sc.name},
                      {"algorithm", sc.training.algorithm},
                      {"clusters", sc.planner.clusters},
                      {"nodes", sc.node_count()},
                      {"overrides", overrides},
                      {"reason", e.what()}};
  fs::create_directories(dir / name);
  write_whole_file((dir / name / "refused.json").string(), r.dump(2) + "\n");
}

// Runs one point of a sweep in a child process (`ravnest sim` or `ravnest real`) into dir/name;
// returns its exit status.
int run_point(const CommonOptions& o, const std::vector<std::string>& point, Executor executor,
              const fs::path& dir, const std::string& name, const std::string& self_exe) {
  std::vector<std::string> args = {self_exe, executor == Executor::kReal ? "real" : "sim",
                                   o.scenario};
  for (const auto& kv : o.overrides) args.insert(args.end(), {"--set", kv});
  for (const auto& kv : point) args.insert(args.end(), {"--set", kv});
  if (executor != Executor::kReal) args.insert(args.end(), {"--executor", name_of(executor)});
  args.insert(args.end(),
              {"--run-dir", (dir / name).string(), "--progress", name_of(ProgressMode::kOff)});
  return run_child(args);
}

// The sweep's table: each finished run's time, throughput and accuracy, then the refused ones.
void print_sweep_table(const std::vector<std::pair<std::string, std::string>>& done,
                       const std::vector<std::pair<std::string, std::string>>& refused,
                       const fs::path& dir) {
  std::cout << fmt::format("\n{:<48} {:>12} {:>12} {:>10}\n", "run", "time (s)", "samples/s",
                           "accuracy");
  for (const auto& [name, path] : done) {
    const nlohmann::json j = read_json_file((fs::path(path) / "summary.json").string());
    const auto& acc = j["final"]["test_accuracy"];
    std::cout << fmt::format(
        "{:<48} {:>12.3f} {:>12.1f} {:>10}\n", name, j["time_s"].get<double>(),
        j["samples_per_s"].get<double>(),
        acc.is_null() ? std::string("-") : fmt::format("{:.4f}", acc.get<double>()));
  }
  for (const auto& [name, why] : refused)
    std::cout << fmt::format("{:<48} refused: {}\n", name, why);
  std::cout << fmt::format("\nplots: ravnest report {}/*\n", dir.string());
}

}  // namespace

int cmd_sweep(const CommonOptions& o, const std::vector<std::string>& grid, Executor executor,
              const std::string& out, const std::string& self_exe) {
  // Validate the base scenario and every value before running anything.
  Scenario base = load_checked(o.scenario, o.overrides);
  const std::vector<std::vector<std::string>> combos = grid_points(sweep_axes(grid));
  std::vector<Scenario> points;
  for (const auto& c : combos) {
    auto all = o.overrides;
    all.insert(all.end(), c.begin(), c.end());
    points.push_back(
        load_checked(o.scenario, all));  // throws with file, line and key on a bad value
  }
  const fs::path dir = out.empty() ? fs::path(new_run_path(base, "sweep")) : fs::path(out);
  if (fs::exists(dir)) throw InputError(dir.string() + ": exists already");
  fs::create_directories(dir);
  std::cout << fmt::format("sweep: {} runs into {}\n", combos.size(), dir.string());
  int failed = 0;
  std::vector<std::pair<std::string, std::string>> done, refused;
  for (size_t i = 0; i < combos.size(); ++i) {
    const auto& c = combos[i];
    const std::string name = point_name(c);
    // A pool that cannot run this point (sync-dp on nodes that cannot hold the model) is a result:
    // recorded for the report, not a failure.
    try {
      prepare(points[i]);
    } catch (const PlanRefused& e) {
      record_refusal(dir, name, points[i], c, e);
      refused.emplace_back(name, e.what());
      std::cout << fmt::format("  {}: refused by the planner\n", name);
      continue;
    }
    const int rc = run_point(o, c, executor, dir, name, self_exe);
    if (rc != 0) {
      ++failed;
      std::cout << fmt::format("  {}: failed (exit status {})\n", name, rc);
    } else {
      done.emplace_back(name, (dir / name).string());
    }
  }
  print_sweep_table(done, refused, dir);
  return failed == 0 ? 0 : 1;
}

std::string report_script(const std::string& self_exe) {
  const fs::path bin = fs::path(self_exe).parent_path();
  std::string looked;
  for (const fs::path& p :
       {bin / ".." / "share/ravnest/report.py", bin / ".." / "analysis/report.py"}) {
    std::error_code ec;
    if (fs::is_regular_file(p, ec)) return p.lexically_normal().string();
    looked += (looked.empty() ? "" : ", ") + p.lexically_normal().string();
  }
  throw Error("report: the report script is in none of the places beside this binary (" + looked +
              "): install it with cmake --install, or run the ravnest of a build folder inside the "
              "source tree");
}

int cmd_report(const std::string& self_exe, const std::vector<std::string>& args) {
  std::vector<std::string> argv = {"/usr/bin/python3", report_script(self_exe)};
  argv.insert(argv.end(), args.begin(), args.end());
  const int rc = run_child(argv);
  if (rc == 127) throw Error("report: cannot run /usr/bin/python3");
  if (rc >= 128) throw Error("report: the report script was killed");
  return rc;
}

}  // namespace rv
