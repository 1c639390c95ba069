// One node of a real run, as its own OS process (`ravnest node`): joins the process group, runs
// the scenario's algorithm for its rank, then sends its events to rank 0, which writes the run
// folder (the same files as the simulator's).
#pragma once

#include <string>
#include <vector>

#include "core/scenario/scenario.h"
#include "exec/progress.h"
#include "real/gloo_transport.h"

namespace rv {

struct NodeProcessOptions {
  std::string scenario_path;
  std::vector<std::string> overrides;
  GlooOptions gloo;  // rank, world size, master address and port
  // The run folder: rank 0 makes it at the start and finishes it ("" = a new one under output.dir);
  // the other ranks append their rows to it as they go ("": they do not).
  std::string run_path;
  std::string result_file;  // rank 0: if set, the run folder's path is written here
  ProgressMode progress = ProgressMode::kAuto;  // rank 0's progress on stderr
  // Checkpoints ([checkpoint]): resume from this complete round folder (core/checkpoint/), a
  // checkpoint of the run `resumed_run` (named in run.json); stop once this many are complete.
  std::string resume_from;
  std::string resumed_run;
  int64_t stop_after_checkpoint = 0;
};

// Set by `ravnest real` in its children's environment (internal, not for users):
//   RAVNEST_LAUNCHER_PID  the launcher's process id: the child dies with it (PR_SET_PDEATHSIG).
//   RAVNEST_STORE_HOSTED  set: the launcher serves the rendezvous store (it bound the port), so
//                         rank 0 connects to it like every other rank instead of hosting one.
//   RAVNEST_SECRET_FILE   the run's secret (real/auth.h), new for each run, in the status folder.
//   RAVNEST_STATUS_DIR    a folder where a failing child writes the file rank-<R>: its error class
//                         ("input", "peer" for rv::PeerError, "error") on the first line, then its
//                         message, so that the launcher can name the root cause of a failed run
//                         rather than the first of the ranks that stopped because of it.
// In a real run's folder: the run finished (rank 0 wrote the folder with every rank's events) but
// the shutdown after it failed; the file says how. The launcher keeps such a folder and names it.
constexpr const char* kShutdownMark = "shutdown-failed.txt";

constexpr const char* kLauncherPidEnv = "RAVNEST_LAUNCHER_PID";
constexpr const char* kStatusDirEnv = "RAVNEST_STATUS_DIR";

// How a rank failed, as the first line of its status file says (the launcher reads it): bad
// input (exit status 2), a lost peer, any other error; kNone where it left no file (a rank killed
// by a signal).
enum class RankFailure { kNone, kInput, kPeer, kError };
template <>
struct ChoiceNames<RankFailure> {
  static constexpr ChoiceName<RankFailure> kNames[] = {{RankFailure::kNone, ""},
                                                       {RankFailure::kInput, "input"},
                                                       {RankFailure::kPeer, "peer"},
                                                       {RankFailure::kError, "error"}};
};
constexpr const char* kStoreHostedEnv = "RAVNEST_STORE_HOSTED";
// Set by `ravnest real` when every rank runs on this machine (not with --nnodes): the ranks may
// share the network emulator and this machine's clock.
constexpr const char* kAllRanksHereEnv = "RAVNEST_ALL_RANKS_HERE";

// Runs one rank to completion. Returns the process exit status: 0 ok, 1 a peer or runtime
// failure, 2 bad input; prints a one-line error on stderr that names the rank.
int run_node_process(const NodeProcessOptions& options);

// Whether a real run's messages go through the network emulator (real.emulate_network; "auto" is
// on when `ravnest real` starts every rank on this machine, `launched_together`, and off for ranks
// started by hand). Throws rv::ScenarioError (exit 2) for what cannot be honoured: emulation or
// the kernel shaper for ranks started by hand, or an all-reduce on c10d's own collectives under
// the user-space shaper, which cannot see their bytes.
bool emulates_network(const Scenario& s, bool launched_together);

}  // namespace rv
