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
#include "core/fault_injection.h"
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
  app->add_option_function<std::string>(
         "--progress",
         [&o](const std::string& word) { o.progress = *rv::choice_of<rv::ProgressMode>(word); },
         "progress display on stderr: auto | on | off")
      ->check(CLI::IsMember(rv::choice_names<rv::ProgressMode>()));
}

// Each subcommand's options, as CLI11 fills them in (it keeps pointers into them: a Cli stays
// where it was made). `app`: the subcommand, which tells whether it was chosen.
struct PlanCli {
  CLI::App* app = nullptr;
  rv::CommonOptions o;
  std::string out;
};
struct SimCli {
  CLI::App* app = nullptr;
  rv::CommonOptions o;
  std::string executor = "sim", run_path;  // an Executor's word, checked by CLI11
  rv::EngineOptions engine;
};
struct RealCli {
  CLI::App* app = nullptr;
  rv::CommonOptions o;
  std::string run_path;
  rv::Machines machines;
};
struct NodeCli {
  CLI::App* app = nullptr;
  rv::CommonOptions o;
  rv::NodeProcessOptions opts;
  int rank = -1, world = -1, port = -1;  // -1: not given
  std::string master;
  double timeout = -1;
};
struct SweepCli {
  CLI::App* app = nullptr;
  rv::CommonOptions o;
  std::vector<std::string> grid;
  std::string executor = "sim", out;  // an Executor's word, checked by CLI11
};
struct ValidateCli {
  CLI::App* app = nullptr;
  rv::CommonOptions o;
  std::string run_path;
  double dilation = 0;
  double headroom = rv::kHeadroom;
  std::string agreements = "both";
  bool quick_calibration = false;
};
struct TheoryCli {
  CLI::App* app = nullptr;
  std::vector<std::string> runs;
  std::string out;
  bool no_plot = false;
};
struct KeysCli {
  CLI::App* app = nullptr;
  bool markdown = false;
};
struct CalibrateCli {
  CLI::App* app = nullptr;
  rv::CalibrateCommand cal;
};
struct Cli {
  PlanCli plan;
  SimCli sim;
  RealCli real;
  NodeCli node;
  SweepCli sweep;
  ValidateCli validate;
  CLI::App* report = nullptr;
  TheoryCli theory;
  KeysCli keys;
  CalibrateCli calibrate;
};

void add_plan(CLI::App& app, PlanCli& c) {
  c.app = app.add_subcommand("plan", "print the plan (clusters, stages, memory, predicted times)");
  add_common(c.app, c.o);
  c.app->add_option("--out", c.out, "also write the plan as JSON to this file (runs keep theirs)");
}

void add_sim(CLI::App& app, SimCli& c) {
  c.app = app.add_subcommand("sim", "run a scenario in the simulator and write a run folder");
  add_common(c.app, c.o, true);
  c.app
      ->add_option("--executor", c.executor,
                   "sim (SimGrid, modeled time) | loopback (threads of this process, wall time)")
      ->check(CLI::IsMember(std::vector<std::string>{rv::name_of(rv::Executor::kSim),
                                                     rv::name_of(rv::Executor::kLoopback)}));
  c.app->add_option("--run-dir", c.run_path,
                    "write the run folder here instead of under output.dir");
  c.app
      ->add_option(
          "--cfg", c.engine.cfg,
          "a SimGrid option, as SimGrid takes it: --cfg=name:value (repeatable), applied after the "
          "scenario's; network/model and the factors are the scenario's keys (network.*)")
      ->allow_extra_args(false);
  c.app
      ->add_option(
          "--log", c.engine.log,
          "a SimGrid log setting, as SimGrid takes it: --log=root.thresh:info (repeatable)")
      ->allow_extra_args(false);
}

