// Roster: the plan as churn has changed it, which every node replays alike from the run's
// Membership (core/env.h): its events in their one order and the rounds sealed so far.
//
// Replay, event by event:
//   - a node that holds a stage leaves: its cluster is down, and its stage goes to the first spare
//     (nodes the plan leaves idle, in rank order, then arrivals in order); with none, the stage
//     waits for the next arrival (stages waiting in the order they were lost);
//   - a spare leaves: it is no longer a spare;
//   - a node arrives: it takes the oldest waiting stage, or becomes a spare.
// Rounds: averaging round R counts the events before its seal. The clusters not down then are
// round R's view: they average together. A cluster that is out of round R and whole (each of its
// stages has a node) at R's seal is rebuilt after round R: each of its nodes fetches its layers'
// state from a cluster of the view, and the cluster trains again from round R + 1 (unless later
// events take it down again).
#pragma once

#include <cstdint>
#include <vector>

#include "core/env.h"
#include "core/plan.h"

namespace rv {

// The stage nodes of each cluster (cluster -> stage -> node; -1: a stage waiting for a node).
using Assignment = std::vector<std::vector<int>>;

// A spare took a stage (kAssign).
struct Takeover {
  int node = -1, cluster = -1, stage = -1;
  int replaced = -1;  // the node that left it
  size_t event = 0;   // the membership event at which it happened (a departure or an arrival)
};

class Roster {
 public:
  // `initial_nodes`: ranks [0, initial_nodes) are present at the start; later ranks arrive.
  Roster(const Plan& plan, int initial_nodes);

  // Catches up with the membership (reads its events, then its seals).
  void update(const Membership& m);

  int64_t sealed_rounds() const { return static_cast<int64_t>(views_.size()); }
  // Round `round` (sealed): whether `cluster` is in its view; whether it is rebuilt after it.
  bool in_view(int cluster, int64_t round) const;
  bool rebuilt_after(int cluster, int64_t round) const;
  const std::vector<int>& view(int64_t round) const {
    return views_.at(static_cast<size_t>(round));
  }
  // The stage nodes when round `round` was sealed.
  const Assignment& assignment_at(int64_t round) const {
    return at_seal_.at(static_cast<size_t>(round));
  }

  // After every event known (tentative beyond the last seal):
  const Assignment& assignment() const { return now_.nodes; }
  bool down(int cluster) const { return now_.down.at(static_cast<size_t>(cluster)) != 0; }
  bool any_up() const;
  bool present(int node) const { return now_.present.at(static_cast<size_t>(node)) != 0; }
  // Where `node` sits now (stage -1: a spare, absent, or gone).
  NodeRole role_of(int node) const;
  const std::vector<Takeover>& takeovers() const { return now_.takeovers; }
  size_t events_seen() const { return events_.size(); }
  // Whether `node` has left since round `round` (sealed) was sealed: a node that left and came
  // back since is a spare without state, not the holder it was.
  bool left_since(int node, int64_t round) const;
  // The first sealed round that counts membership event `event`; sealed_rounds() (the next round
  // to be sealed, which will count it) if none does yet.
  int64_t round_counting(size_t event) const;
  const std::vector<MemberEvent>& events() const { return events_; }

 private:
  struct State {
    Assignment nodes;
    std::vector<char> down;                    // per cluster
    std::vector<char> present;                 // per node
    std::vector<int> spares;                   // in the order they take stages
    std::vector<std::pair<int, int>> waiting;  // (cluster, stage), oldest first
    std::vector<Takeover> takeovers;
    size_t applied = 0;  // events applied
    void apply(const MemberEvent& e, size_t index);
    bool whole(int cluster) const;
  };

  const Plan& plan_;
  State committed_;  // through the last sealed round and its rebuilds
  State now_;        // committed_ and every later event
  std::vector<MemberEvent> events_;
  std::vector<std::vector<int>> views_;     // per sealed round: its clusters, ascending
  std::vector<std::vector<char>> rebuilt_;  // per sealed round, per cluster
  std::vector<Assignment> at_seal_;
  std::vector<size_t> counts_;  // per sealed round: the events it counts
};

}  // namespace rv
