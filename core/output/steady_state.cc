#include "core/output/steady_state.h"

#include <algorithm>
#include <map>

namespace rv {
namespace {

// The latest end of each key's events: a round's or a step's end over a cluster's nodes.
using Ends = std::map<int64_t, Seconds>;
using ClusterEnds = std::map<int, Ends>;  // cluster -> its ends

void note_end(Ends& ends, int64_t key, Seconds end) {
  auto [it, fresh] = ends.emplace(key, end);
  if (!fresh) it->second = std::max(it->second, end);
}

// A cluster's evaluations as intervals: from the first start of its evaluation forwards
// (micro_batch < 0) after its previous kEval to its kEval; with the batches of each.
struct Evaluations {
  std::vector<std::pair<Seconds, Seconds>> intervals;  // one per evaluation, as found
  std::vector<int64_t> batches;
};

Evaluations evaluations_of(const std::vector<const Event*>& events) {
  std::vector<Seconds> times;                         // its kEval times
  std::vector<std::pair<Seconds, int64_t>> forwards;  // (start, batch)
  for (const Event* p : events) {
    const Event& e = *p;
    if (e.kind == EventKind::kEval) times.push_back(e.end);
    if (e.kind == EventKind::kForward && e.micro_batch < 0)
      forwards.emplace_back(e.start, -e.micro_batch);  // batch j is micro_batch -1 - j
  }
  std::sort(times.begin(), times.end());
  std::sort(forwards.begin(), forwards.end());
  Evaluations out;
  size_t f = 0;
  for (Seconds t : times) {
    Seconds first = t;
    int64_t batches = 0;
    for (; f < forwards.size() && forwards[f].first <= t; ++f) {
      first = std::min(first, forwards[f].first);
      batches = std::max(batches, forwards[f].second);
    }
    out.intervals.emplace_back(first, t);
    out.batches.push_back(batches);
  }
  return out;
}

using Intervals = std::vector<std::pair<Seconds, Seconds>>;

// `intervals` as their union: disjoint, in order.
Intervals merged(Intervals intervals) {
  std::sort(intervals.begin(), intervals.end());
  Intervals out;
  for (const auto& [a, b] : intervals) {
    if (!out.empty() && a <= out.back().second)
      out.back().second = std::max(out.back().second, b);
    else
      out.emplace_back(a, b);
  }
  return out;
}

// The length of disjoint `intervals` inside [lo, hi].
Seconds length_inside(const Intervals& intervals, Seconds lo, Seconds hi) {
  Seconds total = 0;
  for (const auto& [a, b] : intervals) total += std::max(0.0, std::min(b, hi) - std::max(a, lo));
  return total;
}

// Whether t lies in (a, b] of one of disjoint, ordered `intervals`.
bool inside(const Intervals& intervals, Seconds t) {
  auto it = std::lower_bound(intervals.begin(), intervals.end(), t,
                             [](const auto& iv, Seconds x) { return iv.second < x; });
  return it != intervals.end() && t > it->first;
}

// `cluster`'s window over its period `ends` (at least two keys): from the first key's end to the
// last's, with its micro-batches and evaluations among `events` (the cluster's own, of those
// kinds).
SteadyState::Window window_of(const Plan& plan, const std::vector<const Event*>& events,
                              int cluster, const Ends& ends) {
  SteadyState::Window w;
  w.cluster = cluster;
  w.begin = ends.begin()->second;
  w.end = ends.rbegin()->second;
  w.periods = static_cast<int64_t>(ends.size()) - 1;
  const Evaluations ev = evaluations_of(events);
  const Intervals pauses = merged(ev.intervals);
  w.evaluation = length_inside(pauses, w.begin, w.end);
  for (size_t i = 0; i < ev.intervals.size(); ++i)
    if (ev.intervals[i].second > w.begin && ev.intervals[i].second <= w.end) {
      ++w.evaluations;
      w.evaluation_batches = std::max(w.evaluation_batches, ev.batches[i]);
    }
  for (const Event* e : events)
    if (finishes_micro_batch(plan, *e) && e->end > w.begin && e->end <= w.end) {
      ++w.micro_batches;
      if (!inside(pauses, e->end)) ++w.training_micro_batches;
    }
  return w;
}

}  // namespace

double SteadyState::training_rate(int64_t batch) const {
  if (empty()) return 0.0;
  double rate = 0;
  for (const auto& w : clusters)
    if (w.training() > 0)
      rate += static_cast<double>(w.training_micro_batches * batch) / w.training();
  return rate;
}

double SteadyState::rate_with_evaluations(int64_t batch) const {
  if (empty()) return 0.0;
  double rate = 0;
  for (const auto& w : clusters)
    if (w.length() > 0) rate += static_cast<double>(w.micro_batches * batch) / w.length();
  return rate;
}

const SteadyState::Window* SteadyState::of(int cluster) const {
  auto it = std::lower_bound(clusters.begin(), clusters.end(), cluster,
                             [](const Window& w, int c) { return w.cluster < c; });
  return it != clusters.end() && it->cluster == cluster ? &*it : nullptr;
}

bool finishes_micro_batch(const Plan& plan, const Event& e) {
  return e.kind == EventKind::kBackward && e.micro_batch >= 0 && e.cluster >= 0 &&
         static_cast<size_t>(e.cluster) < plan.clusters.size() &&
         e.stage + 1 ==
             static_cast<int>(plan.clusters[static_cast<size_t>(e.cluster)].stages.size());
}

const char* basis_name(SteadyState::Basis b) {
  switch (b) {
    case SteadyState::Basis::kAveragingRounds:
      return "averaging rounds";
    case SteadyState::Basis::kOptimizerSteps:
      return "optimizer steps";
    case SteadyState::Basis::kNone:
      break;
  }
  return "none";
}

SteadyState steady_state(const Plan& plan, const std::vector<Event>& events) {
  ClusterEnds rounds, steps;
  std::map<int, std::vector<const Event*>> own;  // cluster -> its completions and evaluations
  for (const auto& e : events) {
    if (e.cluster < 0) continue;
    if (e.kind == EventKind::kEval || (e.kind == EventKind::kForward && e.micro_batch < 0) ||
        finishes_micro_batch(plan, e))
      own[e.cluster].push_back(&e);
    if (e.kind == EventKind::kAverage && e.step >= 0) note_end(rounds[e.cluster], e.step, e.end);
    if (e.kind == EventKind::kUpdate && e.step >= 1) note_end(steps[e.cluster], e.step, e.end);
  }
  auto periodic = [](const ClusterEnds& ends) {
    return std::any_of(ends.begin(), ends.end(),
                       [](const auto& c) { return c.second.size() >= 2; });
  };
  SteadyState s;
  if (periodic(rounds))
    s.basis = SteadyState::Basis::kAveragingRounds;
  else if (!rounds.empty())
    return s;  // one round: no whole period yet, and steps alone would leave the averaging out
  else if (periodic(steps))
    s.basis = SteadyState::Basis::kOptimizerSteps;
  else
    return s;
  const ClusterEnds& ends = s.basis == SteadyState::Basis::kAveragingRounds ? rounds : steps;
  for (const auto& [cluster, mine] : ends)
    if (mine.size() >= 2) s.clusters.push_back(window_of(plan, own[cluster], cluster, mine));
  s.begin = s.clusters.front().begin;
  s.end = s.clusters.front().end;
  for (const auto& w : s.clusters) {
    s.begin = std::min(s.begin, w.begin);
    s.end = std::max(s.end, w.end);
    s.periods = std::max(s.periods, w.periods);
    s.micro_batches += w.micro_batches;
    s.training_micro_batches += w.training_micro_batches;
    s.evaluation += w.evaluation / static_cast<double>(s.clusters.size());
    s.evaluations = std::max(s.evaluations, w.evaluations);
    s.evaluation_batches = std::max(s.evaluation_batches, w.evaluation_batches);
  }
  return s;
}

}  // namespace rv
