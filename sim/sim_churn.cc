#include "sim/sim_churn.h"

#include <simgrid/s4u/Actor.hpp>
#include <simgrid/s4u/Engine.hpp>
#include <simgrid/s4u/Host.hpp>

#include "core/churn/schedule.h"
#include "core/error.h"

namespace sg4 = simgrid::s4u;

namespace rv {

int64_t SimMembership::seal(int64_t round) {
  if (round < static_cast<int64_t>(seals_.size())) return seals_[static_cast<size_t>(round)];
  RV_CHECK(round == static_cast<int64_t>(seals_.size()),
           "membership: round " + std::to_string(round) + " sealed before round " +
               std::to_string(seals_.size()));
  seals_.push_back(static_cast<int64_t>(events_.size()));
  notify();
  return seals_.back();
}

int64_t SimMembership::sealed(int64_t round) const {
  return round >= 0 && round < static_cast<int64_t>(seals_.size())
             ? seals_[static_cast<size_t>(round)]
             : -1;
}

void SimMembership::record(const MemberEvent& e) {
  events_.push_back(e);
  notify();
}

void SimMembership::notify() {
  for (size_t n = 0; n < present_.size(); ++n) {
    if (!present_[n]) continue;
    Message m;
    m.kind = MsgKind::kMember;
    m.src = -1;
    network_.deliver(static_cast<int>(n), std::move(m));
  }
}

void start_churn(const Scenario& s, SimMembership& membership, std::vector<char>& present,
                 Metrics& log, const std::function<void(int)>& start,
                 const std::function<void(int)>& stop) {
  const Seconds detect = s.churn.detect_s;
  sg4::Host* host = sg4::Engine::get_instance()->get_all_hosts().front();
  sg4::Actor::create("churn", host, [&s, &membership, &present, &log, start, stop, detect, host] {
    ChurnSchedule schedule(s);
    while (auto e = schedule.next()) {
      const Seconds wait = e->at - sg4::Engine::get_clock();
      if (wait > 0) sg4::this_actor::sleep_for(wait);
      const auto n = static_cast<size_t>(e->node);
      Event ev;
      ev.kind = e->join ? EventKind::kJoin : EventKind::kLeave;
      ev.node = e->node;
      ev.start = ev.end = sg4::Engine::get_clock();
      log.record(ev);
      MemberEvent m{e->node, e->join, ev.start};
      if (e->join) {
        present[n] = 1;
        start(e->node);
        membership.record(m);
        continue;
      }
      present[n] = 0;
      stop(e->node);
      // The others hear of it when the failure detector's timeout has passed.
      sg4::Actor::create("notice", host, [&membership, m, detect] {
        sg4::this_actor::sleep_for(detect);
        membership.record(m);
      })->daemonize();
    }
  })->daemonize();
}

}  // namespace rv
