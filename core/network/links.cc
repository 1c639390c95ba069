#include "core/network/links.h"

#include <algorithm>
#include <limits>
#include <map>

#include "core/error.h"

namespace rv {

NetworkLinks::NetworkLinks(std::vector<NodeLinks> n)
    : nodes(std::move(n)), region(nodes.size(), 0), region_names{""}, between(1) {
  if (!nodes.empty()) latency_factor = nodes.front().latency_factor;
}

// Summed in the order the star always has (sender, receiver), the region link last, so that a
// star's figures are the same to the last bit with or without regions.
Seconds NetworkLinks::route_latency(int src, int dst) const {
  Seconds l = nodes[static_cast<size_t>(src)].latency + nodes[static_cast<size_t>(dst)].latency;
  const int k = inter(src, dst);
  if (k >= 0) l += between[static_cast<size_t>(k)].latency;
  return l;
}

Seconds NetworkLinks::route_delay(int src, int dst) const {
  const NodeLinks& a = nodes[static_cast<size_t>(src)];
  const NodeLinks& b = nodes[static_cast<size_t>(dst)];
  Seconds l = a.latency_factor * a.latency + b.latency_factor * b.latency;
  const int k = inter(src, dst);
  if (k >= 0) l += latency_factor * between[static_cast<size_t>(k)].latency;
  return l;
}

double NetworkLinks::route_bandwidth(int src, int dst) const {
  double bw = std::min(nodes[static_cast<size_t>(src)].up, nodes[static_cast<size_t>(dst)].down);
  const int k = inter(src, dst);
  if (k >= 0) bw = std::min(bw, between[static_cast<size_t>(k)].bandwidth);
  return std::min(bw, rate_cap(src, dst));
}

double NetworkLinks::rate_cap(int src, int dst) const {
  const Seconds rtt = 2 * route_latency(src, dst);
  return window > 0 && rtt > 0 ? window / rtt : std::numeric_limits<double>::infinity();
}

StartupPacing NetworkLinks::pacing(int src, int dst) const {
  if (!paced) return {};
  return {2 * route_latency(src, dst), route_delay(src, dst), route_bandwidth(src, dst)};
}

double region_link_bytes_per_s(const RegionLinkSpec& link, double dilation) {
  return link.mbps * kMbpsToBytesPerSecond / dilation;
}

Seconds region_link_latency_s(const RegionLinkSpec& link, double dilation) {
  return link.latency_ms * kMsToSeconds * dilation;
}

NetworkLinks links_of(const Scenario& s) {
  const NetFactors f = net_factors(s.network);
  std::vector<NodeLinks> nodes;
  nodes.reserve(static_cast<size_t>(s.node_count()));
  for (int r = 0; r < s.node_count(); ++r) {
    const DeviceGroup& d = s.device_of(r);
    nodes.push_back({d.up_bytes_per_s() * f.bandwidth, d.down_bytes_per_s() * f.bandwidth,
                     d.latency_s(), f.latency});
  }
  NetworkLinks links(std::move(nodes));
  links.latency_factor = f.latency;
  links.window = f.tcp_gamma;
  links.paced = s.network.model == NetworkModel::kTcp;
  if (s.network.topology != Topology::kRegions) return links;
  // Regions are numbered in the order the devices first name them.
  std::map<std::string, int> index;
  links.region_names.clear();
  for (const DeviceGroup& d : s.devices)
    if (index.emplace(d.region, static_cast<int>(index.size())).second)
      links.region_names.push_back(d.region);
  links.regions = static_cast<int>(index.size());
  links.region.clear();
  for (int r = 0; r < s.node_count(); ++r) links.region.push_back(index.at(s.device_of(r).region));
  links.between.assign(static_cast<size_t>(links.regions) * links.regions, RegionLink{});
  for (const RegionLinkSpec& l : s.network.link) {
    const auto a = index.find(l.a), b = index.find(l.b);
    if (a == index.end() || b == index.end()) continue;  // a region no device is in: no traffic
    const RegionLink link{region_link_bytes_per_s(l, s.dilation) * f.bandwidth,
                          region_link_latency_s(l, s.dilation)};
    links.between[static_cast<size_t>(a->second * links.regions + b->second)] = link;
    links.between[static_cast<size_t>(b->second * links.regions + a->second)] = link;
  }
  for (int a = 0; a < links.regions; ++a)
    for (int b = 0; b < links.regions; ++b)
      RV_CHECK(a == b || links.between[static_cast<size_t>(a * links.regions + b)].bandwidth > 0,
               "network links: no link between regions " + links.region_names[a] + " and " +
                   links.region_names[b] + " (the scenario check lets none through)");
  return links;
}

}  // namespace rv
