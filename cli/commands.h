// The `ravnest` subcommands. Each returns the process exit status and throws rv::Error on failure
// (main maps rv::InputError to 2, other errors to 1).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "core/checkpoint/checkpoint.h"
#include "core/model/model.h"
#include "core/plan.h"
#include "core/scenario/scenario.h"
#include "real/launcher.h"
#include "sim/engine_options.h"

namespace rv {

// Where a run goes: SimGrid (modeled time), the loopback (threads of this process, wall time), or
// processes over c10d/Gloo (`ravnest real`). --executor is parsed into it once (cli/main.cc).
enum class Executor { kSim, kLoopback, kReal };
template <>
struct ChoiceNames<Executor> {
  static constexpr ChoiceName<Executor> kNames[] = {
      {Executor::kSim, "sim"}, {Executor::kLoopback, "loopback"}, {Executor::kReal, "real"}};
};

// A scenario ready to run: the scenario, its model and its plan.
struct Prepared {
  Scenario scenario;
  ModelDesc model;
  Plan plan;
};
struct CommonOptions {
  std::string scenario;
  std::vector<std::string> overrides;  // --set KEY=VALUE
  ProgressMode progress = ProgressMode::kAuto;
  // sim and real: continue the run folder `resume` from its last complete checkpoint (its own
  // scenario.toml; no scenario argument nor --set), into a new run folder.
  std::string resume;
  int64_t stop_after_checkpoint = 0;  // > 0: stop once this many checkpoints are complete
};

// --resume RUN: the run's scenario and its last complete checkpoint (rv::InputError, exit 2, where
// there is none, or where a scenario or --set is given too).
struct Resume {
  std::string run;       // the run folder it continues
  CheckpointInfo point;  // the checkpoint it continues from
};
Scenario load_for_run(const CommonOptions& o, std::optional<Resume>* resume);

// Loads a scenario and checks the names that the registry, not the key table, knows.
Scenario load_checked(const std::string& path, const std::vector<std::string>& overrides);
Prepared prepare(Scenario scenario);
// Refuses what only the real executor runs (an all-reduce on the executor's own collectives), and
// churn outside the simulator.
void check_simulable(const Scenario& s, Executor executor);
// Refuses [faults] aimed at a node the plan leaves idle, where nothing would ever act on them
// (exit 2); a spare may take a stage under churn or real.on_peer_loss = "recover".
void check_faults_target(const Prepared& p);
// Refuses churn: only the simulator plays it (exit 2).
void check_no_churn(const Scenario& s, Executor executor);
// Runs a prepared scenario in this process (executor: sim | loopback) and writes its run folder at
// `run_path` ("" = a new one under output.dir); returns the folder.
// `engine`: SimGrid's --cfg and --log (sim only), tried with the scenario's platform before the
// folder exists (sim/engine_options.h).
// `resume`: continue that run from its checkpoint; `stop_after_checkpoint` > 0: stop (exit 1, the
// folder's run.json says so) once that many checkpoints are complete.
std::string run_in_process(const Prepared& p, Executor executor, const std::string& run_path,
                           ProgressMode progress, const EngineOptions& engine = {},
                           const std::optional<Resume>& resume = std::nullopt,
                           int64_t stop_after_checkpoint = 0);
// Prints a run folder's summary.json in two lines.
void print_summary(const std::string& path);

int cmd_plan(const CommonOptions& o, const std::string& out_json);
// executor: sim | loopback. run_path: "" = a new folder under output.dir.
int cmd_sim(const CommonOptions& o, Executor executor, const std::string& run_path,
            const EngineOptions& engine = {});
// `machines`: one, or this machine's share of several (real/launcher.h).
int cmd_real(const CommonOptions& o, const std::string& self_exe, const std::string& run_path,
             const Machines& machines = {});
// Runs the scenario once per combination of the comma-separated values in `grid` ("key=v1,v2"),
// each in its own process, into run folders under `out`; prints a table of the results.
int cmd_sweep(const CommonOptions& o, const std::vector<std::string>& grid, Executor executor,
              const std::string& out, const std::string& self_exe);
// Simulates the scenario and runs it for real, emulated and dilated (exec/dilation.h) so that this
// host keeps up, with the same seed and plan (executor agreement); and, where this host can
// (root), the model against hardware (cli/validate_hardware.h) in hardware/. `agreements`: "both",
// "executors" or "hardware" (the other reported as left out). Writes the run folders,
// validate.json and validate.md (core/output/validation.h) into one folder. dilation 0: chosen by
// measurement.
// quick_calibration: the hardware agreement's calibration quick (`calibrate --quick`: tests).
int cmd_validate(const CommonOptions& o, const std::string& self_exe, const std::string& run_path,
                 double dilation, double headroom, const std::string& agreements = "both",
                 bool quick_calibration = false);
// The report script (analysis/report.py) with `args` as they are: `ravnest report ARGS...` hands
// the script every argument, so each of its options (and --help) is the command's. The script is
// looked for beside the binary that runs: <bin>/../share/ravnest/report.py (an installed tree,
// cmake --install), then <bin>/../analysis/report.py (the build folder inside the source tree).
// `self_exe`: this binary's path.
int cmd_report(const std::string& self_exe, const std::vector<std::string>& args);
// Where cmd_report finds the script; rv::Error naming the places it looked if none holds it.
std::string report_script(const std::string& self_exe);

}  // namespace rv
