// Starting a program as a child process and waiting for it: the one place that calls
// posix_spawn and waitpid for the launcher's ranks (real/launcher.cc), the tools of the kernel
// shaper (real/kernel_network.cc), calibrate's load processes (calibrate/calibrate.cc) and
// sweep's runs (cli/commands.cc).
//
// Thread-safety: safe from any thread; the child inherits no file this process opens
// concurrently unless that file lacks O_CLOEXEC, as posix_spawn says.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

namespace rv {

struct SpawnOptions {
  // The child's standard output and error both go to this descriptor (-1: this process's)...
  int output_fd = -1;
  // ...or to this file, created or truncated ("": as output_fd says).
  std::string output_file;
  // The child's environment (nullptr: this process's).
  char* const* env = nullptr;
};

// Starts `exe` with `argv` (argv[0] included) and returns its pid. Throws rv::Error naming `exe`
// and why when it cannot start.
pid_t spawn_process(const std::string& exe, const std::vector<std::string>& argv,
                    const SpawnOptions& options = {});

// Waits for child `pid` to end (through interruptions by signals) and returns its exit status, or
// 128 + the signal that ended it (as a shell reports it).
int wait_process(pid_t pid);

}  // namespace rv
