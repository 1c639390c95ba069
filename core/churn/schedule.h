// ChurnSchedule: when nodes leave and arrive, from a scenario's [churn] table and devices' churn
// keys, in time order. Deterministic: the same scenario and seed give the same events, whatever
// asks for them when (each node draws from its own stream).
//
// A node present at the start (or arriving) stays for an exponential session of mean
// 1 / leave_per_hour hours (its group's rate, else churn.leave_per_hour; none at rate 0), then
// leaves; with churn.rejoin_s > 0 it comes back that long after, as a spare without state, and
// draws a new session. Groups with devices[].join_at_s arrive then. A churn.event departure
// happens at its time if the node is present (else nothing happens), and ends the node's session.
#pragma once

#include <cstdint>
#include <optional>
#include <queue>
#include <vector>

#include "core/scenario/scenario.h"
#include "core/units.h"

namespace rv {

struct ChurnEvent {
  Seconds at = 0;     // seconds since the run's start
  int node = -1;      // pool rank
  bool join = false;  // true: arrives (as a spare); false: leaves
  bool operator==(const ChurnEvent& o) const {
    return at == o.at && node == o.node && join == o.join;
  }
};

class ChurnSchedule {
 public:
  explicit ChurnSchedule(const Scenario& s);
  // The next event (ties: earlier time, then departures before arrivals, then lower rank), or
  // nothing when no node will ever leave or arrive again. Events are drawn lazily.
  std::optional<ChurnEvent> next();
  // Whether `node` is present after the events returned so far.
  bool present(int node) const { return present_.at(static_cast<size_t>(node)) != 0; }

 private:
  struct Pending {
    Seconds at;
    int node;
    bool join;
    uint64_t session;  // the node's session it belongs to (a departure of an ended one is void)
    bool operator>(const Pending& o) const;
  };
  void start_session(int node, Seconds now);  // draws the node's next departure
  double draw_exponential(int node);          // one draw of Exp(1) from the node's stream

  std::vector<double> rate_;      // departures per second, per node
  std::vector<uint64_t> stream_;  // each node's random state (splitmix64)
  std::vector<uint64_t> session_;
  std::vector<char> present_;
  Seconds rejoin_ = 0;
  std::priority_queue<Pending, std::vector<Pending>, std::greater<Pending>> queue_;
};

}  // namespace rv
