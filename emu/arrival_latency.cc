#include "emu/arrival_latency.h"

#include <algorithm>
#include <utility>

#include "core/error.h"

namespace rv {
namespace {

// How long recv() waits for a held message before it looks at the transport again.
constexpr Seconds kStep = 0.002;

}  // namespace

ArrivalLatency::ArrivalLatency(int rank, std::vector<Seconds> latency, Clock& clock)
    : rank_(rank), latency_(std::move(latency)), clock_(clock) {
  RV_CHECK(rank_ >= 0 && rank_ < static_cast<int>(latency_.size()),
           "arrival latency: rank out of range");
}

void ArrivalLatency::submit(Transport& inner, int src, int dst, Message msg) {
  RV_CHECK(src == rank_, "arrival latency: a send from another rank");
  inner.send(dst, std::move(msg));  // the kernel shapes its bytes; the receiver adds the latency
}

void ArrivalLatency::drain(int src) {
  RV_CHECK(src == rank_, "arrival latency: a drain for another rank");
}

Seconds ArrivalLatency::due(const Message& m) const {
  const Seconds route =
      m.src >= 0 && m.src < static_cast<int>(latency_.size())
          ? latency_[static_cast<size_t>(m.src)] + latency_[static_cast<size_t>(rank_)]
          : 0.0;
  return m.arrived + route;
}

void ArrivalLatency::take(Transport& inner) {
  while (std::optional<Message> m = inner.try_recv()) {
    if (m->arrived < 0) m->arrived = clock_.now();
    held_.push_back(std::move(*m));
  }
}

std::optional<Message> ArrivalLatency::take_due() {
  if (held_.empty()) return std::nullopt;
  // The earliest due; among equals the first arrived (a pair's order).
  auto best = held_.begin();
  for (auto it = held_.begin(); it != held_.end(); ++it)
    if (due(*it) < due(*best)) best = it;
  if (due(*best) > clock_.now()) return std::nullopt;
  Message m = std::move(*best);
  held_.erase(best);
  return m;
}

std::optional<Message> ArrivalLatency::try_recv(Transport& inner) {
  take(inner);
  return take_due();
}

Message ArrivalLatency::recv(Transport& inner) {
  for (;;) {
    take(inner);
    if (std::optional<Message> m = take_due()) return std::move(*m);
    if (held_.empty()) {
      // Nothing on its way here: wait on the transport (which fails as it fails).
      Message m = inner.recv();
      if (m.arrived < 0) m.arrived = clock_.now();
      held_.push_back(std::move(m));
      continue;
    }
    // Something held: wait for its time in steps of at most kStep, looking at the transport in
    // between (a nearer sender's message may fall due first).
    Seconds next = kNever;
    for (const Message& m : held_) next = std::min(next, due(m));
    clock_.wait_until(std::min(next, clock_.now() + kStep));
  }
}

std::vector<Seconds> one_way_latencies(const Scenario& s) {
  std::vector<Seconds> out;
  for (int r = 0; r < s.node_count(); ++r) out.push_back(s.device_of(r).latency_s());
  return out;
}

}  // namespace rv
