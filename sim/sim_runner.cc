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

#include "core/error.h"
#include "core/output/run_output.h"
#include "exec/compute_threads.h"
#include "exec/env_assembly.h"
#include "sim/platform.h"
#include "sim/sim_churn.h"
#include "sim/sim_env.h"

namespace sg4 = simgrid::s4u;

namespace rv {
namespace {

// Configures `engine` for the scenario and builds its platform: the network model, the actors'
// stacks, SimGrid's own options (after the scenario's), then the hosts.
std::vector<sg4::Host*> make_platform(sg4::Engine& engine, const Scenario& s, bool numeric,
                                      const EngineOptions& engine_options) {
  xbt_log_control_set("root.thresh:critical");
  configure_network(engine, s.network);
  // Without guard pages an actor's stack is one plain allocation, so a 10,000-node run's tens of
  // thousands of actors (its nodes, and the network's carriers and receivers where many transfers
  // run at once: sim/sim_network.h) stay under Linux's 65,530 memory mappings per process (with
  // guards, two each). Timing runs only: a numeric node runs LibTorch on its stack, where an
  // overflow must stop at a guard page.
  if (!numeric) engine.set_config("contexts/guard-size:0");
  apply_engine_options(engine, engine_options);
  return build_platform(s);
}

// One simulation: the engine, the platform, the nodes' actors and what they leave behind. Actors
// run one at a time (SimGrid's contexts), so nothing here needs a lock.
class SimRun {
 public:
  SimRun(const Scenario& s, bool numeric, const NodeBody& body, Metrics* observer,
         std::vector<char> fold, const EngineOptions& engine_options)
      : s_(s),
        numeric_(numeric),
        body_(body),
        observer_(observer),
        args_(engine_options),
        engine_(&args_.argc, args_.argv.data()),
        hosts_(make_platform(engine_, s, numeric, engine_options)),
        n_(static_cast<int>(hosts_.size())),
        platform_file_(!s.network.platform.empty()),
        machine_(engine_.host_by_name_or_null(kMachineHost)),
        network_(hosts_, links_of(s), platform_file_),
        actors_(n_),
        finished_(n_, 1),
        present_(n_, 0),
        churn_(s.churn.enabled(s.devices)),
        membership_(network_, present_) {
    if (!fold.empty()) log_.fold(std::move(fold));
  }

  // Checkpoints of `nodes` (sim/sim_checkpoint.h); the observer first sees what the run had
  // done before a checkpoint it resumes from.
  void take_checkpoints(const SimCheckpointOptions& options, const std::vector<int>& nodes) {
    checkpoints_.emplace(options, nodes, log_, network_);
    if (observer_ != nullptr)
      for (const Event& e : log_.events()) observer_->record(e);
    checkpoints_->start(hosts_.at(static_cast<size_t>(nodes.empty() ? 0 : nodes.front())));
  }

  // Starts node r's actor (again, for a node that comes back: what was sent to it before is
  // gone).
  void launch(int r) {
    RV_CHECK(r >= 0 && r < n_, "simulate: no node " + std::to_string(r));
    finished_[r] = 0;
    present_[r] = 1;
    if (actors_[r]) network_.clear_inbox(r);
    actors_[r] = sg4::Actor::create("node" + std::to_string(r), hosts_[r], [this, r] { node(r); });
  }

  // Departures and arrivals, which go to the log and, as the nodes' events do, to the observer.
  // A node that leaves is gone, not stuck: it counts as finished.
  void start_churn_events() {
    if (!churn_) return;
    churn_log_.emplace(log_, observer_, nullptr);
    auto stop = [this](int r) {
      if (finished_[r]) return;
      finished_[r] = 1;
      actors_[r]->kill();
    };
    start_churn(
        s_, membership_, present_, *churn_log_, [this](int r) { launch(r); }, stop);
  }

  // Runs the engine to its end; the wall seconds its event loop took.
  Seconds run() {
    const auto loop_start = std::chrono::steady_clock::now();
    engine_.run();
    const Seconds wall =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - loop_start).count();
    actors_.clear();
    return wall;
  }