void add_real(CLI::App& app, RealCli& c) {
  c.app = app.add_subcommand(
      "real", "run every node as a process on this machine (c10d/Gloo on 127.0.0.1)");
  add_common(c.app, c.o, true);
  c.app->add_option("--run-dir", c.run_path,
                    "write the run folder here instead of under output.dir");
  c.app
      ->add_option(
          "--nnodes", c.machines.nnodes,
          "machines that run the scenario's ranks together, each with this command and its own "
          "--node-rank (torchrun's meaning); machine k starts ranks [k W / N, (k + 1) W / N)")
      ->check(CLI::Range(1, 100000));
  c.app
      ->add_option("--node-rank", c.machines.node_rank,
                   "this machine's index, 0 to --nnodes - 1 (0 holds rank 0)")
      ->check(CLI::Range(0, 100000));
  c.app->add_option(
      "--rdzv-endpoint", c.machines.rdzv_endpoint,
      "HOST:PORT where the ranks meet: an address of machine 0, which serves the rendezvous there "
      "(every machine sets RAVNEST_SECRET_FILE or RAVNEST_SECRET to the same secret)");
  c.app->add_option(
      "--log-dir", c.machines.log_dir,
      "each rank's output to <dir>/rank-<r>.log (default with --nnodes: ravnest-logs)");
}

void add_node(CLI::App& app, NodeCli& c) {
  c.app = app.add_subcommand(
      "node",
      "run one rank of a real run (torchrun-style: MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE)");
  add_common(c.app, c.o);
  c.app->add_option("--rank", c.rank, "this process's rank (default: $RANK)")
      ->check(CLI::Range(0, 99999));
  c.app->add_option("--world-size", c.world, "number of ranks (default: $WORLD_SIZE)")
      ->check(CLI::Range(1, 100000));
  c.app->add_option(
      "--master-addr", c.master,
      "address of rank 0's store (default: $MASTER_ADDR, else the scenario's real.master_addr)");
  c.app
      ->add_option(
          "--master-port", c.port,
          "port of rank 0's store (default: $MASTER_PORT, else the scenario's real.master_port)")
      ->check(CLI::Range(1, 65535));
  c.app->add_option("--timeout", c.timeout, "seconds before a silent peer counts as dead");
  c.app->add_option("--run-path", c.opts.run_path,
                    "the run folder: rank 0 makes and finishes it, the other ranks append their "
                    "rows to it as they go");
  c.app->add_option("--result-file", c.opts.result_file,
                    "rank 0: write the run folder's path here");
  c.app->add_option(
      "--resume-from", c.opts.resume_from,
      "a complete checkpoint's round folder (<checkpoints>/round-<updates>) to resume from: "
      "every rank of the run is given the same");
  c.app->add_option("--resumed-run", c.opts.resumed_run,
                    "the run folder it continues, for run.json");
  c.app->add_flag("--join", c.opts.gloo.join,
                  "replace a lost rank (--rank) of a running job whose real.on_peer_loss is "
                  "\"recover\": it links to "
                  "the ranks still in the run and takes a stage as a spare");
  c.app
      ->add_option("--stop-after-checkpoint", c.opts.stop_after_checkpoint,
                   "stop (exit 1) once this many checkpoints are complete")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 40));
}

void add_sweep(CLI::App& app, SweepCli& c) {
  c.app =
      app.add_subcommand("sweep", "run a grid of variants of a scenario (each in its own process)");
  add_common(c.app, c.o);
  c.app->add_option("--grid", c.grid,
                    "KEY=V1,V2,... : an axis of the grid (as --set KEY=V1,V2 is)");
  c.app->add_option("--executor", c.executor, "sim | loopback | real")
      ->check(CLI::IsMember(rv::choice_names<rv::Executor>()));
  c.app->add_option("--out", c.out,
                    "folder of the runs (default: runs/<scenario>/sweep-<timestamp>)");
}

