// One error root for the whole project (in the manner of gloo::Exception).
//
// Contract: every error that reaches `main` derives from rv::Error. `main` maps
//   - rv::InputError (bad scenario, bad command line, bad peer message, missing file) to exit 2,
//   - any other rv::Error (a peer died, a timeout, an internal invariant) to exit 1.
// Messages say where: a scenario error names file, line and key.
#pragma once

#include <stdexcept>
#include <string>

namespace rv {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

// A command stopped by the user (SIGINT, SIGTERM, SIGHUP) after cleaning up on the way out (the
// launcher's children killed, temporary folders removed). `main` prints the message, then
// re-raises the signal with its default action, so the caller sees the usual status.
class Interrupted : public Error {
 public:
  explicit Interrupted(int sig)
      : Error("interrupted by signal " + std::to_string(sig) +
              ": the run was stopped and its temporary files removed"),
        signal_(sig) {}
  int signal() const { return signal_; }

 private:
  int signal_;
};

// Bad input from a user or a peer: the run did not start (or stopped) and nothing was written.
class InputError : public Error {
 public:
  explicit InputError(const std::string& what) : Error(what) {}
};

// A scenario file problem; `where` is "file:line" (or "file" or "--set") and `key` the dotted key.
class ScenarioError : public InputError {
 public:
  ScenarioError(const std::string& where, const std::string& key, const std::string& what)
      : InputError(where + ": " + (key.empty() ? std::string() : "key '" + key + "': ") + what),
        where_(where),
        key_(key) {}
  const std::string& where() const { return where_; }
  const std::string& key() const { return key_; }

 private:
  std::string where_;
  std::string key_;
};

// Bad input found by code that knows the scenario key at fault but not the file (building a model
// from its keys): whoever holds the Scenario rethrows it as a ScenarioError with the key's line
// (Scenario::at_key).
class KeyError : public InputError {
 public:
  KeyError(const std::string& key, const std::string& what)
      : InputError("key '" + key + "': " + what), key_(key), what_(what) {}
  const std::string& key() const { return key_; }
  const std::string& problem() const { return what_; }

 private:
  std::string key_;
  std::string what_;
};

// The planner refuses a scenario whose pool cannot run it (replicas on nodes that cannot hold the
// model, clusters without enough RAM): bad input for one run, and a result for a sweep, which
// records it (refused.json) for the report.
class PlanRefused : public ScenarioError {
 public:
  using ScenarioError::ScenarioError;
};

// A peer failed, closed its connection or did not answer within the timeout.
class PeerError : public Error {
 public:
  explicit PeerError(const std::string& what) : Error(what) {}
};

// Internal invariant checks that name the source position.
#define RV_CHECK(cond, msg)                                                                   \
  do {                                                                                        \
    if (!(cond))                                                                              \
      throw ::rv::Error(std::string("[") + __FILE__ + ":" + std::to_string(__LINE__) + "] " + \
                        (msg));                                                               \
  } while (0)

}  // namespace rv
