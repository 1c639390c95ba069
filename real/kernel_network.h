// real.shaper = "kernel": the nodes of one real run in network namespaces of their own, joined in
// a star like the simulator's. Each node's namespace holds one end of a veth pair (interface
// kInterface, address 10.213.x.y/16); the other end sits in the run's core namespace, on one
// bridge. On the packet path, in order, a message from a to b crosses:
//  - a's uplink: an htb class at a's end shaping what a sends to up_mbps, its queue a drop-tail
//    fifo (devices[].buffer_ms or buffer_packets; the kernel's default otherwise);
//  - a's latency: an rv-delay-line (emu/delay_line/) on an NFQUEUE of the core namespace holding
//    each packet that enters the bridge from a's port for a's one-way latency (mangle PREROUTING);
//  - b's latency: another holding each packet that leaves by b's port (mangle POSTROUTING) for b's;
//  - b's downlink: an htb class at b's port shaping what b receives to down_mbps (and its buffer).
// So TCP sees the scenario's round trip (this kernel has no netem), as a real home link would give
// it: slow start, window growth and the bandwidth-delay product are TCP's own. Every byte is shaped
// and delayed, c10d's own collectives (training.allreduce = "gloo") included. The delay lines are
// held in the core namespace, after the sender's veth, because delaying a local sender's packets in
// its own namespace stalls TCP (TCP Small Queues; emu/delay_line/README.md).
//
// Needs root (CAP_NET_ADMIN), iproute2 (`ip`, `tc`), util-linux (`nsenter`), iptables (the
// physdev match, br_netfilter) and rv-delay-line beside the running program. The namespaces are
// named rv<launcher pid>-<rank> and rv<launcher pid>-core; the destructor stops the delay lines and
// removes the namespaces (their veths go with them), whatever happened to the run, and unmounts
// /run/netns if the run was the one that mounted it and no namespace is left there.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "core/scenario/scenario.h"

namespace rv {

class KernelNetwork {
 public:
  static constexpr const char* kInterface = "rv0";  // each node's interface, inside its namespace

  // Builds the namespaces and links of `s`'s nodes, and starts the delay lines of the nodes with a
  // latency (the program `delay_line`). rv::InputError naming the command and its message if a
  // step fails (no root, no iproute2, no iptables, no delay line); what was built is removed again.
  explicit KernelNetwork(const Scenario& s, std::string delay_line = installed_delay_line());
  // rv-delay-line in the running program's folder (where the build and `cmake --install` put it
  // beside ravnest), or "" where it is not.
  static std::string installed_delay_line();
  ~KernelNetwork();
  KernelNetwork(const KernelNetwork&) = delete;
  KernelNetwork& operator=(const KernelNetwork&) = delete;

  // What the packet path did, read by finish().
  struct Record {
    std::string json;     // each delay line's counts and lateness, each shaped queue's drops
    std::string warning;  // a line for the user when the path was not the scenario's, else ""
  };
  // Stops the delay lines and reads the record (kernel_network.json in the run folder). The
  // warning names delay lines late by more than kLateUs at their 99th percentile and packets the
  // kernel's queues dropped. Call once, after the ranks have ended; the destructor stops the lines
  // otherwise.
  Record finish();
  static constexpr double kLateUs = 1000;  // µs

  const std::string& namespace_of(int rank) const { return node_ns_.at(static_cast<size_t>(rank)); }
  std::string address_of(int rank) const;
  // The command that runs argv inside `rank`'s network namespace (nsenter --net: only the network
  // namespace changes, which also works in a chroot, where `ip netns exec` cannot remount).
  std::vector<std::string> wrap(int rank, const std::vector<std::string>& argv) const;

 private:
  // One rv-delay-line: which node's latency it adds, which way, on which queue.
  struct DelayLineProcess {
    int rank = 0;
    bool uplink = true;  // as the node's packets enter the bridge; else as they leave to it
    int queue = 0;
    pid_t pid = -1;
    std::string output;  // its stdout and stderr
    std::string counts;  // its last line, once stopped
  };

  void step(const std::vector<std::string>& argv) const;
  void build_star(const Scenario& s);
  void start_delay_lines(const Scenario& s);
  void start_delay_line(DelayLineProcess& p, Seconds latency, int& rt_priority);
  std::string await_serving(DelayLineProcess& p);
  void stop_delay_lines();
  void teardown();
  static std::string port_of(int rank);  // the node's port on the core's bridge
  std::vector<std::string> inside(const std::string& ns,
                                  const std::vector<std::string>& argv) const;

  std::string ip_, tc_, nsenter_, iptables_, delay_line_;
  std::string temp_dir_;  // the delay lines' outputs
  int rt_priority_ = 0;   // their SCHED_FIFO priority; 0: the default policy (refused here)
  bool netns_mounted_before_ = false;  // /run/netns was a mount point before this run
  std::string core_ns_;
  std::vector<std::string> node_ns_;
  std::vector<DelayLineProcess> delay_lines_;
};

}  // namespace rv