void add_validate(CLI::App& app, ValidateCli& c) {
  c.app = app.add_subcommand(
      "validate",
      "simulate the scenario and run it for real twice with the same seed and plan: emulated "
      "(dilated so that this host keeps up: executor agreement) and, as root, with nothing taken "
      "from the model (this host's compute, calibrated in the same run, and real TCP: model "
      "against hardware); compare them (validate.json, validate.md)");
  add_common(c.app, c.o);
  c.app->add_option("--run-dir", c.run_path, "write the folder here instead of under output.dir");
  c.app
      ->add_option(
          "--dilation", c.dilation,
          "run both k times slower than modeled (default: the least this host keeps up with)")
      ->check(CLI::Range(1.0, 1000.0));
  c.app
      ->add_option(
          "--headroom", c.headroom,
          "choose the dilation with this much room over the host's measured time per micro-batch "
          "(default 1.5; a run that shows it too little is made again at what it measured)")
      ->check(CLI::Range(1e-6, 100.0));
  c.app
      ->add_option("--agreement", c.agreements,
                   "both (default) | executors (the emulated run only) | hardware (the "
                   "calibration and the run over real TCP only)")
      ->check(CLI::IsMember({"both", "executors", "hardware"}));
  c.app->add_flag("--quick-calibration", c.quick_calibration,
                  "the hardware agreement's calibration with fewer shapes and repeats "
                  "(`calibrate --quick`: seconds instead of minutes, less accurate)");
}

// Every argument after `report` goes to the report script as it is (its options are the
// command's; `ravnest report --help` prints them).
CLI::App* add_report(CLI::App& app) {
  CLI::App* report = app.add_subcommand("report",
                                        "plot one or more run folders (matplotlib): RUN... "
                                        "[options]; ravnest report --help lists the options");
  report->prefix_command();
  report->set_help_flag();
  return report;
}

void add_theory(CLI::App& app, TheoryCli& c) {
  c.app = app.add_subcommand(
      "theory",
      "measure runs on problems with known constants (data.kind quadratic or logistic) against the "
      "convergence bound: theory.json, theory.csv, theory.png; exit status 1 where a run breaks "
      "its bound or its configuration (docs/theory.md)");
  c.app->add_option("runs", c.runs, "run folders")->required();
  c.app->add_option(
      "--out", c.out,
      "output folder for the plot (default: RUN/report for one run, ./report for several)");
  c.app->add_flag("--no-plot", c.no_plot, "write theory.json and theory.csv only");
}

void add_keys(CLI::App& app, KeysCli& c) {
  c.app = app.add_subcommand("keys", "list every scenario key: type, unit, default, range, help");
  c.app->add_flag("--markdown", c.markdown, "as the README's Markdown table");
}

void add_calibrate(CLI::App& app, CalibrateCli& c) {
  rv::CalibrateCommand& cal = c.cal;
  c.app = app.add_subcommand(
      "calibrate",
      "measure this host's LibTorch compute: peak, per-operation cost, efficiencies; or fit "
      "a device's published kernel timings (--from)");
  c.app->add_option("--out", cal.out, "write the profile file (TOML) here");
  c.app->add_option("--threads", cal.threads, "LibTorch threads (default: every core)")
      ->check(CLI::Range(1, 4096));
  c.app->add_flag("--quick", cal.quick, "fewer shapes and repeats");
  c.app
      ->add_option(
          "--share", cal.share,
          "devices sharing this host at once, as the nodes of a real run on it (default 1)")
      ->check(CLI::Range(1, 256));
  c.app->add_option("--load", cal.load_parent, "internal: be a load process of calibrate --share")
      ->group("")
      ->check(CLI::Range(1, 1 << 30));
  c.app->add_option(
      "--from", cal.from,
      "fit this samples file of a device's published kernel timings instead of measuring "
      "(CSV: " +
          std::string(rv::kSamplesHeader) + "; profiles/published/)");
  c.app
      ->add_option("--peak-tflops", cal.peak_tflops,
                   "with --from: the device's published peak, TFLOPS")
      ->check(CLI::Range(1e-6, 1e6));
  c.app
      ->add_option(
          "--memory-gbps", cal.memory_gbps,
          "with --from: its published memory bandwidth, GB/s, for the kinds the file has no "
          "timings of (modeled on the roofline)")
      ->check(CLI::Range(1e-6, 1e6));
}

