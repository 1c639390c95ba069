// The warm floor of the tcp network model: TCP BBR's pacing on a connection that has not yet filled
// its path, as Linux's bbr.c runs it, for one direction of one connection (the sender's state).
//
// Measured with real TCP at real round trips (bench/tcp_effects, docs/network-model.md): under
// BBR, a small message on a warm connection arrives no sooner than its latency + about 0.36 round
// trips, however fast the link, and two or three in flight share one such interval. bbr.c's
// reason: a connection whose every round is application-limited never leaves STARTUP, where it
// paces at bbr_high_gain (2.885) x the largest delivery-rate sample of its last 10 round trips
// (bbr_bw_rtts). A sample is bytes delivered over the interval they took, at least a round trip:
// a lone burst of B bytes that took x to leave gives B / (RTT + x), so that, once the pattern
// repeats, x = RTT / (2.885 - 1) = 0.53 RTT (measured on pipelines of one message in flight,
// 100 and 250 ms: 0.4-1.9% on steady micro-batches/s; the 0.36 RTT of isolated warm messages is
// the transient of a connection's first rounds, whose larger samples are still in the window).
//
// The model, per connection direction: a busy period runs from a message handed to a connection
// with nothing undelivered until every message handed over has arrived; its sample is its bytes B
// over RTT + x, x the time from its first hand-over to the last byte's departure (its last
// arrival less the one-way delay). The pacing rate is kBbrHighGain x the largest sample of the
// busy periods that ended within the last kBbrBandwidthRounds round trips; a message
// handed over at t leaves behind the bytes handed over before it, at that rate, and arrives no
// sooner than its departure + the one-way delay. A busy period whose bytes took more than
// kFilledRoundTrips round trips at the route's rate has filled the path (BBR leaves STARTUP and
// paces at the path's rate): no floor from then on. Not modeled: a fresh connection's slow start
// (its first busy period is not held; its sample is the flow model's time), BBR's PROBE_RTT.
//
// Units: seconds, bytes, bytes per second. Thread-safety: none (one owner).
#pragma once

#include <deque>
#include <limits>
#include <utility>

#include "core/units.h"

namespace rv {

// bbr.c's bbr_high_gain, 2885 / 1000: STARTUP's pacing gain.
constexpr double kBbrHighGain = 2.885;
// bbr.c's bbr_bw_rtts: the round trips its bandwidth filter keeps a sample.
constexpr double kBbrBandwidthRounds = 10;
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
  // earliest it may arrive; -infinity where nothing holds it (no sample yet, the path filled, or
  // off).
  Seconds hand_over(Seconds now, double bytes);
  // The earliest handed-over message not yet arrived has arrived at `at`.
  void arrived(Seconds at);

  // The pacing rate, bytes/s: infinity before the first sample, once the path filled, or off.
  double rate() const { return filled_ ? kInfinity : pace_; }
  bool filled() const { return filled_; }

 private:
  static constexpr double kInfinity = std::numeric_limits<double>::infinity();
  Seconds rtt_ = 0, one_way_ = 0;
  double path_rate_ = 0;
  double pace_ = kInfinity;  // bytes/s; kInfinity until the first sample
  // (when its busy period ended, its sample in bytes/s), the last kBbrBandwidthRounds round trips'
  std::deque<std::pair<Seconds, double>> samples_;
  Seconds paced_until_ = -kInfinity;  // the bytes handed over so far have left by then
  Seconds busy_start_ = 0;
  double busy_bytes_ = 0;
  int undelivered_ = 0;
  bool filled_ = true;  // off until constructed with a round trip
};

}  // namespace rv
