// SimGrid's own options, the way SimGrid users give them: `ravnest sim --cfg=name:value` and
// `--log=...` pass through to the engine (SimGrid's --cfg and --log syntax), applied after the
// scenario's own settings so that they override them. The keys the scenario owns are refused with
// the scenario key to use instead: network/model, network/latency-factor and
// network/bandwidth-factor (network.model, network.latency_factor, network.bandwidth_factor),
// because the planner and the emulator follow those too.
//
// SimGrid ends the process on some bad values (an unknown model name, an option without a value)
// instead of throwing, so preflight() tries the options, and the scenario's platform, in a child
// process first: bad input is reported with exit status 2 before any run folder exists.
#pragma once

#include <string>
#include <vector>

#include "core/scenario/scenario.h"

namespace simgrid::s4u {
class Engine;
}

namespace rv {

struct EngineOptions {
  std::vector<std::string> cfg;  // "name:value", as after --cfg=
  std::vector<std::string> log;  // as after --log= ("root.thresh:info", "s4u.fmt:%m%n")
  bool empty() const { return cfg.empty() && log.empty(); }
};

// Throws rv::InputError naming the option when one is not "name:value" or names a key the
// scenario owns.
void check_engine_options(const EngineOptions& options);

// SimGrid's command line with the options as it takes them ("--cfg=...", "--log=..."), for the
// engine's constructor, which reads those it needs at once (contexts/factory):
//   EngineArgv args(options);  simgrid::s4u::Engine engine(&args.argc, args.argv.data());
// Owns its strings; not copyable (argv points into them).
struct EngineArgv {
  explicit EngineArgv(const EngineOptions& options);
  EngineArgv(const EngineArgv&) = delete;
  EngineArgv& operator=(const EngineArgv&) = delete;
  std::vector<std::string> args;
  std::vector<char*> argv;  // null-terminated
  int argc = 0;
};
// Applies the options to `engine` again after the scenario's own settings (configure_network),
// before the platform is built, so that they win over those.
void apply_engine_options(simgrid::s4u::Engine& engine, const EngineOptions& options);

// Builds the engine, the options and the scenario's platform in a child process, as simulate()
// would; throws rv::InputError with SimGrid's complaint (or the platform's ScenarioError message)
// when that fails. Nothing to try (no options, no platform file): returns at once.
void preflight(const Scenario& scenario, const EngineOptions& options);

}  // namespace rv