// Every subcommand, in the order `ravnest --help` lists them.
void add_subcommands(CLI::App& app, Cli& cli) {
  add_plan(app, cli.plan);
  add_sim(app, cli.sim);
  add_real(app, cli.real);
  add_node(app, cli.node);
  add_sweep(app, cli.sweep);
  add_validate(app, cli.validate);
  cli.report = add_report(app);
  add_theory(app, cli.theory);
  add_keys(app, cli.keys);
  add_calibrate(app, cli.calibrate);
}

// `ravnest sweep`: every --set is an axis: "key=v1,v2" runs both values; "key=v" fixes it.
int run_sweep(SweepCli& c, const char* argv0) {
  std::vector<std::string> axes = c.o.overrides;
  axes.insert(axes.end(), c.grid.begin(), c.grid.end());
  c.o.overrides.clear();
  if (axes.empty()) throw rv::InputError("ravnest sweep: give the grid as --set KEY=V1,V2,...");
  return rv::cmd_sweep(c.o, axes, *rv::choice_of<rv::Executor>(c.executor), c.out, self_exe(argv0));
}

// `ravnest node`: flags first, then torchrun's variables, then (address and port) the scenario's
// real table.
int run_node(NodeCli& c) {
  rv::NodeProcessOptions& node_opts = c.opts;
  node_opts.scenario_path = c.o.scenario;
  node_opts.overrides = c.o.overrides;
  node_opts.progress = c.o.progress;
  constexpr int kMaxRanks = 100000;  // the most nodes a scenario has
  node_opts.gloo.rank = c.rank >= 0 ? c.rank : env_int("RANK", -1, 0, kMaxRanks - 1);
  node_opts.gloo.world_size = c.world >= 0 ? c.world : env_int("WORLD_SIZE", -1, 1, kMaxRanks);
  node_opts.gloo.master_addr = !c.master.empty() ? c.master : env_or("MASTER_ADDR", "");
  node_opts.gloo.master_port = c.port >= 0 ? c.port : env_int("MASTER_PORT", 0, 1, 65535);
  if (node_opts.gloo.rank < 0 || node_opts.gloo.world_size < 1 ||
      node_opts.gloo.rank >= node_opts.gloo.world_size)
    throw rv::InputError("ravnest node: need 0 <= --rank (or RANK) < --world-size (or WORLD_SIZE)");
  node_opts.gloo.timeout = c.timeout > 0 ? c.timeout : -1;  // -1: the scenario's real.timeout_s
  return rv::run_node_process(node_opts);
}

// Runs the subcommand given (0 if none ran).
int run_subcommand(Cli& cli, const char* argv0) {
  if (*cli.plan.app) return rv::cmd_plan(cli.plan.o, cli.plan.out);
  if (*cli.sim.app)
    return rv::cmd_sim(cli.sim.o, *rv::choice_of<rv::Executor>(cli.sim.executor), cli.sim.run_path,
                       cli.sim.engine);
  if (*cli.real.app)
    return rv::cmd_real(cli.real.o, self_exe(argv0), cli.real.run_path, cli.real.machines);
  if (*cli.validate.app)
    return rv::cmd_validate(cli.validate.o, self_exe(argv0), cli.validate.run_path,
                            cli.validate.dilation, cli.validate.headroom, cli.validate.agreements,
                            cli.validate.quick_calibration);
  if (*cli.report) return rv::cmd_report(self_exe(argv0), cli.report->remaining());
  if (*cli.keys.app) return rv::run_keys_command(cli.keys.markdown);
  if (*cli.theory.app)
    return rv::cmd_theory(cli.theory.runs, cli.theory.out, !cli.theory.no_plot, self_exe(argv0));
  if (*cli.calibrate.app) return rv::run_calibrate_command(cli.calibrate.cal);
  if (*cli.sweep.app) return run_sweep(cli.sweep, argv0);
  if (*cli.node.app) return run_node(cli.node);
  return 0;
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
  Cli cli;
  add_subcommands(app, cli);

  try {
    app.parse(argc, argv);
  } catch (const CLI::Success& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    app.exit(e);
    return 2;
  }

  try {
    rv::injected_fault();  // a negative control's RAVNEST_FAULT, checked before anything is written
    return run_subcommand(cli, argv[0]);
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
}
