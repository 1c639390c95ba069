// Shared bits of the benchmarks: wall-clock timing and writing a JSON figure file.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <exception>
#include <functional>
#include <fstream>
#include <iostream>
#include <string>

#include <nlohmann/json.hpp>

namespace rv::bench {

inline double wall_now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Prints `j` and, if `path` is not empty, writes it there.
inline void emit(const nlohmann::json& j, const std::string& path) {
  std::cout << j.dump(2) << std::endl;
  if (!path.empty()) std::ofstream(path) << j.dump(2) << "\n";
}

// Runs `fn` in a forked child and returns what it wrote to the pipe (a double), NaN on failure.
// SimGrid keeps global state across engines (its network model cannot change after the first), so
// each simulation a benchmark times runs in its own child.
inline double in_child(const std::function<double()>& fn) {
  int fd[2];
  if (pipe(fd) != 0) return std::nan("");
  const pid_t pid = fork();
  if (pid < 0) {
    close(fd[0]);
    close(fd[1]);
    return std::nan("");
  }
  if (pid == 0) {
    close(fd[0]);
    double v = std::nan("");
    try {
      v = fn();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "child: %s\n", e.what());
    }
    if (write(fd[1], &v, sizeof v) != sizeof v) _exit(1);
    _exit(0);
  }
  close(fd[1]);
  double v = std::nan("");
  if (read(fd[0], &v, sizeof v) != sizeof v) v = std::nan("");
  close(fd[0]);
  waitpid(pid, nullptr, 0);
  return v;
}

}  // namespace rv::bench
