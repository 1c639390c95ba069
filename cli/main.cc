// ravnest: plan, simulate, run for real and report decentralized training experiments.
// Exit status: 0 success, 1 runtime failure (a peer died, a deadlock), 2 bad input.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <csignal>
#include <cstdlib>
#include <iostream>

#include "calibrate/calibrate.h"
#include "cli/calibrate_command.h"
#include "cli/commands.h"
#include "cli/keys_command.h"
#include "cli/theory_command.h"
#include "core/error.h"
#include "core/input/integer.h"
#include "core/memory/allocator.h"
#include "exec/dilation.h"
#include "real/node_process.h"

namespace {

std::string self_exe(const char* argv0) {
  char buf[4096];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n > 0) return std::string(buf, static_cast<size_t>(n));
  return argv0;
}

std::string env_or(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v && *v ? v : fallback;
}

// An integer environment variable in [lo, hi], strictly (core/input/integer.h); `fallback` if
// unset.
int env_int(const char* name, int fallback, int lo, int hi) {
  const char* v = std::getenv(name);
  if (!v || !*v) return fallback;
  return static_cast<int>(
      rv::parse_integer(v, lo, hi, std::string("environment variable ") + name));
}

void add_common(CLI::App* app, rv::CommonOptions& o, bool resumable = false) {
  auto* scenario = app->add_option("scenario", o.scenario, "scenario file (TOML)");
  if (resumable) {
    app->add_option(
        "--resume", o.resume,
        "continue this run folder from its last complete checkpoint ([checkpoint]), with its own "
        "scenario, into a new run folder (instead of a scenario file)");
    app->add_option(
           "--stop-after-checkpoint", o.stop_after_checkpoint,
           "stop the run (exit 1) once this many checkpoints are complete, as if interrupted there")
        ->check(CLI::Range(int64_t{1}, int64_t{1} << 40));
  } else {
    scenario->required();
  }
  app->add_option("--set", o.overrides,
                  "override a scenario key, e.g. --set training.lr=0.1 (repeatable)");
  app->add_option("--progress", o.progress, "progress display on stderr: auto | on | off")
      ->check(CLI::IsMember({"auto", "on", "off"}));
}

}  // namespace

