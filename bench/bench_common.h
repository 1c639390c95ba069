// Shared bits of the benchmarks: wall-clock timing and writing a JSON figure file.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <exception>
#include <fstream>
#include <functional>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/error.h"

namespace rv::bench {

inline double wall_now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// The median of `v` (the mean of the middle two for an even count); `v` not empty.
inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// Prints `j` and, if `path` is not empty, writes it there.
inline void emit(const nlohmann::json& j, const std::string& path) {
  std::cout << j.dump(2) << std::endl;
  if (!path.empty()) std::ofstream(path) << j.dump(2) << "\n";
}

// Runs `fn` in a forked child and returns the `n` figures it returned (all NaN if it failed or
// returned another count). SimGrid keeps global state across engines (its network model cannot
// change after the first), so each simulation a benchmark times runs in its own child.
inline std::vector<double> in_child(size_t n, const std::function<std::vector<double>()>& fn) {
  std::vector<double> v(n, std::nan(""));
  const auto bytes = static_cast<ssize_t>(n * sizeof(double));
  int fd[2];
  if (pipe(fd) != 0) return v;
  const pid_t pid = fork();
  if (pid < 0) {
    close(fd[0]);
    close(fd[1]);
    return v;
  }
  if (pid == 0) {
    close(fd[0]);
    try {
      const std::vector<double> got = fn();
      if (got.size() == n) v = got;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "child: %s\n", e.what());
    }
    _exit(write(fd[1], v.data(), n * sizeof(double)) == bytes ? 0 : 1);
  }
  close(fd[1]);
  if (read(fd[0], v.data(), n * sizeof(double)) != bytes)
    std::fill(v.begin(), v.end(), std::nan(""));
  close(fd[0]);
  waitpid(pid, nullptr, 0);
  return v;
}

// Runs the program argv[0] with `argv` in a child process and waits for it: its exit status, or
// 128 + the signal that ended it (127: it could not be started), as the shell reports them.
inline int run_program(const std::vector<std::string>& argv) {
  const pid_t pid = fork();
  if (pid == 0) {
    std::vector<std::string> a = argv;
    std::vector<char*> args;
    for (auto& s : a) args.push_back(s.data());
    args.push_back(nullptr);
    execv(args[0], args.data());
    _exit(127);
  }
  if (pid < 0) return 127;
  int st = 0;
  waitpid(pid, &st, 0);
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

// One figure.
inline double in_child(const std::function<double()>& fn) {
  return in_child(1, [&] { return std::vector<double>{fn()}; })[0];
}

// What a bench's main does with an exception that ends it (`int main(...) try { ... } catch (const
// std::exception& e) { return bench::failed(e); }`), as ravnest does: "error: ..." on stderr, and
// exit status 2 for bad input (a scenario, an argument: rv::InputError), 1 for anything else.
inline int failed(const std::exception& e) {
  std::cerr << "error: " << e.what() << "\n";
  return dynamic_cast<const InputError*>(&e) != nullptr ? 2 : 1;
}

}  // namespace rv::bench
