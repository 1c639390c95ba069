#include "core/network/tcp_pacing.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace rv {

StartupPacing::StartupPacing(Seconds rtt, Seconds one_way, double path_rate)
    : rtt_(rtt), one_way_(one_way), path_rate_(path_rate), filled_(!(rtt > 0)) {}

double StartupPacing::rate() const {
  if (filled_) return kInfinity;
  return fresh_ ? kInitialWindowBytes / rtt_ : pace_;
}

double StartupPacing::round_rate(double k) const {
  return fresh_ ? kInitialWindowBytes / rtt_ * std::pow(2.0, k) : pace_ * std::pow(kBbrHighGain, k);
}

Seconds StartupPacing::hand_over(Seconds now, double bytes) {
  if (undelivered_++ == 0) {
    busy_start_ = now;
    busy_bytes_ = 0;
    last_round_ = 0;
  }
  busy_bytes_ += bytes;
  if (filled_) return -kInfinity;
  paced_until_ = departure(std::max(now, paced_until_), bytes);
  return paced_until_ + one_way_;
}

Seconds StartupPacing::departure(Seconds from, double bytes) {
  // Once a round's rate is at the path's, the flow model is the slower: no more rounds.
  Seconds t = from;
  double k = std::max(0.0, std::floor((from - busy_start_) / rtt_));
  for (;; k += 1) {
    const double rate = round_rate(k);
    const Seconds round_end = busy_start_ + (k + 1) * rtt_;
    const double room = rate * std::max(0.0, round_end - t);
    // (rate > 0: kInitialWindowBytes and rtt_ are, and a busy period with bytes set pace_.)
    if (bytes <= room || (path_rate_ > 0 && rate >= path_rate_) || std::isinf(rate)) {
      last_round_ = std::max(last_round_, k);
      return t + bytes / rate;
    }
    bytes -= room;
    t = std::max(t, round_end);
  }
}

void StartupPacing::arrived(Seconds at) {
  RV_CHECK(undelivered_ > 0, "tcp pacing: an arrival with nothing handed over");
  if (--undelivered_ > 0 || filled_) return;
  // The busy period is over: its delivery-rate sample.
  if (path_rate_ > 0 && busy_bytes_ / path_rate_ > kFilledRoundTrips * rtt_) {
    filled_ = true;
    return;
  }
  if (busy_bytes_ <= 0) return;  // only empty messages: no sample
  const Seconds left = std::max(0.0, at - one_way_ - busy_start_);
  double sample = busy_bytes_ / (rtt_ + left);
  if (last_round_ >= 1) sample = std::max(sample, round_rate(last_round_ - 1));
  pace_ = std::max(pace_, kBbrHighGain * sample);
  fresh_ = false;
}

}  // namespace rv
