#include "core/churn/schedule.h"

#include <cmath>
#include <tuple>

namespace rv {
namespace {

// splitmix64: a small, well-known generator whose output is the same on every platform (the
// standard library's distributions are not).
uint64_t splitmix(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ULL);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

constexpr uint64_t kNoSession = ~0ULL;

}  // namespace

bool ChurnSchedule::Pending::operator>(const Pending& o) const {
  // Departures before arrivals at the same instant, then by rank.
  return std::make_tuple(at, join, node) > std::make_tuple(o.at, o.join, o.node);
}

ChurnSchedule::ChurnSchedule(const Scenario& s) : rejoin_(s.churn.rejoin_s) {
  const int n = s.node_count();
  rate_.resize(static_cast<size_t>(n));
  stream_.resize(static_cast<size_t>(n));
  session_.assign(static_cast<size_t>(n), 0);
  present_.assign(static_cast<size_t>(n), 0);
  for (int r = 0; r < n; ++r) {
    const DeviceGroup& g = s.device_of(r);
    const double per_hour = g.leave_per_hour >= 0 ? g.leave_per_hour : s.churn.leave_per_hour;
    rate_[static_cast<size_t>(r)] = per_hour / 3600.0;
    uint64_t seed = s.seed * 0x2545F4914F6CDD1DULL + static_cast<uint64_t>(r) + 1;
    stream_[static_cast<size_t>(r)] = splitmix(seed);
    if (g.join_at_s > 0) {
      queue_.push({g.join_at_s, r, true, 0});
    } else {
      present_[static_cast<size_t>(r)] = 1;
      start_session(r, 0);
    }
  }
  for (const ChurnEventSpec& e : s.churn.event) queue_.push({e.at_s, e.leave, false, kNoSession});
}

double ChurnSchedule::draw_exponential(int node) {
  const uint64_t x = splitmix(stream_[static_cast<size_t>(node)]);
  const double u = static_cast<double>(x >> 11) * 0x1.0p-53;  // [0, 1)
  return -std::log1p(-u);
}

void ChurnSchedule::start_session(int node, Seconds now) {
  const auto i = static_cast<size_t>(node);
  ++session_[i];
  if (rate_[i] <= 0) return;
  queue_.push({now + draw_exponential(node) / rate_[i], node, false, session_[i]});
}

std::optional<ChurnEvent> ChurnSchedule::next() {
  while (!queue_.empty()) {
    const Pending p = queue_.top();
    queue_.pop();
    const auto i = static_cast<size_t>(p.node);
    if (p.join) {
      if (present_[i]) continue;
      present_[i] = 1;
      start_session(p.node, p.at);
      return ChurnEvent{p.at, p.node, true};
    }
    // A drawn departure of a session that already ended (by a timed one) is void, as is a
    // departure of a node that is not there.
    if (!present_[i] || (p.session != kNoSession && p.session != session_[i])) continue;
    present_[i] = 0;
    ++session_[i];  // ends the session: its drawn departure, if still queued, is void
    if (rejoin_ > 0) queue_.push({p.at + rejoin_, p.node, true, 0});
    return ChurnEvent{p.at, p.node, false};
  }
  return std::nullopt;
}

}  // namespace rv
