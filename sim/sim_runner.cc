#include "sim/sim_runner.h"

#include <ATen/Parallel.h>
#include <xbt/log.h>

#include <algorithm>
#include <chrono>
#include <exception>
#include <optional>
#include <simgrid/Exception.hpp>
#include <simgrid/s4u/Actor.hpp>
#include <simgrid/s4u/Engine.hpp>
#include <string>

#include "core/compute_threads.h"
#include "core/error.h"
#include "core/output/run_output.h"
#include "exec/env_assembly.h"
#include "sim/platform.h"
#include "sim/sim_churn.h"
#include "sim/sim_env.h"

namespace sg4 = simgrid::s4u;

namespace rv {
SimResult simulate(const Scenario& s, const std::vector<int>& nodes, bool numeric,
                   const NodeBody& body, Metrics* observer, std::vector<char> fold,
                   const EngineOptions& engine_options,
                   const SimCheckpointOptions& checkpoint_options) {
  EngineArgv args(engine_options);  // SimGrid's command line
  sg4::Engine engine(&args.argc, args.argv.data());
  xbt_log_control_set("root.thresh:critical");
  configure_network(engine, s.network);
  // Without guard pages an actor's stack is one plain allocation, so a 10,000-node run's tens of
  // thousands of actors (its nodes, and the network's carriers and receivers where many transfers
  // run at once: sim/sim_network.h) stay under Linux's 65,530 memory mappings per process (with
  // guards, two each). Timing runs only: a numeric node runs LibTorch on its stack, where an
  // overflow must stop at a guard page.
  if (!numeric) engine.set_config("contexts/guard-size:0");
  apply_engine_options(engine, engine_options);
  std::vector<sg4::Host*> hosts = build_platform(s);
  const int n = static_cast<int>(hosts.size());
  const bool platform_file = !s.network.platform.empty();
  SimNetwork network(hosts, links_of(s), platform_file);
  std::vector<sg4::ActorPtr> actors(n);

  EventLog log;  // shared: actors run one at a time, so no locks
  if (!fold.empty()) log.fold(std::move(fold));
  std::exception_ptr first_error;
  int first_error_node = -1;
  std::vector<char> finished(n, 1);
  std::vector<char> present(n, 0);
  // The run's simulated time: when its last node actor ended (finished, failed or killed). The
  // engine's clock may go on after it: the network's kernel transfers under way are simulated to
  // their end (sim/sim_network.h), where carrier actors, daemons, are killed with the last node.
  Seconds last_exit = 0;
  const bool churn = s.churn.enabled(s.devices);
  SimMembership membership(network, present);
  std::optional<SimCheckpoints> checkpoints;
  if (checkpoint_options.every > 0) {
    checkpoints.emplace(checkpoint_options, nodes, log, network);
    if (observer != nullptr)
      for (const Event& e : log.events()) observer->record(e);  // what the run had done before
    checkpoints->start(hosts.at(static_cast<size_t>(nodes.empty() ? 0 : nodes.front())));
  }
  auto launch = [&](int r) {
    RV_CHECK(r >= 0 && r < n, "simulate: no node " + std::to_string(r));
    finished[r] = 0;
    present[r] = 1;
    if (actors[r]) network.clear_inbox(r);  // it comes back: what was sent to it before is gone
    actors[r] = sg4::Actor::create("node" + std::to_string(r), hosts[r], [&, r] {
      struct Exit {  // on every way out, a kill's unwinding included
        Seconds& last;
        ~Exit() { last = std::max(last, sg4::Engine::get_clock()); }
      } exit{last_exit};
      try {
        SimTransport transport(r, network);
        SimClock clock;
        SimCompute compute(numeric, s.device_of(r).compute_profile(),
                           platform_file ? hosts[r]->get_speed() : 0);
        EnvParts parts{transport, clock, compute, log, nullptr, observer};
        if (churn) parts.membership = &membership;
        if (checkpoints) parts.checkpoints = &*checkpoints;
        NodeEnvStack stack(s, r, parts);
        body(stack.env(), r);
        finished[r] = 1;
      } catch (const simgrid::ForcefulKillException&) {
        throw;  // the engine tears actors down; never swallow this
      } catch (...) {
        if (!first_error) {
          first_error = std::current_exception();
          first_error_node = r;
        }
        finished[r] = 1;
        // Stop everybody: a failed node would otherwise leave its peers waiting forever.
        sg4::Actor::kill_all();
      }
    });
  };
  for (int r : nodes) launch(r);
  // Departures and arrivals go to the log and, as the nodes' events do, to the observer.
  TeeMetrics churn_log(log, observer, nullptr);
  if (churn) {
    // A node that leaves is gone, not stuck: it counts as finished.
    auto stop = [&](int r) {
      if (finished[r]) return;
      finished[r] = 1;
      actors[r]->kill();
    };
    start_churn(s, membership, present, churn_log, launch, stop);
  }
  const auto loop_start = std::chrono::steady_clock::now();
  engine.run();
  const Seconds loop_wall =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - loop_start).count();
  actors.clear();
  if (checkpoints && checkpoints->error()) std::rethrow_exception(checkpoints->error());
  if (first_error) {
    try {
      std::rethrow_exception(first_error);
    } catch (const InputError&) {
      throw;
    } catch (const StoppedAtCheckpoint&) {
      throw;
    } catch (const std::exception& e) {
      throw Error("simulation: node " + std::to_string(first_error_node) + " failed: " + e.what());
    }
  }
  std::string stuck;
  for (int r = 0; r < n; ++r)
    if (!finished[r]) stuck += (stuck.empty() ? "" : ", ") + std::to_string(r);
  if (!stuck.empty()) throw Error("simulation deadlocked: nodes " + stuck + " never finished");
  SimResult res;
  res.events = log.take();
  res.simulated_time = nodes.empty() ? sg4::Engine::get_clock() : last_exit;
  res.event_loop_wall_s = loop_wall;
  return res;
}

SimResult run_simulation(const RunSpec& spec, Metrics* observer, const EngineOptions& engine,
                         const SimCheckpointOptions& checkpoints) {
  const Scenario& s = *spec.scenario;
  const bool numeric = s.sim.mode == SimMode::kNumeric;
  RV_CHECK(!numeric || spec.data != nullptr, "numeric simulation without a dataset");
  set_compute_threads(1);  // deterministic maths; actors share one OS thread anyway
  // Under churn every node present at the start runs: the plan's spares wait for a stage.
  const bool churn = s.churn.enabled(s.devices);
  std::vector<int> nodes;
  for (int r = 0; r < spec.plan->nodes; ++r)
    if (spec.plan->role_of(r).stage >= 0 || (churn && r < s.initial_node_count()))
      nodes.push_back(r);
  // output.metrics = "summary": the nodes outside the trace keep their messages and waits as
  // totals only (all that node_metrics.csv and summary.json need).
  std::vector<char> fold;
  if (s.output.metrics == MetricsOutput::kSummary) {
    fold.assign(static_cast<size_t>(spec.plan->nodes), 1);
    if (s.output.trace) {
      const std::vector<char> traced = traced_nodes(*spec.plan, s.output.trace_nodes);
      for (size_t i = 0; i < fold.size(); ++i) fold[i] = !traced[i];
    }
  }
  return simulate(
      s, nodes, numeric, [&spec](NodeEnv& env, int r) { run_node(env, spec, r); }, observer,
      std::move(fold), engine, checkpoints);
}

}  // namespace rv
