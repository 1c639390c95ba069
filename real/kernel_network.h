// real.shaper = "kernel": the nodes of one real run in network namespaces of their own, joined in
// a star like the simulator's. Each node's namespace holds one end of a veth pair (interface
// kInterface, address 10.213.x.y/16); the other end sits in the run's core namespace, on one
// bridge. The node's end shapes what it sends to up_mbps and the core's end what it receives to
// down_mbps, each with an htb class (this kernel has no netem: each receiver adds the links'
// latency after a message's arrival, emu/arrival_latency.h). Every byte is shaped, c10d's own
// collectives (training.allreduce = "gloo") included; their latency is not added.
//
// Needs root (CAP_NET_ADMIN), iproute2 (`ip`, `tc`) and util-linux (`nsenter`). The namespaces
// are named rv<launcher pid>-<rank> and rv<launcher pid>-core; the destructor removes them (their
// veths go with them), whatever happened to the run, and unmounts /run/netns if the run was the
// one that mounted it and no namespace is left there.
#pragma once

#include <string>
#include <vector>

#include "core/scenario/scenario.h"

namespace rv {

class KernelNetwork {
 public:
  static constexpr const char* kInterface = "rv0";  // each node's interface, inside its namespace

  // Builds the namespaces and links of `s`'s nodes. rv::InputError naming the command and its
  // message if a step fails (no root, no iproute2); what was built is removed again.
  explicit KernelNetwork(const Scenario& s);
  ~KernelNetwork();
  KernelNetwork(const KernelNetwork&) = delete;
  KernelNetwork& operator=(const KernelNetwork&) = delete;

  const std::string& namespace_of(int rank) const { return node_ns_.at(static_cast<size_t>(rank)); }
  std::string address_of(int rank) const;
  // The command that runs argv inside `rank`'s network namespace (nsenter --net: only the network
  // namespace changes, which also works in a chroot, where `ip netns exec` cannot remount).
  std::vector<std::string> wrap(int rank, const std::vector<std::string>& argv) const;

 private:
  void teardown();
  std::vector<std::string> inside(const std::string& ns,
                                  const std::vector<std::string>& argv) const;

  std::string ip_, tc_, nsenter_;
  bool netns_mounted_before_ = false;  // /run/netns was a mount point before this run
  std::string core_ns_;
  std::vector<std::string> node_ns_;
};

}  // namespace rv
