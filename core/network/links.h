// The scenario's network, as the simulator (sim/), the planner's cost model (planner/cost.h) and
// the real-run emulator (emu/) all see it: one definition of every route.
//
// Topology "star": every node reaches a common core through its own uplink and downlink, each with
// the node's one-way latency. Topology "regions": every node reaches its region's core that way,
// and each ordered pair of regions has a link of its own (one per direction, each with the pair's
// bandwidth, shared by every flow that crosses it, and the pair's one-way latency). A message from
// a to b crosses a's uplink, then, when their regions differ, the link from a's region to b's,
// then b's downlink; its route's latency is the sum of the latencies of the links it crosses.
//
// Units: bytes per second and seconds, dilated (Scenario::dilation), with the network model's
// bandwidth factor applied to every rate (net_factors); latencies are as given, and
// `latency_factor` says how the model stretches them.
#pragma once

#include <string>
#include <vector>

#include "core/network/tcp_pacing.h"
#include "core/scenario/scenario.h"
#include "core/units.h"

namespace rv {

// One node's links to its core.
struct NodeLinks {
  double up = 0;        // bytes per second
  double down = 0;      // bytes per second
  Seconds latency = 0;  // one way, between the node and its core
  // The network model's latency factor (net_factors): a message waits this times the latency,
  // while CM02 still weighs flows by the latency as given.
  double latency_factor = 1;
};

// The link from one region's core to another's (one direction).
struct RegionLink {
  double bandwidth = 0;  // bytes per second, shared by every flow that crosses it
  Seconds latency = 0;   // one way
};

struct NetworkLinks {
  // A star of `nodes` (every node in region 0); implicit, so that a star is given as its nodes.
  NetworkLinks(std::vector<NodeLinks> nodes = {});  // NOLINT(google-explicit-constructor)

  std::vector<NodeLinks> nodes;  // by rank
  std::vector<int> region;       // by rank: its region's index (0 under a star)
  int regions = 1;
  std::vector<std::string> region_names;  // by index ("" under a star)
  // [from * regions + to]; the diagonal is unused (a region's nodes meet at its core).
  std::vector<RegionLink> between;
  double latency_factor = 1;  // the network model's, for the region links
  // The network model's TCP window (net_factors' tcp_gamma), bytes; 0: no cap.
  double window = 0;
  // The network model's warm floor (tcp: TCP BBR's pacing before a connection fills its path,
  // core/network/tcp_pacing.h), held per connection by the simulator and the emulator.
  bool paced = false;

  int size() const { return static_cast<int>(nodes.size()); }
  // The index in `between` of the link a message from node `src` to node `dst` crosses, or -1
  // where both are in one region.
  int inter(int src, int dst) const {
    const int a = region[static_cast<size_t>(src)], b = region[static_cast<size_t>(dst)];
    return a == b ? -1 : a * regions + b;
  }
  // The route's latency as given (CM02's sharing weight, TCP's window): the sum over its links.
  Seconds route_latency(int src, int dst) const;
  // The route's latency as the network model charges it: each link's times the model's factor.
  Seconds route_delay(int src, int dst) const;
  // The rate a lone message gets: its slowest link's, and at most rate_cap's.
  double route_bandwidth(int src, int dst) const;
  // The most a flow from src to dst may run at, TCP's window over its round trip: window / (2 x
  // route_latency), bytes per second; infinity without a window or a latency.
  double rate_cap(int src, int dst) const;
  // The warm floor of the connection from src to dst (off unless `paced`): its round trip as
  // given, the one-way delay as the model charges it, its lone flow's rate.
  StartupPacing pacing(int src, int dst) const;
};

// A [[network.link]] entry's rate (each way) and latency, dilated, before the network model's
// factors: as SimGrid's link is given them (sim/platform.h).
double region_link_bytes_per_s(const RegionLinkSpec& link, double dilation);
Seconds region_link_latency_s(const RegionLinkSpec& link, double dilation);

// The links of the scenario's nodes and regions, in the units above.
NetworkLinks links_of(const Scenario& s);

}  // namespace rv
