#include "real/liveness.h"

#include <algorithm>

namespace rv {

Liveness::Liveness(int peers, int self, Seconds timeout, Seconds now)
    : self_(self),
      timeout_(timeout),
      last_(static_cast<size_t>(peers), now),
      expected_(static_cast<size_t>(peers), true) {
  if (self >= 0 && self < peers) expected_[static_cast<size_t>(self)] = false;
}

void Liveness::heard(int peer, Seconds now, Bytes bytes) {
  Seconds& t = last_[static_cast<size_t>(peer)];
  t = std::max(t, now + static_cast<double>(bytes) / kFloorBytesPerSecond);
}

void Liveness::forget(int peer) { expected_[static_cast<size_t>(peer)] = false; }

void Liveness::expect(int peer, Seconds now) {
  if (peer == self_) return;
  expected_[static_cast<size_t>(peer)] = true;
  last_[static_cast<size_t>(peer)] = now;
}

std::optional<int> Liveness::quietest() const {
  std::optional<int> worst;
  for (size_t p = 0; p < last_.size(); ++p)
    if (expected_[p] && (!worst || last_[p] < last_[static_cast<size_t>(*worst)]))
      worst = static_cast<int>(p);
  return worst;
}

std::optional<int> Liveness::silent(Seconds now) const {
  const std::optional<int> q = quietest();
  if (q && silent_for(*q, now) > timeout_) return q;
  return std::nullopt;
}

Seconds Liveness::next_check(Seconds now) const {
  Seconds next = now + beat_interval();
  for (size_t p = 0; p < last_.size(); ++p)
    if (expected_[p]) next = std::min(next, std::max(now, last_[p] + timeout_) + 1e-3);
  return next;
}

}  // namespace rv
