// NodeEnv inside SimGrid: one actor per node.
//
// Messages go through the simulated network (sim/sim_network.h): one connection per pair of nodes,
// in send order, each carrying its message's modeled size; a receiver takes the messages in the
// order they arrive, from whichever peer (no head-of-line blocking between peers, as with one TCP
// connection per peer). Compute runs the LibTorch maths (numeric mode), then executes the modeled
// flops on the node's host. Must be used from the node's own actor.
#pragma once

#include <simgrid/forward.h>

#include <limits>

#include "core/compute/profile.h"
#include "core/env.h"
#include "sim/sim_network.h"

namespace rv {

class SimTransport : public Transport {
 public:
  // The network outlives the transport.
  SimTransport(int rank, SimNetwork& network) : rank_(rank), network_(network) {}
  int rank() const override { return rank_; }
  int size() const override { return network_.size(); }
  void send(int dst, Message msg) override;
  Message recv() override { return network_.recv(rank_); }
  std::optional<Message> try_recv() override { return network_.try_recv(rank_); }
  void flush() override { network_.flush(rank_); }

 private:
  int rank_;
  SimNetwork& network_;
};

class SimClock : public Clock {
 public:
  Seconds now() const override;
  void sleep_for(Seconds s) override;
};

// Charges work at the node's device model: time_of(work, device, idle, wake) seconds, `idle` the
// simulated time since the node's previous unit of work ended (its first unit: after an unbounded
// wait) and `wake` as DeviceHistory (core/compute/profile.h) gives it.
//
// On a host of a platform file the time is an execution of the host's flops (the file's host may
// be shared, or change speed over time: SimGrid's CPU model decides). On the scenario's own
// platform each node has a host of its own at a constant speed, which nothing else computes on,
// so an execution would take exactly the modeled time: the node sleeps for it instead, one SimGrid
// call where an execution takes five (its creation, host, amount, start and wait), each a switch
// to SimGrid's kernel and back (the greater part of a timing run's calls).
//
// With sim.shared_cores, the time is an execution on the machine the nodes share (sim/platform.h
// kMachineHost): t x kMachineCoreSpeed per thread, on the profile's threads of its cores at most,
// so that it takes t alone and longer while more nodes compute than it has cores.
class SimCompute : public Compute {
 public:
  // `host_speed`: the flop/s of the platform file's host it runs on, whose executions it charges;
  // 0: a host of its own (the scenario's platform), whose time it charges. `machine`: the
  // machine of sim.shared_cores, or null.
  SimCompute(bool numeric, ComputeProfile device, double host_speed = 0,
             simgrid::s4u::Host* machine = nullptr)
      : numeric_(numeric), device_(std::move(device)), host_speed_(host_speed), machine_(machine) {}
  bool numeric() const override { return numeric_; }
  Seconds run(const Work& work, SavedActivations saved,
              const std::function<void()>& maths) override;

 private:
  bool numeric_;
  ComputeProfile device_;
  double host_speed_;  // flop/s; 0: a host of its own
  simgrid::s4u::Host* machine_;
  DeviceHistory history_;  // simulated s
};

}  // namespace rv
