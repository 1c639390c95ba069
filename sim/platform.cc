#include "sim/platform.h"

#include <cstdio>

#include <simgrid/s4u/Link.hpp>
#include <simgrid/s4u/NetZone.hpp>

#include "core/units.h"

namespace sg4 = simgrid::s4u;

namespace rv {

void configure_network(sg4::Engine& engine, const NetworkSpec& network) {
  if (network.model == "ideal" || network.model == "tcp") {
    engine.set_config("network/model:CM02");
    engine.set_config("network/crosstraffic:0");
    engine.set_config("network/TCP-gamma:0");
  }
  // The bandwidth factor as net_factors() states it (for LV08 its own, unless a key replaces it).
  // Only a sliver of the latency is SimGrid's to charge (kSimGridLatencyFactor): the simulated
  // network delays each message by the rest, once per stream.
  const NetFactors f = net_factors(network);
  char buf[64];
  std::snprintf(buf, sizeof buf, "network/latency-factor:%.17g", kSimGridLatencyFactor);
  engine.set_config(buf);
  std::snprintf(buf, sizeof buf, "network/bandwidth-factor:%.17g", f.bandwidth);
  engine.set_config(buf);
}

std::vector<sg4::Host*> build_platform(const Scenario& scenario) {
  auto* zone = sg4::create_star_zone("pool");
  std::vector<sg4::Host*> hosts;
  const int n = scenario.node_count();
  hosts.reserve(n);
  for (int r = 0; r < n; ++r) {
    const DeviceGroup& d = scenario.device_of(r);
    const std::string name = "n" + std::to_string(r);
    sg4::Host* h = zone->create_host(name, d.flops_per_s());
    const double lat = d.latency_s();
    sg4::Link* up = zone->create_link(name + "-up", d.up_bytes_per_s())->set_latency(lat)->seal();
    sg4::Link* down =
        zone->create_link(name + "-down", d.down_bytes_per_s())->set_latency(lat)->seal();
    zone->add_route(h->get_netpoint(), nullptr, nullptr, nullptr, {sg4::LinkInRoute(up)}, false);
    zone->add_route(nullptr, h->get_netpoint(), nullptr, nullptr, {sg4::LinkInRoute(down)}, false);
    hosts.push_back(h);
  }
  zone->seal();
  return hosts;
}

}  // namespace rv
