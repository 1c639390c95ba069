// The latency half of the kernel shaper (real.shaper = "kernel"). There the kernel's htb shapes
// every node's bandwidth and real TCP carries each message at once, but this kernel has no netem:
// nothing delays the bytes by the links' latency. ArrivalLatency adds it at the receiver: a message
// is handed over when its route's latency (the sender's and the receiver's one-way latencies, as
// the scenario gives them: over real TCP no model factor applies) has passed since its last byte
// arrived. That is the physics of a link of latency L and rate B: the last byte comes out L after
// it would without the latency. (Holding it for L from its send instead would overlap the latency
// with the transfer.)
//
// A pair's messages keep their order (one route, one latency); messages from several senders are
// handed over in the order they fall due. Arrival times come from the transport (Message::arrived,
// on `clock`'s axis); a message without one counts as arriving when it is taken from the
// transport. Threading: the node's own thread only.
#pragma once

#include <deque>
#include <optional>
#include <vector>

#include "emu/emulated_network.h"

namespace rv {

class ArrivalLatency : public NetworkEmulator {
 public:
  // `latency`: every node's one-way latency, in seconds; `clock` on the axis of Message::arrived
  // (the machine's steady clock), outliving this object.
  ArrivalLatency(int rank, std::vector<Seconds> latency, Clock& clock);

  void submit(Transport& inner, int src, int dst, Message msg) override;
  void drain(int src) override;
  Message recv(Transport& inner) override;
  std::optional<Message> try_recv(Transport& inner) override;

 private:
  Seconds due(const Message& m) const;
  void take(Transport& inner);        // everything the transport has, held
  std::optional<Message> take_due();  // the earliest due message, if it is due
  int rank_;
  std::vector<Seconds> latency_;
  Clock& clock_;
  std::deque<Message> held_;  // arrived, not yet due; in arrival order
};

// Every node's one-way latency as the scenario gives it (dilated), in seconds.
std::vector<Seconds> one_way_latencies(const Scenario& s);

}  // namespace rv
