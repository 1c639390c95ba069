#include "sim/platform.h"

#include <algorithm>
#include <cstdio>
#include <simgrid/s4u/Link.hpp>
#include <simgrid/s4u/NetZone.hpp>

#include "core/error.h"
#include "core/network/links.h"
#include "core/units.h"

namespace sg4 = simgrid::s4u;

namespace rv {

void configure_network(sg4::Engine& engine, const NetworkSpec& network) {
  if (network.model == NetworkModel::kIdeal || network.model == NetworkModel::kTcp) {
    engine.set_config("network/model:CM02");
    engine.set_config("network/crosstraffic:0");
  }
  // The bandwidth factor as net_factors() states it (for LV08 its own, unless a key replaces it).
  // Only a sliver of the latency is SimGrid's to charge (kSimGridLatencyFactor): the simulated
  // network delays each message by the rest, once per stream.
  const NetFactors f = net_factors(network);
  char buf[64];
  // TCP's window (NetworkLinks::rate_cap): CM02 bounds a transfer at TCP-gamma / (2 x its route's
  // latency as given, before any latency factor), in units that the bandwidth factor then scales;
  // given window / factor, a transfer's payload runs at most window / round trip, as in the
  // emulator and the planner.
  std::snprintf(buf, sizeof buf, "network/TCP-gamma:%.17g", f.tcp_gamma / f.bandwidth);
  engine.set_config(buf);
  std::snprintf(buf, sizeof buf, "network/latency-factor:%.17g", kSimGridLatencyFactor);
  engine.set_config(buf);
  std::snprintf(buf, sizeof buf, "network/bandwidth-factor:%.17g", f.bandwidth);
  engine.set_config(buf);
}

namespace {

// Node r's host and its two links in `zone`, routed through the zone's core.
sg4::Host* add_node(sg4::NetZone* zone, const Scenario& scenario, int r) {
  const DeviceGroup& d = scenario.device_of(r);
  const std::string name = "n" + std::to_string(r);
  sg4::Host* h = zone->create_host(name, d.flops_per_s());
  const double lat = d.latency_s();
  sg4::Link* up = zone->create_link(name + "-up", d.up_bytes_per_s())->set_latency(lat)->seal();
  sg4::Link* down =
      zone->create_link(name + "-down", d.down_bytes_per_s())->set_latency(lat)->seal();
  zone->add_route(h->get_netpoint(), nullptr, nullptr, nullptr, {sg4::LinkInRoute(up)}, false);
  zone->add_route(nullptr, h->get_netpoint(), nullptr, nullptr, {sg4::LinkInRoute(down)}, false);
  return h;
}

// The machine of sim.shared_cores in `zone` (none where it is 0).
void add_machine(sg4::NetZone* zone, const Scenario& scenario) {
  if (scenario.sim.shared_cores > 0)
    zone->create_host(kMachineHost, kMachineCoreSpeed)->set_core_count(scenario.sim.shared_cores);
}

}  // namespace

std::string platform_host_name(const Scenario& scenario, int rank) {
  int r = rank;
  for (const DeviceGroup& g : scenario.devices) {
    if (r < g.count) return g.count == 1 ? g.name : g.name + "-" + std::to_string(r);
    r -= g.count;
  }
  throw Error("node rank " + std::to_string(rank) + " is outside the device pool");
}

namespace {

std::vector<sg4::Host*> load_platform_file(const Scenario& scenario) {
  const std::string key = "network.platform";
  sg4::Engine& engine = *sg4::Engine::get_instance();
  try {
    engine.load_platform(scenario.network.platform);
  } catch (const std::exception& e) {
    throw ScenarioError(scenario.where(key), key,
                        std::string("SimGrid cannot load it: ") + e.what());
  }
  const int n = scenario.node_count();
  std::vector<sg4::Host*> hosts;
  for (int r = 0; r < n; ++r) {
    const std::string name = platform_host_name(scenario, r);
    sg4::Host* h = engine.host_by_name_or_null(name);
    if (h == nullptr)
      throw ScenarioError(scenario.where(key), key,
                          "no host named \"" + name + "\" for node " + std::to_string(r) + " in " +
                              scenario.network.platform + " (" +
                              std::to_string(engine.get_host_count()) + " hosts)");
    hosts.push_back(h);
  }
  return hosts;
}

}  // namespace

void check_platform_routes(const Scenario& scenario, const std::vector<sg4::Host*>& hosts) {
  if (scenario.network.platform.empty()) return;
  const std::string key = "network.platform";
  const int n = static_cast<int>(hosts.size());
  // Up to 1,000 nodes: a million routes.
  if (n <= 1000)
    for (int a = 0; a < n; ++a)
      for (int b = 0; b < n; ++b) {
        if (a == b) continue;
        std::vector<sg4::Link*> links;
        double latency = 0;
        try {
          hosts[a]->route_to(hosts[b], links, &latency);
        } catch (const std::exception& e) {
          throw ScenarioError(scenario.where(key), key,
                              "no route from " + hosts[a]->get_name() + " to " +
                                  hosts[b]->get_name() + ": " + e.what());
        }
      }
}

std::vector<sg4::Host*> build_platform(const Scenario& scenario) {
  if (!scenario.network.platform.empty()) {
    if (scenario.sim.shared_cores > 0)
      throw ScenarioError(scenario.where("sim.shared_cores"), "sim.shared_cores",
                          "a machine of shared cores is for the scenario's own platform; with "
                          "network.platform, the file's hosts are where the nodes compute "
                          "(give several nodes one host there)");
    return load_platform_file(scenario);
  }
  const int n = scenario.node_count();
  std::vector<sg4::Host*> hosts;
  hosts.reserve(n);
  if (scenario.network.topology != Topology::kRegions) {
    auto* zone = sg4::create_star_zone("pool");
    for (int r = 0; r < n; ++r) hosts.push_back(add_node(zone, scenario, r));
    add_machine(zone, scenario);
    zone->seal();
    return hosts;
  }
  // Regions: a star zone per region, whose core is its gateway (a router on no link of its own),
  // inside a full zone whose routes join every two regions' gateways over the link from one to
  // the other. SimGrid routes a message between regions as the sender's uplink, that link and
  // the receiver's downlink (sender's zone to its gateway, then across, then to the receiver).
  // The region links' rates and latencies are those of links_of() before the network model's
  // factors, which SimGrid applies itself (configure_network).
  NetworkLinks links = links_of(scenario);
  auto* world = sg4::create_full_zone("world");
  std::vector<sg4::NetZone*> zones;
  std::vector<simgrid::kernel::routing::NetPoint*> cores;
  for (int k = 0; k < links.regions; ++k) {
    auto* zone = sg4::create_star_zone("region-" + links.region_names[static_cast<size_t>(k)]);
    zone->set_parent(world);
    auto* core = zone->create_router("core-" + links.region_names[static_cast<size_t>(k)]);
    zones.push_back(zone);
    cores.push_back(core);
  }
  for (int r = 0; r < n; ++r)
    hosts.push_back(add_node(zones[static_cast<size_t>(links.region[r])], scenario, r));
  for (sg4::NetZone* z : zones) z->seal();
  auto index = [&](const std::string& region) {
    return static_cast<size_t>(
        std::find(links.region_names.begin(), links.region_names.end(), region) -
        links.region_names.begin());
  };
  for (const RegionLinkSpec& spec : scenario.network.link)
    for (const auto& [from, to] : {std::pair{spec.a, spec.b}, std::pair{spec.b, spec.a}}) {
      const size_t a = index(from), b = index(to);
      sg4::Link* link =
          world->create_link(from + ">" + to, region_link_bytes_per_s(spec, scenario.dilation))
              ->set_latency(region_link_latency_s(spec, scenario.dilation))
              ->seal();
      world->add_route(zones[a]->get_netpoint(), zones[b]->get_netpoint(), cores[a], cores[b],
                       {sg4::LinkInRoute(link)}, false);
    }
  add_machine(world, scenario);
  world->seal();
  return hosts;
}

}  // namespace rv
