#include "core/output/steady_state.h"

#include <algorithm>
#include <map>

namespace rv {
namespace {

// The latest end of each key's events: a round's or a step's end over every node.
using Ends = std::map<int64_t, Seconds>;

void note_end(Ends& ends, int64_t key, Seconds end) {
  auto [it, fresh] = ends.emplace(key, end);
  if (!fresh) it->second = std::max(it->second, end);
}

// Each cluster's evaluations as intervals: from the first start of its evaluation forwards
// (micro_batch < 0) after its previous kEval to its kEval; with the batches of each.
struct Evaluations {
  std::vector<std::pair<Seconds, Seconds>> intervals;  // one per evaluation, as found
  std::vector<int64_t> batches;
};

Evaluations evaluations_of(const std::vector<Event>& events) {
  std::map<int, std::vector<Seconds>> scored;                      // cluster -> kEval times
  std::map<int, std::vector<std::pair<Seconds, int64_t>>> starts;  // cluster -> (start, batch)
  for (const auto& e : events) {
    if (e.kind == EventKind::kEval) scored[e.cluster].push_back(e.end);
    if (e.kind == EventKind::kForward && e.micro_batch < 0)
      starts[e.cluster].emplace_back(e.start, -e.micro_batch);  // batch j is micro_batch -1 - j
  }
  Evaluations out;
  for (auto& [cluster, times] : scored) {
    std::sort(times.begin(), times.end());
    auto& forwards = starts[cluster];
    std::sort(forwards.begin(), forwards.end());
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

// The window over `ends` (at least two keys): from the first key's end to the last's.
void window_over(const Ends& ends, SteadyState::Basis basis, SteadyState& s) {
  s.basis = basis;
  s.begin = ends.begin()->second;
  s.end = ends.rbegin()->second;
  s.periods = static_cast<int64_t>(ends.size()) - 1;
}

}  // namespace

double SteadyState::training_rate(int64_t batch) const {
  return empty() || training() <= 0
             ? 0.0
             : static_cast<double>(training_micro_batches * batch) / training();
}

double SteadyState::rate_with_evaluations(int64_t batch) const {
  return empty() ? 0.0 : static_cast<double>(micro_batches * batch) / length();
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
  Ends rounds, steps;
  for (const auto& e : events) {
    if (e.kind == EventKind::kAverage && e.step >= 0) note_end(rounds, e.step, e.end);
    if (e.kind == EventKind::kUpdate && e.step >= 1) note_end(steps, e.step, e.end);
  }
  SteadyState s;
  if (rounds.size() >= 2)
    window_over(rounds, SteadyState::Basis::kAveragingRounds, s);
  else if (steps.size() >= 2)
    window_over(steps, SteadyState::Basis::kOptimizerSteps, s);
  else
    return s;
  const Evaluations ev = evaluations_of(events);
  const Intervals pauses = merged(ev.intervals);
  s.evaluation = length_inside(pauses, s.begin, s.end);
  for (size_t i = 0; i < ev.intervals.size(); ++i)
    if (ev.intervals[i].second > s.begin && ev.intervals[i].second <= s.end) {
      ++s.evaluations;
      s.evaluation_batches = std::max(s.evaluation_batches, ev.batches[i]);
    }
  for (const auto& e : events)
    if (finishes_micro_batch(plan, e) && e.end > s.begin && e.end <= s.end) {
      ++s.micro_batches;
      if (!inside(pauses, e.end)) ++s.training_micro_batches;
    }
  return s;
}

}  // namespace rv
