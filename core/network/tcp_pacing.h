// The warm floor of the tcp network model: TCP BBR's STARTUP on a connection that has not yet
// filled its path, as Linux's bbr.c runs it, for one direction of one connection (the sender's
// state).
//
// Measured with real TCP at real round trips (bench/tcp_effects, docs/network-model.md): under
// BBR, a small message on a warm connection arrives no sooner than its latency + about 0.36 round
// trips, however fast the link, and two or three in flight share one such interval. bbr.c's
// reason: a connection whose every round is application-limited never leaves STARTUP, where it
// paces at bbr_high_gain (2.885) x its bandwidth estimate, the largest delivery-rate sample, and
// where the pacing rate never falls (bbr_set_pacing_rate). A sample is bytes delivered over the
// interval they took, at least a round trip: a lone burst of B bytes that took x to leave gives
// B / (RTT + x), so that, once the pattern repeats, x = RTT / (2.885 - 1) = 0.53 RTT, reached from
// below (measured on pipelines of one message in flight, 100 and 250 ms: 0.4-1.7% on steady
// micro-batches/s).
//
// The model, per connection direction. A busy period runs from a message handed to a connection
// with nothing undelivered until every message handed over has arrived. Its round k (the k-th
// round trip from its start) sends at most rate_k: on a fresh connection (no busy period ended
// yet) slow start's, kInitialWindowBytes x 2^k per round trip; later the pace x kBbrHighGain^k
// (from the first ACKs on, its bytes wait behind the pacer, so the samples are not
// application-limited and each is the last round's rate). A message leaves behind the bytes
// handed over before it, and arrives no sooner than its departure + the one-way delay. When a
// busy period ends, its bandwidth sample is the larger of its bytes over RTT + x (x: from its
// start to its last byte's departure, the last arrival less the one-way delay) and the rate of its
// last full round (round k - 1 where its last byte left in round k); the pace becomes kBbrHighGain
// x that where it is higher. A busy period whose bytes took more than kFilledRoundTrips round
// trips at the route's rate has filled the path (BBR leaves STARTUP and paces at the path's rate):
// no floor from then on. Not modeled: BBR's PROBE_RTT, per-ACK samples within a busy period.
//
// Units: seconds, bytes, bytes per second. Thread-safety: none (one owner).
#pragma once

#include <limits>

#include "core/units.h"

namespace rv {

// bbr.c's bbr_high_gain, 2885 / 1000: STARTUP's pacing gain.
constexpr double kBbrHighGain = 2.885;
// Linux's initial congestion window: 10 segments of 1,448 bytes (a 1,500-byte MTU with TCP
// timestamps), a fresh connection's first round trip.
constexpr double kInitialWindowBytes = 10 * 1448;
// bbr.c leaves STARTUP after three rounds without the bandwidth growing by a quarter; with the
// round in which the rate reaches the path's, a busy period longer than this many round trips at
// the path's rate has filled it.
constexpr double kFilledRoundTrips = 4;

class StartupPacing {
 public:
  // Off: hand_over() never holds a message.
  StartupPacing() = default;
  // A connection of round trip `rtt`, one-way delay `one_way` as the network model charges it,
  // and the rate its route gives a lone flow (`path_rate`, bytes/s). Off where rtt <= 0.
  StartupPacing(Seconds rtt, Seconds one_way, double path_rate);

  // A message of `bytes` handed to the connection at `now` (non-decreasing over calls): the
  // earliest it may arrive; -infinity where nothing holds it (the path filled, or off).
  Seconds hand_over(Seconds now, double bytes);
  // The earliest handed-over message not yet arrived has arrived at `at`.
  void arrived(Seconds at);

  // The rate of a busy period's first round, bytes/s: slow start's initial window per round
  // trip on a fresh connection, the pace after; infinity once the path filled, or off.
  double rate() const;
  bool filled() const { return filled_; }

 private:
  static constexpr double kInfinity = std::numeric_limits<double>::infinity();
  // Round k's rate of the current busy period, bytes/s.
  double round_rate(double k) const;
  // When `bytes` that begin to leave at `from` (in the current busy period) have left; notes the
  // round they left in.
  Seconds departure(Seconds from, double bytes);

  Seconds rtt_ = 0, one_way_ = 0;
  double path_rate_ = 0;
  double pace_ = 0;    // bytes/s, once a busy period has ended (STARTUP's: it never falls)
  bool fresh_ = true;  // no busy period has ended: slow start
  Seconds paced_until_ = -kInfinity;  // the bytes handed over so far have left by then
  Seconds busy_start_ = 0;
  double busy_bytes_ = 0;
  double last_round_ = 0;  // the round the busy period's latest byte left in
  int undelivered_ = 0;
  bool filled_ = true;  // off until constructed with a round trip
};

}  // namespace rv
