// `ravnest real`: runs every node of a scenario as its own OS process on this machine
// (`ravnest node` children over c10d/Gloo on 127.0.0.1) and waits for them. If a child fails,
// the others are given `real.timeout_s` (plus 2 s) to stop on their own, then killed; the error
// names the first rank that failed on its own (not because it lost a peer) and its message:
// rv::InputError if that rank exited with status 2, rv::PeerError otherwise. No child outlives
// the call, whatever happens; children also die with the launcher's process. Returns the run
// folder written by rank 0.
#pragma once

#include <string>
#include <vector>

#include "core/scenario/scenario.h"

namespace rv {

struct LaunchOptions {
  std::string scenario_path;
  std::vector<std::string> overrides;
  std::string self_exe;  // the ravnest executable to start children with (/proc/self/exe)
  std::string run_path;  // the run folder rank 0 writes ("" = a new one under output.dir)
  std::string progress = "auto";  // rank 0 shows progress: auto | on | off
};

std::string run_real(const Scenario& scenario, const LaunchOptions& options);

}  // namespace rv
