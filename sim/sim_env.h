// NodeEnv inside SimGrid: one actor per node. Messages travel through one mailbox per receiving
// node, whose owner is declared its permanent receiver so that transfers start when sent (as TCP
// does), not when the receiver asks; the simulated transfer has the message's modeled size.
// Compute runs the LibTorch maths (numeric mode) and then executes the modeled flops on the
// node's host. Must be used from the node's own actor.
#pragma once

#include <vector>

#include <simgrid/s4u/Comm.hpp>
#include <simgrid/s4u/Mailbox.hpp>

#include "core/env.h"

namespace rv {

class SimTransport : public Transport {
 public:
  SimTransport(int rank, const std::vector<simgrid::s4u::Mailbox*>& mailboxes);
  int rank() const override { return rank_; }
  int size() const override { return static_cast<int>(mailboxes_.size()); }
  void send(int dst, Message msg) override;
  Message recv() override;
  std::optional<Message> try_recv() override;
  void flush() override;

 private:
  int rank_;
  std::vector<simgrid::s4u::Mailbox*> mailboxes_;
  std::vector<simgrid::s4u::CommPtr> pending_;
};

class SimClock : public Clock {
 public:
  Seconds now() const override;
  void sleep_for(Seconds s) override;
};

class SimCompute : public Compute {
 public:
  explicit SimCompute(bool numeric) : numeric_(numeric) {}
  bool numeric() const override { return numeric_; }
  void run(double flops, const std::function<void()>& maths) override;

 private:
  bool numeric_;
};

}  // namespace rv
