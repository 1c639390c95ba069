// The `ravnest` subcommands. Each returns the process exit status and throws rv::Error on failure
// (main maps rv::InputError to 2, other errors to 1).
#pragma once

#include <string>
#include <vector>

namespace rv {

struct CommonOptions {
  std::string scenario;
  std::vector<std::string> overrides;  // --set KEY=VALUE
  std::string progress = "auto";       // auto | on | off
};

int cmd_plan(const CommonOptions& o, const std::string& out_json);
// executor: sim | loopback. run_path: "" = a new folder under output.dir.
int cmd_sim(const CommonOptions& o, const std::string& executor, const std::string& run_path);
int cmd_real(const CommonOptions& o, const std::string& self_exe, const std::string& run_path);
// Runs the scenario once per combination of the comma-separated values in `grid` ("key=v1,v2"),
// each in its own process, into run folders under `out`; prints a table of the results.
int cmd_sweep(const CommonOptions& o, const std::vector<std::string>& grid, const std::string& executor,
              const std::string& out, const std::string& self_exe);
int cmd_report(const std::vector<std::string>& runs, const std::string& out, const std::string& title);

}  // namespace rv
