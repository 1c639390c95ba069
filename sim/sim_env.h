// NodeEnv inside SimGrid: one actor per node.
//
// Messages: a sender's first message to a node goes to that node's own mailbox ("n<dst>"); every
// later one to the pair's mailbox ("n<src>>n<dst>"). Every mailbox has its receiving node as
// permanent receiver, so transfers start when sent (as over TCP), not when the receiver asks, and
// carry the message's modeled size. The receiver watches its own mailbox and the pair mailbox of
// every node that has written to it, and takes whichever message completes first: FIFO per pair,
// no head-of-line blocking between peers (a slow transfer from one peer never holds back a message
// from another, as with one TCP connection per peer).
// Compute runs the LibTorch maths (numeric mode), then executes the modeled flops on the node's
// host. Must be used from the node's own actor.
#pragma once

#include <memory>
#include <vector>

#include <simgrid/s4u/Actor.hpp>

#include <simgrid/s4u/Comm.hpp>
#include <simgrid/s4u/Mailbox.hpp>

#include "core/compute/profile.h"
#include "core/env.h"

namespace rv {

class SimTransport : public Transport {
 public:
  // `actors[r]` is node r's actor (the receiver of its mailboxes); all outlive the transport.
  SimTransport(int rank, const std::vector<simgrid::s4u::ActorPtr>& actors);
  ~SimTransport() override;
  int rank() const override { return rank_; }
  int size() const override { return static_cast<int>(actors_.size()); }
  void send(int dst, Message msg) override;
  Message recv() override;
  std::optional<Message> try_recv() override;
  void flush() override;

 private:
  void watch(simgrid::s4u::Mailbox* mailbox);
  Message take(size_t i);  // the message of finished get i; re-arms it

  int rank_;
  const std::vector<simgrid::s4u::ActorPtr>& actors_;
  std::vector<char> contacted_;                  // per destination: first message sent
  std::vector<char> watching_;                   // per source: its pair mailbox is watched
  std::vector<simgrid::s4u::Mailbox*> watched_;  // [0]: this node's own mailbox
  std::vector<simgrid::s4u::CommPtr> gets_;      // one pending get per watched mailbox
  std::vector<std::unique_ptr<Message*>> slots_; // where each get stores its message
  std::vector<simgrid::s4u::CommPtr> pending_;   // sends not yet known to be complete
};

class SimClock : public Clock {
 public:
  Seconds now() const override;
  void sleep_for(Seconds s) override;
};

// Charges work at the node's device model: time_of(work, device) seconds of the host, whose speed
// is the device's peak, so that actors sharing a host share its time.
class SimCompute : public Compute {
 public:
  SimCompute(bool numeric, ComputeProfile device) : numeric_(numeric), device_(std::move(device)) {}
  bool numeric() const override { return numeric_; }
  void run(const Work& work, const std::function<void()>& maths) override;

 private:
  bool numeric_;
  ComputeProfile device_;
};

}  // namespace rv
