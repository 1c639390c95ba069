#include "core/network/tcp_pacing.h"

#include <algorithm>

#include "core/error.h"

namespace rv {

StartupPacing::StartupPacing(Seconds rtt, Seconds one_way, double path_rate)
    : rtt_(rtt), one_way_(one_way), path_rate_(path_rate), filled_(!(rtt > 0)) {}

Seconds StartupPacing::hand_over(Seconds now, double bytes) {
  if (undelivered_++ == 0) {
    busy_start_ = now;
    busy_bytes_ = 0;
  }
  busy_bytes_ += bytes;
  if (filled_ || pace_ == kInfinity) return -kInfinity;
  paced_until_ = std::max(now, paced_until_) + bytes / pace_;
  return paced_until_ + one_way_;
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
  while (!samples_.empty() && samples_.front().first <= at - kBbrBandwidthRounds * rtt_)
    samples_.pop_front();
  samples_.emplace_back(at, busy_bytes_ / (rtt_ + left));
  double best = 0;
  for (const auto& [when, sample] : samples_) best = std::max(best, sample);
  pace_ = kBbrHighGain * best;
}

}  // namespace rv
