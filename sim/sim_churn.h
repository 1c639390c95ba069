// Churn inside the simulator: the scenario's departures and arrivals (core/churn/schedule.h) as
// they happen to the actors, and the run's Membership (core/env.h).
//
// A departure kills the node's actor at its instant (as a PC switched off: what it was sending
// stays on the wire, a message held by the tcp model's warm floor included; the emulator's star
// knows no departures either) and records kLeave; churn.detect_s later, the membership records it
// and every present node gets a notice. An arrival starts the node's actor and records kJoin; the
// membership records it at once (the newcomer announces itself). Actors run one at a time, so
// nothing here locks.
#pragma once

#include <algorithm>
#include <functional>
#include <vector>

#include "core/env.h"
#include "core/output/metrics.h"
#include "core/scenario/scenario.h"
#include "sim/sim_network.h"

namespace rv {

class SimMembership : public Membership {
 public:
  // `present`: per node, whether it is there (notices go to those).
  SimMembership(SimNetwork& network, const std::vector<char>& present)
      : network_(network), present_(present) {}
  int64_t seal(int64_t round) override;
  int64_t sealed(int64_t round) const override;
  std::vector<MemberEvent> events(size_t from) const override {
    return {events_.begin() + static_cast<std::ptrdiff_t>(std::min(from, events_.size())),
            events_.end()};
  }
  void record(const MemberEvent& e);

 private:
  void notify();
  SimNetwork& network_;
  const std::vector<char>& present_;
  std::vector<MemberEvent> events_;
  std::vector<int64_t> seals_;
};

// Starts the daemon actor that plays the scenario's churn. `start(node)` starts a node's actor,
// `stop(node)` kills it; `present` is kept up to date; kLeave and kJoin go to `log`.
void start_churn(const Scenario& s, SimMembership& membership, std::vector<char>& present,
                 Metrics& log, const std::function<void(int)>& start,
                 const std::function<void(int)>& stop);

}  // namespace rv
