// How a run was made, as run.json records it: the program's version and the git commit it was
// built from, the command line, the host and the start time.
#pragma once

#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

namespace rv {

// Set by `ravnest real` for its ranks: the user's command line, which rank 0 records (its own is
// the internal `ravnest node ...`).
constexpr const char* kCommandLineEnv = "RAVNEST_COMMAND_LINE";

struct Provenance {
  std::string version;  // the project's (CMake's PROJECT_VERSION)
  std::string commit;   // git commit of the source tree at build time, "-dirty" if it differed; ""
                        // outside git
  std::string command_line;  // as a shell would read it back (arguments quoted where needed)
  std::string host;          // gethostname()
  std::string started_utc;   // ISO 8601, UTC, to the millisecond; "" where the start is not known
};

// `args` joined with spaces, each quoted for a POSIX shell where it needs it.
std::string shell_join(const std::vector<std::string>& args);
// This process's command line: kCommandLineEnv where set, else /proc/self/cmdline.
std::string this_command_line();
// The provenance of a run that started at `started_unix_s` (seconds since the Unix epoch, as the
// executor's calendar clock gave it; < 0: not known). Reads no clock.
Provenance provenance_of_run(double started_unix_s);
// {"version", "commit", "command_line", "host", "started_utc"}.
nlohmann::json to_json(const Provenance& p);

}  // namespace rv
