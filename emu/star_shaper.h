// The emulator's network model: the simulator's star, computed in user space on times the caller
// gives (an injected clock), so that an emulated run's messages take the time the simulator gives
// the same messages under SimGrid's CM02 with no cross-traffic and no TCP window (network.model
// "tcp" and "ideal", and any factors: links_of() applies them). Under "lv08" it applies LV08's
// factors but not its cross-traffic, its weight-S or its window cap.
//
// Every node reaches a common core through its own uplink (up_mbps) and downlink (down_mbps), each
// with a one-way latency; under topology "regions", its region's core, and a message between
// regions also crosses the link between them (core/network/links.h), which its flows share. Each
// ordered pair of nodes has one connection, as over TCP: a pair's messages go in send order, the
// bytes of one after those of the one before, and the latency is paid once for the stream, not per
// message. A message sent at a on a route of latency L (L_s + L_d, each times the model's latency
// factor) starts its bytes at max(a + L, the time the pair's previous message was through) and is
// delivered when its last byte is through: alone, it takes L plus its bytes over the route; behind
// another, it follows that one's last byte at once (its bytes entered the connection as soon as the
// earlier ones had, and travel the same latency); under the tcp model it is delivered no sooner
// than its warm floor (core/network/tcp_pacing.h), the same as the simulator's. Bytes flow through
// both links at once (cut-through), at a rate that changes whenever a flow starts or ends: weighted
// max-min fairness over all links (progressive filling), each flow weighted by the inverse of its
// route's latency as CM02 weights it (TCP's RTT unfairness; a route of zero latency weighs as one
// of 1 s, as there). So the connections of different pairs share a node's links fairly, and a flow
// held back elsewhere leaves the rest of a link to the others. The simulator (sim/sim_network.h)
// runs the same model on SimGrid's links.
//
// Units: bytes, bytes per second, seconds. Thread-safety: none (one owner; callers serialise).
#pragma once

#include <cstdint>
#include <deque>
#include <limits>
#include <map>
#include <set>
#include <utility>
#include <vector>

#include "core/network/links.h"
#include "core/units.h"

namespace rv {

constexpr Seconds kNever = std::numeric_limits<double>::infinity();
// A link rate too high to matter (bytes per second): a gigabyte passes in a nanosecond.
constexpr double kUnlimitedRate = 1e18;

// A message that has passed the network model.
struct Delivery {
  uint64_t token = 0;  // the caller's handle for the message
  int src = -1, dst = -1;
  Seconds at = 0;  // its last byte is through: it is delivered now
};

class StarNetwork {
 public:
  explicit StarNetwork(NetworkLinks links);

  // A message of `bytes` from `src` to `dst`, sent at `now` (non-decreasing over calls, and not
  // before the last advance()).
  void send(int src, int dst, Bytes bytes, uint64_t token, Seconds now);
  // Moves the model to `now`; returns the messages delivered by then, in delivery order.
  std::vector<Delivery> advance(Seconds now);
  // When the next message is delivered or starts its bytes (kNever when idle); advance() to it.
  Seconds next_event() const;
  // Current rate of the flows in progress, in bytes per second, by token (for tests and reports).
  std::map<uint64_t, double> rates() const;
  // Messages delivered after their bytes were through, held by the warm floor (for tests).
  int64_t held_messages() const { return held_messages_; }

 private:
  struct Flow {  // a message not yet delivered: its bytes are not all through
    uint64_t token = 0;
    double left = 0;     // bytes
    Seconds starts = 0;  // its bytes may start to flow (sent + route delay)
    double rate = 0;     // bytes per second, while flowing
    Seconds floor = 0;   // the warm floor (StartupPacing::hand_over): not delivered before
  };
  struct Pair {  // one connection: its messages in send order; only the front one flows
    int src = -1, dst = -1;
    int inter = -1;     // the region link it crosses (NetworkLinks::inter), or -1
    double weight = 1;  // 1 / route latency, in 1/s
    double cap = 0;     // TCP's window over the round trip (NetworkLinks::rate_cap), bytes/s
    std::deque<Flow> queue;
    bool flowing(Seconds now) const { return !queue.empty() && queue.front().starts <= now; }
  };
  void progress_to(Seconds t);
  void solve();  // weighted max-min rates of the pairs' flowing messages
  // A route's latency as given (CM02's sharing weight), and as the model charges it.
  Seconds route(int src, int dst) const { return links_.route_latency(src, dst); }
  Seconds delay(int src, int dst) const { return links_.route_delay(src, dst); }

  NetworkLinks links_;
  Seconds now_ = 0;
  std::map<std::pair<int, int>, Pair> pairs_;  // the connections with messages not yet through
  std::set<uint64_t> tokens_;                  // the tokens of messages not yet delivered
  // Each connection's warm floor (core/network/tcp_pacing.h), kept while it is idle, and its
  // messages through but held by it, in order.
  std::map<std::pair<int, int>, StartupPacing> pacing_;
  std::map<std::pair<int, int>, std::deque<Flow>> held_;
  int64_t held_messages_ = 0;
  // Delivers `f` of the connection src -> dst now, into `out`.
  void deliver(const Flow& f, int src, int dst, std::vector<Delivery>& out);
};

}  // namespace rv
