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
int cmd_report(const std::vector<std::string>& runs, const std::string& out, const std::string& title);

}  // namespace rv
