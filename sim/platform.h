// The SimGrid platform of a scenario: one host per node (speed from tflops) in a star zone; each
// node has its own uplink (up_mbps, latency_ms) and downlink (down_mbps, latency_ms) to a common
// core, so a transfer from i to j crosses up_i then down_j: latency lat_i + lat_j, bandwidth
// min(up_i, down_j) (shared with the other flows on those links).
#pragma once

#include <simgrid/s4u/Engine.hpp>
#include <simgrid/s4u/Host.hpp>
#include <string>
#include <vector>

#include "core/scenario/scenario.h"

namespace rv {

// Applies the scenario's network model to `engine` (before the platform is built), with the
// factors net_factors() gives:
//   tcp: CM02 with no cross-traffic and no TCP window cap, at TCP's goodput: a lone transfer of S
//        bytes takes latency + S / (0.962 bandwidth);
//   lv08: SimGrid's default TCP-calibrated model (cross-traffic, window cap, RTT weighting);
//   ideal: CM02 with no cross-traffic and no TCP window cap, so a lone transfer of S bytes takes
//          exactly latency + S / bandwidth (for analytic checks).
void configure_network(simgrid::s4u::Engine& engine, const NetworkSpec& network);

// The share of a route's latency that SimGrid itself charges a transfer; the simulated network
// (sim/sim_network.h) charges the rest of latency x net_factors().latency before the transfer
// starts, once per stream. Not 0: CM02 weighs a flow by its route's latency (TCP's RTT
// unfairness) only when the flow has a latency phase of its own; with none it weighs every flow
// as 1 (SimGrid's NetworkCm02Model::communicate). Its window cap (LV08) uses the latency as given
// in either case.
constexpr double kSimGridLatencyFactor = 1e-6;

// With sim.shared_cores = C > 0, the machine the nodes compute on: a host of C cores named
// kMachineHost, each core kMachineCoreSpeed flop/s (a unit, not a device's: a node's span of t
// seconds is an execution of t x kMachineCoreSpeed on one core), on no link.
constexpr const char* kMachineHost = "machine";
constexpr double kMachineCoreSpeed = 1e9;

// Builds the hosts and links (and the machine of sim.shared_cores); returns the host of every
// node, by rank. With network.platform, loads
// that file instead and finds each node's host by name (platform_host_name); throws ScenarioError
// at network.platform when one is missing.
std::vector<simgrid::s4u::Host*> build_platform(const Scenario& scenario);

// With network.platform: throws ScenarioError at that key when two nodes (of up to 1,000) have no
// route between their hosts. preflight() checks it once, before a run (engine_options.h).
void check_platform_routes(const Scenario& scenario, const std::vector<simgrid::s4u::Host*>& hosts);

// The host of node `rank` in a network.platform file: its group's name for a group of one, else
// "<name>-<i>", i its index in the group.
std::string platform_host_name(const Scenario& scenario, int rank);

}  // namespace rv
