// One node's NodeEnv, assembled in one place for every executor (sim, loopback, real), in the
// manner of LevelDB building its Env stack once. The executor supplies its base parts; the
// scenario's wrappers are applied here, once, in a fixed order:
//   transport  ShapedTransport: the executor's emulated network, if it runs one (innermost, so
//              faults act on what the algorithm sends); FaultyTransport: the scenario's injected
//              faults for this node (or an override)
//   metrics    the node's own sink, teed to an optional observer (progress, a test), under the
//              observer's lock when several nodes share it from different threads
//   direct     the executor's direct channel, only where no wrapper above acts in this run
//
// Lifetime: the base parts, the observer and its lock outlive the NodeEnvStack, which owns the
// wrappers. Threading: one stack belongs to one node, like the NodeEnv it holds.
#pragma once

#include <mutex>
#include <optional>

#include "core/env.h"
#include "core/fault_transport.h"
#include "core/scenario/scenario.h"
#include "emu/emulated_network.h"

namespace rv {

// What an executor provides for one node.
struct EnvParts {
  Transport& transport;
  Clock& clock;
  Compute& compute;
  Metrics& metrics;                    // the node's own sink (its event log)
  Collectives* collectives = nullptr;  // the executor's own collectives, if it has any
  Metrics* observer = nullptr;         // also sees every event (progress, tests), if given
  std::mutex* observer_mu = nullptr;  // held around the observer when nodes share it across threads
  NetworkEmulator* network = nullptr;  // the emulated network the node's sends go through, if any
  Membership* membership = nullptr;    // churn: the run's membership, if nodes come and go
  Checkpoints* checkpoints = nullptr;  // the run's checkpoints, if it takes them
  // Direct exchanges (core/env.h DirectChannel), if the executor has them. The node's NodeEnv gets
  // the channel only if nothing wraps the transport in any node of the run: no emulated network
  // here, no fault injected anywhere in the scenario (a per-node override below included), for a
  // channel would bypass both, and every node must see the same.
  DirectChannel* direct = nullptr;
};

// Records into the node's sink, then into the observer (under its lock, if any).
class TeeMetrics : public Metrics {
 public:
  TeeMetrics(Metrics& own, Metrics* observer, std::mutex* observer_mu)
      : own_(own), observer_(observer), observer_mu_(observer_mu) {}
  void record(const Event& e) override;

 private:
  Metrics& own_;
  Metrics* observer_;
  std::mutex* observer_mu_;
};

class NodeEnvStack {
 public:
  // `node`'s environment with the scenario's wrappers; `faults`, if given, replaces the faults the
  // scenario injects into this node (tests of failure handling).
  NodeEnvStack(const Scenario& s, int node, const EnvParts& base,
               const FaultSpec* faults = nullptr);
  NodeEnvStack(const NodeEnvStack&) = delete;
  NodeEnvStack& operator=(const NodeEnvStack&) = delete;

  NodeEnv& env() { return env_; }

  // Whether a node of `s` may use the executor's direct channel when its network is `shaped` (a
  // ShapedTransport in the stack) or not: nothing between the algorithm and the transport may
  // need to see the messages (no shaping, no faults the scenario injects). An executor that sets
  // the channel up beforehand asks this (real/node_process.cc); the stack asks it again with a
  // test's fault override (direct_allowed).
  static bool direct_possible(const Scenario& s, bool shaped);

 private:
  // Whether the node may use the executor's direct channel (EnvParts::direct).
  static bool direct_allowed(const Scenario& s, const EnvParts& base, const FaultSpec* faults);

  std::optional<ShapedTransport> shaped_;
  FaultyTransport transport_;
  TeeMetrics metrics_;
  NodeEnv env_;
};

}  // namespace rv
