// Liveness of a real run's peers: each rank sends every peer a heartbeat every `timeout / 4`
// seconds, from a thread of its own, so that a peer that is alive is heard from even while it
// computes or waits; a peer not heard from (heartbeat or message) for `timeout` seconds is taken
// for stopped or hung, whatever this rank is waiting for (a message, the end of training, the
// final gather). A slow emulated link never silences a peer: heartbeats bypass the emulator.
//
// Pure logic over times given by the caller (seconds on any monotonic clock), so that deadlines
// are tested with an injected clock; GlooTransport calls it under its lock. Not thread-safe.
#pragma once

#include <optional>
#include <vector>

#include "core/units.h"

namespace rv {

class Liveness {
 public:
  // `peers`: the world size (this rank's own entry is never checked); everyone heard at `now`.
  Liveness(int peers, int self, Seconds timeout, Seconds now);

  Seconds beat_interval() const { return timeout_ / 4; }
  // A message or heartbeat from `peer` arrived at `now`; a payload of `bytes` follows it (its
  // transfer is granted bytes / kFloorBytesPerSecond more, as heartbeats queue behind it).
  void heard(int peer, Seconds now, Bytes bytes = 0);
  static constexpr double kFloorBytesPerSecond = 1e6;
  // `peer` left (said bye, or failed): no longer expected to beat.
  void forget(int peer);
  // `peer` is expected again from `now` on (a replacement process took its rank): heard at `now`.
  void expect(int peer, Seconds now);
  // The expected peer heard from least recently (the lowest rank among equals); none if no peer
  // is expected.
  std::optional<int> quietest() const;
  // quietest(), if it has been silent for more than the timeout at `now`.
  std::optional<int> silent(Seconds now) const;
  Seconds silent_for(int peer, Seconds now) const { return now - last_[static_cast<size_t>(peer)]; }
  // When silent() can next change its answer, at the latest (a wait should wake by then).
  Seconds next_check(Seconds now) const;

 private:
  int self_;
  Seconds timeout_;
  std::vector<Seconds> last_;
  std::vector<bool> expected_;
};

}  // namespace rv
