#include "sim/engine_options.h"

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>
#include <xbt/log.h>

#include <cerrno>
#include <csignal>
#include <cstring>
#include <exception>
#include <simgrid/s4u/Engine.hpp>
#include <string>
#include <vector>

#include "core/error.h"
#include "sim/platform.h"

namespace sg4 = simgrid::s4u;

namespace rv {
namespace {

// The --cfg names whose values the scenario sets, and the key that sets them.
struct Owned {
  const char* cfg;
  const char* key;
};
constexpr Owned kOwned[] = {{"network/model", "network.model"},
                            {"network/latency-factor", "network.latency_factor"},
                            {"network/bandwidth-factor", "network.bandwidth_factor"}};

// Reads everything from `fd` until EOF.
std::string read_all(int fd) {
  std::string out;
  char buf[4096];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n > 0) {
      out.append(buf, static_cast<size_t>(n));
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else {
      break;
    }
  }
  return out;
}

// SimGrid's complaint in what a child wrote on stderr: the last line that says CRITICAL or error,
// else the last line.
std::string complaint(const std::string& text) {
  std::string last, found;
  size_t from = 0;
  while (from < text.size()) {
    size_t end = text.find('\n', from);
    if (end == std::string::npos) end = text.size();
    const std::string line = text.substr(from, end - from);
    from = end + 1;
    if (line.empty() || line.rfind("  ->", 0) == 0 || line.rfind("Backtrace", 0) == 0) continue;
    last = line;
    if (line.find("CRITICAL") != std::string::npos || line.find("rror") != std::string::npos)
      found = line;
  }
  return found.empty() ? last : found;
}

}  // namespace

void check_engine_options(const EngineOptions& options) {
  for (const std::string& c : options.cfg) {
    const size_t colon = c.find(':');
    if (colon == std::string::npos || colon == 0 || colon + 1 == c.size())
      throw InputError(
          "--cfg=" + c +
          ": expected --cfg=name:value (SimGrid's syntax, e.g. --cfg=contexts/factory:thread)");
    const std::string name = c.substr(0, colon);
    for (const Owned& o : kOwned)
      if (name == o.cfg)
        throw InputError("--cfg=" + c + ": the scenario sets " + name + ": use --set " + o.key +
                         "=... (the planner and the emulator follow it too)");
  }
  for (const std::string& l : options.log)
    if (l.find(':') == std::string::npos)
      throw InputError(
          "--log=" + l +
          ": expected SimGrid's --log=category.setting:value (e.g. --log=root.thresh:info)");
}

EngineArgv::EngineArgv(const EngineOptions& options) {
  // SimGrid says nothing below critical unless asked (--log), not even the options it was given.
  args = {"ravnest-sim", "--log=root.thresh:critical"};
  for (const std::string& c : options.cfg) args.push_back("--cfg=" + c);
  for (const std::string& l : options.log) args.push_back("--log=" + l);
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  argc = static_cast<int>(args.size());
}

void apply_engine_options(sg4::Engine& engine, const EngineOptions& options) {
  for (const std::string& c : options.cfg) engine.set_config(c);
  for (const std::string& l : options.log) xbt_log_control_set(l.c_str());
}

void preflight(const Scenario& scenario, const EngineOptions& options) {
  check_engine_options(options);
  if (options.empty() && scenario.network.platform.empty()) return;
  int err[2];  // the child's stderr (SimGrid's messages), then its verdict
  if (::pipe(err) != 0) throw Error(std::string("preflight: pipe: ") + std::strerror(errno));
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  if (pid < 0) throw Error(std::string("preflight: fork: ") + std::strerror(errno));
  if (pid == 0) {
    ::close(err[0]);
    ::dup2(err[1], 2);
    // Nothing on this process's standard output, and an abort ends the child as SimGrid meant
    // (no handler of the parent's, such as a test framework's, runs in it).
    const int null = ::open("/dev/null", O_WRONLY);
    if (null >= 0) ::dup2(null, 1);
    for (int sig : {SIGABRT, SIGSEGV, SIGBUS, SIGFPE, SIGILL}) std::signal(sig, SIG_DFL);
    int code = 0;
    try {
      EngineArgv args(options);
      sg4::Engine engine(&args.argc, args.argv.data());
      xbt_log_control_set("root.thresh:critical");
      configure_network(engine, scenario.network);
      apply_engine_options(engine, options);
      check_platform_routes(scenario, build_platform(scenario));
    } catch (const ScenarioError& e) {  // the platform file (build_platform)
      const std::string what = std::string("\nrefused: ") + e.what() + "\n";
      (void)!::write(2, what.data(), what.size());
      code = 2;
    } catch (const std::exception& e) {  // SimGrid's, on an option
      const std::string what = std::string("\nsimgrid: ") + e.what() + "\n";
      (void)!::write(2, what.data(), what.size());
      code = 2;
    }
    std::fflush(nullptr);
    ::_exit(code);
  }
  ::close(err[1]);
  const std::string text = read_all(err[0]);
  ::close(err[0]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return;
  // The first line of a message (SimGrid lists every config key after an unknown one).
  auto first_line = [](const std::string& t) { return t.substr(0, t.find('\n')); };
  const size_t refused = text.rfind("\nrefused: ");
  if (refused != std::string::npos) throw InputError(first_line(text.substr(refused + 10)));
  std::string args;
  for (const std::string& c : options.cfg) args += " --cfg=" + c;
  for (const std::string& l : options.log) args += " --log=" + l;
  const std::string who =
      "SimGrid refused" + (args.empty() ? std::string(" the platform") : args) + ": ";
  const size_t thrown = text.rfind("\nsimgrid: ");
  if (thrown != std::string::npos) throw InputError(who + first_line(text.substr(thrown + 10)));
  throw InputError(who + complaint(text));
}

}  // namespace rv