int main(int argc, char** argv) {
  // A write to a connection whose other end is gone (a peer's socket, a closed pipe) fails with
  // EPIPE, which the transport turns into that peer's loss, rather than killing this process with
  // SIGPIPE: Gloo sends with writev, which cannot ask for MSG_NOSIGNAL, so a rank writing to a
  // rank that had just been killed died with it (found by the random-kill recovery test). Set
  // before anything starts a thread; inherited by the ranks `ravnest real` starts.
  std::signal(SIGPIPE, SIG_IGN);
  // Before any tensor: the calibration and the runs it predicts allocate under one policy.
  if (!rv::configure_allocator())
    std::cerr << "warning: the C library refused the heap settings (core/memory/allocator.h)\n";
  CLI::App app{
      "ravnest: decentralized asynchronous training on heterogeneous PCs, simulated (SimGrid) "
      "and real (LibTorch over c10d/Gloo)"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "ravnest 0.1.0");

  rv::CommonOptions plan_o, sim_o, real_o, node_o;
  std::string plan_out, sim_executor = "sim", sim_run_path;
  auto* plan =
      app.add_subcommand("plan", "print the plan (clusters, stages, memory, predicted times)");
  add_common(plan, plan_o);
  plan->add_option("--out", plan_out,
                   "also write the plan as JSON to this file (runs keep theirs)");

  auto* sim = app.add_subcommand("sim", "run a scenario in the simulator and write a run folder");
  add_common(sim, sim_o, true);
  sim->add_option("--executor", sim_executor,
                  "sim (SimGrid, modeled time) | loopback (threads of this process, wall time)")
      ->check(CLI::IsMember({"sim", "loopback"}));
  sim->add_option("--run-dir", sim_run_path,
                  "write the run folder here instead of under output.dir");
  rv::EngineOptions sim_engine;
  sim->add_option(
         "--cfg", sim_engine.cfg,
         "a SimGrid option, as SimGrid takes it: --cfg=name:value (repeatable), applied after the "
         "scenario's; network/model and the factors are the scenario's keys (network.*)")
      ->allow_extra_args(false);
  sim->add_option("--log", sim_engine.log,
                  "a SimGrid log setting, as SimGrid takes it: --log=root.thresh:info (repeatable)")
      ->allow_extra_args(false);

  auto* real = app.add_subcommand(
      "real", "run every node as a process on this machine (c10d/Gloo on 127.0.0.1)");
  add_common(real, real_o, true);
  std::string real_run_path;
  real->add_option("--run-dir", real_run_path,
                   "write the run folder here instead of under output.dir");
  rv::Machines machines;
  real->add_option(
          "--nnodes", machines.nnodes,
          "machines that run the scenario's ranks together, each with this command and its own "
          "--node-rank (torchrun's meaning); machine k starts ranks [k W / N, (k + 1) W / N)")
      ->check(CLI::Range(1, 100000));
  real->add_option("--node-rank", machines.node_rank,
                   "this machine's index, 0 to --nnodes - 1 (0 holds rank 0)")
      ->check(CLI::Range(0, 100000));
  real->add_option(
      "--rdzv-endpoint", machines.rdzv_endpoint,
      "HOST:PORT where the ranks meet: an address of machine 0, which serves the rendezvous there "
      "(every machine sets RAVNEST_SECRET_FILE or RAVNEST_SECRET to the same secret)");
  real->add_option(
      "--log-dir", machines.log_dir,
      "each rank's output to <dir>/rank-<r>.log (default with --nnodes: ravnest-logs)");

  rv::NodeProcessOptions node_opts;
  int rank = -1, world = -1, port = -1;
  std::string master;
  double timeout = -1;
  auto* node = app.add_subcommand(
      "node",
      "run one rank of a real run (torchrun-style: MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE)");
  add_common(node, node_o);
  node->add_option("--rank", rank, "this process's rank (default: $RANK)")
      ->check(CLI::Range(0, 99999));
  node->add_option("--world-size", world, "number of ranks (default: $WORLD_SIZE)")
      ->check(CLI::Range(1, 100000));
  node->add_option(
      "--master-addr", master,
      "address of rank 0's store (default: $MASTER_ADDR, else the scenario's real.master_addr)");
  node->add_option(
          "--master-port", port,
          "port of rank 0's store (default: $MASTER_PORT, else the scenario's real.master_port)")
      ->check(CLI::Range(1, 65535));
  node->add_option("--timeout", timeout, "seconds before a silent peer counts as dead");
  node->add_option("--run-path", node_opts.run_path,
                   "the run folder: rank 0 makes and finishes it, the other ranks append their "
                   "rows to it as they go");
  node->add_option("--result-file", node_opts.result_file,
                   "rank 0: write the run folder's path here");
  node->add_option(
      "--resume-from", node_opts.resume_from,
      "a complete checkpoint's round folder (<checkpoints>/round-<updates>) to resume from: "
      "every rank of the run is given the same");
  node->add_option("--resumed-run", node_opts.resumed_run,
                   "the run folder it continues, for run.json");
  node->add_flag("--join", node_opts.gloo.join,
                 "replace a lost rank (--rank) of a running job whose real.on_peer_loss is "
                 "\"recover\": it links to "
                 "the ranks still in the run and takes a stage as a spare");
  node->add_option("--stop-after-checkpoint", node_opts.stop_after_checkpoint,
                   "stop (exit 1) once this many checkpoints are complete")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 40));

  rv::CommonOptions sweep_o;
  std::vector<std::string> sweep_grid;
  std::string sweep_executor = "sim", sweep_out;
  auto* sweep =
      app.add_subcommand("sweep", "run a grid of variants of a scenario (each in its own process)");
  add_common(sweep, sweep_o);
  sweep->add_option("--grid", sweep_grid,
                    "KEY=V1,V2,... : an axis of the grid (as --set KEY=V1,V2 is)");
  sweep->add_option("--executor", sweep_executor, "sim | loopback | real")
      ->check(CLI::IsMember({"sim", "loopback", "real"}));
  sweep->add_option("--out", sweep_out,
                    "folder of the runs (default: runs/<scenario>/sweep-<timestamp>)");

  rv::CommonOptions validate_o;
  std::string validate_run_path;
  double validate_dilation = 0;
  auto* validate = app.add_subcommand(
      "validate",
      "simulate the scenario and run it for real, emulated (dilated so that this host keeps up), "
      "with the same seed and plan; compare them (validate.json, validate.md)");
  add_common(validate, validate_o);
  validate->add_option("--run-dir", validate_run_path,
                       "write the folder here instead of under output.dir");
  validate
      ->add_option(
          "--dilation", validate_dilation,
          "run both k times slower than modeled (default: the least this host keeps up with)")
      ->check(CLI::Range(1.0, 1000.0));
  double validate_headroom = rv::kHeadroom;
  validate
      ->add_option(
          "--headroom", validate_headroom,
          "choose the dilation with this much room over the host's measured time per micro-batch "
          "(default 1.5; a run that shows it too little is made again at what it measured)")
      ->check(CLI::Range(1e-6, 100.0));

  // Every argument after `report` goes to the report script as it is (its options are the
  // command's; `ravnest report --help` prints them).
  auto* report = app.add_subcommand("report",
                                    "plot one or more run folders (matplotlib): RUN... [options]; "
                                    "ravnest report --help lists the options");
  report->prefix_command();
  report->set_help_flag();

  std::vector<std::string> theory_runs;
  std::string theory_out;
  bool theory_no_plot = false;
  auto* theory = app.add_subcommand(
      "theory",
      "measure runs on problems with known constants (data.kind quadratic or logistic) against the "
      "convergence bound: theory.json, theory.csv, theory.png");
  theory->add_option("runs", theory_runs, "run folders")->required();
  theory->add_option(
      "--out", theory_out,
      "output folder for the plot (default: RUN/report for one run, ./report for several)");
  theory->add_flag("--no-plot", theory_no_plot, "write theory.json and theory.csv only");

  bool keys_markdown = false;
  auto* keys =
      app.add_subcommand("keys", "list every scenario key: type, unit, default, range, help");
  keys->add_flag("--markdown", keys_markdown, "as the README's Markdown table");

  rv::CalibrateCommand cal;
  auto* calibrate = app.add_subcommand(
      "calibrate",
      "measure this host's LibTorch compute: peak, per-operation cost, efficiencies; or fit "
      "a device's published kernel timings (--from)");
  calibrate->add_option("--out", cal.out, "write the profile file (TOML) here");
  calibrate->add_option("--threads", cal.threads, "LibTorch threads (default: every core)")
      ->check(CLI::Range(1, 4096));
  calibrate->add_flag("--quick", cal.quick, "fewer shapes and repeats");
  calibrate
      ->add_option(
          "--share", cal.share,
          "devices sharing this host at once, as the nodes of a real run on it (default 1)")
      ->check(CLI::Range(1, 256));
  calibrate
      ->add_option("--load", cal.load_parent, "internal: be a load process of calibrate --share")
      ->group("")
      ->check(CLI::Range(1, 1 << 30));
  calibrate->add_option(
      "--from", cal.from,
      "fit this samples file of a device's published kernel timings instead of measuring "
      "(CSV: " +
          std::string(rv::kSamplesHeader) + "; profiles/published/)");
  calibrate
      ->add_option("--peak-tflops", cal.peak_tflops,
                   "with --from: the device's published peak, TFLOPS")
      ->check(CLI::Range(1e-6, 1e6));
  calibrate
      ->add_option(
          "--memory-gbps", cal.memory_gbps,
          "with --from: its published memory bandwidth, GB/s, for the kinds the file has no "
          "timings of (modeled on the roofline)")
      ->check(CLI::Range(1e-6, 1e6));

  try {
    app.parse(argc, argv);
  } catch (const CLI::Success& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    app.exit(e);
    return 2;
  }

  try {
    if (*plan) return rv::cmd_plan(plan_o, plan_out);
    if (*sim) return rv::cmd_sim(sim_o, sim_executor, sim_run_path, sim_engine);
    if (*real) return rv::cmd_real(real_o, self_exe(argv[0]), real_run_path, machines);
    if (*validate)
      return rv::cmd_validate(validate_o, self_exe(argv[0]), validate_run_path, validate_dilation,
                              validate_headroom);
    if (*report) return rv::cmd_report(self_exe(argv[0]), report->remaining());
    if (*keys) return rv::run_keys_command(keys_markdown);
    if (*theory) return rv::cmd_theory(theory_runs, theory_out, !theory_no_plot, self_exe(argv[0]));
    if (*calibrate) return rv::run_calibrate_command(cal);
    if (*sweep) {
      // Every --set is an axis: "key=v1,v2" runs both values; "key=v" fixes it.
      std::vector<std::string> axes = sweep_o.overrides;
      axes.insert(axes.end(), sweep_grid.begin(), sweep_grid.end());
      sweep_o.overrides.clear();
      if (axes.empty()) throw rv::InputError("ravnest sweep: give the grid as --set KEY=V1,V2,...");
      return rv::cmd_sweep(sweep_o, axes, sweep_executor, sweep_out, self_exe(argv[0]));
    }
    if (*node) {
      node_opts.scenario_path = node_o.scenario;
      node_opts.overrides = node_o.overrides;
      node_opts.progress = node_o.progress;
      // Flags first, then torchrun's variables, then (address and port) the scenario's real table.
      constexpr int kMaxRanks = 100000;  // the most nodes a scenario has
      node_opts.gloo.rank = rank >= 0 ? rank : env_int("RANK", -1, 0, kMaxRanks - 1);
      node_opts.gloo.world_size = world >= 0 ? world : env_int("WORLD_SIZE", -1, 1, kMaxRanks);
      node_opts.gloo.master_addr = !master.empty() ? master : env_or("MASTER_ADDR", "");
      node_opts.gloo.master_port = port >= 0 ? port : env_int("MASTER_PORT", 0, 1, 65535);
      if (node_opts.gloo.rank < 0 || node_opts.gloo.world_size < 1 ||
          node_opts.gloo.rank >= node_opts.gloo.world_size)
        throw rv::InputError(
            "ravnest node: need 0 <= --rank (or RANK) < --world-size (or WORLD_SIZE)");
      node_opts.gloo.timeout = timeout > 0 ? timeout : -1;  // -1: the scenario's real.timeout_s
      return rv::run_node_process(node_opts);
    }
  } catch (const rv::Interrupted& e) {
    std::cerr << "ravnest: " << e.what() << std::endl;
    std::signal(e.signal(), SIG_DFL);
    std::raise(e.signal());
    return 128 + e.signal();
  } catch (const rv::InputError& e) {
    std::cerr << "ravnest: error: " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "ravnest: error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
