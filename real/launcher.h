// `ravnest real`: runs every node of a scenario as its own OS process on this machine
// (`ravnest node` children over c10d/Gloo on 127.0.0.1) and waits for them. If a child fails,
// the others are given `real.timeout_s` (plus 2 s) to stop on their own, then killed; the error
// names the first rank that failed on its own (not because it lost a peer) and its message:
// rv::InputError if that rank exited with status 2, rv::PeerError otherwise. No child outlives
// the call, whatever happens; children also die with the launcher's process. Returns the run
// folder written by rank 0.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "core/scenario/scenario.h"
#include "exec/progress.h"

namespace rv {

// Several machines, as torchrun users start them: `nnodes` machines each run the launcher with its
// own `node_rank`; machine k starts ranks [k W / nnodes, (k + 1) W / nnodes) of the W nodes, and
// machine 0, which holds rank 0, serves the rendezvous store at `rdzv_endpoint` ("HOST:PORT", an
// address of machine 0 that the others reach). Every machine needs the run's secret in
// RAVNEST_SECRET_FILE or RAVNEST_SECRET (real/auth.h); the network is the machines' own (no
// emulator). Rank 0 writes the run folder on machine 0.
struct Machines {
  int nnodes = 1;
  int node_rank = 0;
  std::string rdzv_endpoint;
  // Each rank's standard output and error go to `<log_dir>/rank-<r>.log` ("": to this process's).
  std::string log_dir;
};

struct LaunchOptions {
  std::string scenario_path;
  std::vector<std::string> overrides;
  std::string self_exe;  // the ravnest executable to start children with (/proc/self/exe)
  std::string run_path;  // the run folder rank 0 writes ("" = a new one under output.dir)
  ProgressMode progress = ProgressMode::kAuto;  // rank 0's progress
  Machines machines;                            // one machine unless said otherwise
  std::vector<std::string> node_args;  // appended to every child's `ravnest node` command line
};

// The ranks machine `node_rank` of `nnodes` starts: [first, last).
std::pair<int, int> ranks_of_machine(int world, int nnodes, int node_rank);

// Returns the run folder rank 0 wrote, or "" on a machine that does not hold rank 0.
std::string run_real(const Scenario& scenario, const LaunchOptions& options);

}  // namespace rv