  // Throws what went wrong: a checkpoint's error, the first node's failure (bad input and a stop
  // at a checkpoint as they are, the rest naming the node), or a deadlock naming the nodes.
  void throw_failure() const {
    if (checkpoints_ && checkpoints_->error()) std::rethrow_exception(checkpoints_->error());
    if (first_error_) {
      try {
        std::rethrow_exception(first_error_);
      } catch (const InputError&) {
        throw;
      } catch (const StoppedAtCheckpoint&) {
        throw;
      } catch (const std::exception& e) {
        throw Error("simulation: node " + std::to_string(first_error_node_) +
                    " failed: " + e.what());
      }
    }
    std::string stuck;
    for (int r = 0; r < n_; ++r)
      if (!finished_[r]) stuck += (stuck.empty() ? "" : ", ") + std::to_string(r);
    if (!stuck.empty()) throw Error("simulation deadlocked: nodes " + stuck + " never finished");
  }

  std::vector<Event> take_events() { return log_.take(); }
  // When the last node actor ended (finished, failed or killed). The engine's clock may go on
  // after it: the network's kernel transfers under way are simulated to their end
  // (sim/sim_network.h), where carrier actors, daemons, are killed with the last node.
  Seconds last_exit() const { return last_exit_; }

 private:
  // Node r's actor: its environment, then the body. A failure stops every node (its peers would
  // otherwise wait for it forever); the first one is kept.
  void node(int r) {
    struct Exit {  // on every way out, a kill's unwinding included
      Seconds& last;
      ~Exit() { last = std::max(last, sg4::Engine::get_clock()); }
    } exit{last_exit_};
    try {
      SimTransport transport(r, network_);
      SimClock clock;
      SimCompute compute(numeric_, s_.device_of(r).compute_profile(),
                         platform_file_ ? hosts_[r]->get_speed() : 0, machine_);
      EnvParts parts{transport, clock, compute, log_, nullptr, observer_};
      if (churn_) parts.membership = &membership_;
      if (checkpoints_) parts.checkpoints = &*checkpoints_;
      NodeEnvStack stack(s_, r, parts);
      body_(stack.env(), r);
      finished_[r] = 1;
    } catch (const simgrid::ForcefulKillException&) {
      throw;  // the engine tears actors down; never swallow this
    } catch (...) {
      if (!first_error_) {
        first_error_ = std::current_exception();
        first_error_node_ = r;
      }
      finished_[r] = 1;
      sg4::Actor::kill_all();
    }
  }

  const Scenario& s_;
  const bool numeric_;
  const NodeBody& body_;
  Metrics* observer_;
  EngineArgv args_;  // SimGrid's command line
  sg4::Engine engine_;
  std::vector<sg4::Host*> hosts_;
  const int n_;
  const bool platform_file_;
  sg4::Host* const machine_;  // sim.shared_cores' machine, or null
  SimNetwork network_;
  std::vector<sg4::ActorPtr> actors_;
  EventLog log_;
  std::exception_ptr first_error_;
  int first_error_node_ = -1;
  std::vector<char> finished_;
  std::vector<char> present_;
  Seconds last_exit_ = 0;
  const bool churn_;
  SimMembership membership_;
  std::optional<SimCheckpoints> checkpoints_;
  std::optional<TeeMetrics> churn_log_;
};

}  // namespace

SimResult simulate(const Scenario& s, const std::vector<int>& nodes, bool numeric,
                   const NodeBody& body, Metrics* observer, std::vector<char> fold,
                   const EngineOptions& engine_options,
                   const SimCheckpointOptions& checkpoint_options) {
  SimRun run(s, numeric, body, observer, std::move(fold), engine_options);
  if (checkpoint_options.every > 0) run.take_checkpoints(checkpoint_options, nodes);
  for (int r : nodes) run.launch(r);
  run.start_churn_events();
  SimResult res;
  res.event_loop_wall_s = run.run();
  run.throw_failure();
  res.events = run.take_events();
  res.simulated_time = nodes.empty() ? sg4::Engine::get_clock() : run.last_exit();
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
