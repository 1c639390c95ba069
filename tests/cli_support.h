// Running the `ravnest` executable from a test: in a folder, capturing its exit status, stdout
// and stderr (each test case runs in its own process, so forking is safe).
#pragma once

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace rv::test {

struct Result {
  int status = -1;  // exit status, or 128 + signal
  std::string out, err;
};

inline std::string slurp(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// A fresh, empty working folder for a test: <tmp>/<prefix>-<name>-<pid>.
inline std::filesystem::path fresh_dir(const std::string& prefix, const std::string& name) {
  const std::filesystem::path d = std::filesystem::temp_directory_path() /
                                  (prefix + "-" + name + "-" + std::to_string(::getpid()));
  std::filesystem::remove_all(d);
  std::filesystem::create_directories(d);
  return d;
}

// Starts build/ravnest with `args` in `cwd` without waiting (TMPDIR set to `tmpdir` unless
// empty); stdout and stderr go to cwd/.stdout and cwd/.stderr. It leads a process group of its
// own, which the ranks it starts join, so that finish_ravnest can end them all.
inline pid_t start_ravnest(const std::vector<std::string>& args, const std::filesystem::path& cwd,
                           const std::filesystem::path& tmpdir = {},
                           const std::string& exe = std::string(RV_BINARY_DIR) + "/ravnest") {
  std::filesystem::path out = cwd / ".stdout", err = cwd / ".stderr";
  const pid_t pid = fork();
  if (pid == 0) {
    ::setpgid(0, 0);
    if (chdir(cwd.c_str()) != 0) _exit(126);
    if (!tmpdir.empty()) ::setenv("TMPDIR", tmpdir.c_str(), 1);
    FILE* o = freopen(out.c_str(), "w", stdout);
    FILE* e = freopen(err.c_str(), "w", stderr);
    (void)o;
    (void)e;
    std::vector<std::string> a = {exe};
    a.insert(a.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (auto& s : a) argv.push_back(s.data());
    argv.push_back(nullptr);
    execv(argv[0], argv.data());
    _exit(127);
  }
  return pid;
}

// Waits for a process started by start_ravnest, at most `deadline` seconds: one still running
// then is sent SIGTERM (a launcher ends its ranks and marks its run interrupted), and 10 s later
// its whole process group SIGKILL (so that no rank outlives it, holding ports and cores while the
// next tests run); its status is then 124 and its stderr ends with a line saying so. A test that
// has waited that long has failed anyway; the deadline keeps a hang from costing the suite's
// timeout.
inline Result finish_ravnest(pid_t pid, const std::filesystem::path& cwd, double deadline = 600) {
  using Clock = std::chrono::steady_clock;
  const auto end = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                      std::chrono::duration<double>(deadline));
  int st = 0;
  bool killed = false;
  for (int sig : {0, SIGTERM, SIGKILL}) {
    if (sig != 0) {
      ::kill(sig == SIGKILL ? -pid : pid, sig);
      killed = true;
    }
    const auto until = sig == 0 ? end : Clock::now() + std::chrono::seconds(10);
    pid_t got = 0;
    while ((got = waitpid(pid, &st, WNOHANG)) == 0 && Clock::now() < until)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    if (got != 0) break;
  }
  Result r;
  r.status = killed ? 124 : WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  r.out = slurp(cwd / ".stdout");
  r.err = slurp(cwd / ".stderr");
  if (killed)
    r.err += "\n[test] ravnest still ran after " + std::to_string(deadline) + " s: killed\n";
  return r;
}

// Runs build/ravnest with `args` in `cwd`, capturing stdout and stderr.
inline Result ravnest(const std::vector<std::string>& args, const std::filesystem::path& cwd) {
  return finish_ravnest(start_ravnest(args, cwd), cwd);
}

}  // namespace rv::test
