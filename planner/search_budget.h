// The budget of a planner's search (the genetic algorithms): a number of scored individuals, so
// that a plan depends on the scenario only (deterministic, and simulations of it byte-identical),
// and a wall-clock limit as a safety net whose use the plan records (the plan then depends on the
// machine's speed). The search asks before each batch of evaluations (a generation) whether it may
// spend them, and stops at the first refusal.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <string>

#include "core/error.h"
#include "core/plan.h"
#include "core/scenario/scenario.h"

namespace rv {

class SearchBudget {
 public:
  // The default budget: `most` evaluations, or `work_per_node` over the pool size where that is
  // fewer (an evaluation costs about one pass over the nodes), but at least kLeast.
  // planner.evaluations, where set, replaces it.
  SearchBudget(const Scenario& s, int nodes, int64_t most, double work_per_node)
      : limit_(s.planner.evaluations > 0
                   ? s.planner.evaluations
                   : std::max<int64_t>(
                         kLeast, std::min<int64_t>(most, static_cast<int64_t>(
                                                             work_per_node / std::max(1, nodes))))),
        deadline_(std::chrono::steady_clock::now() +
                  std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                      std::chrono::duration<double>(s.planner.time_limit_s))) {}

  // Whether `n` more evaluations fit; if they do, they are spent.
  bool spend(int64_t n) {
    if (used_ + n > limit_) return false;
    if (used_ > 0 && std::chrono::steady_clock::now() >= deadline_) {
      timed_out_ = true;
      return false;
    }
    used_ += n;
    return true;
  }
  // Whether the time limit has passed (then recorded), for work outside spend() (seeding).
  bool out_of_time() {
    if (std::chrono::steady_clock::now() >= deadline_) timed_out_ = true;
    return timed_out_;
  }
  int64_t limit() const { return limit_; }
  int64_t used() const { return used_; }

  // Into plan.json's "search".
  void record(Plan& plan) const {
    plan.search_evaluations = used_;
    plan.search_budget = limit_;
    plan.search_timed_out = timed_out_;
  }

  static constexpr int64_t kLeast = 200;  // the least default budget

  // Refuses a population whose genes (one int per node per individual, twice over while a
  // generation is made) would pass 2^27 ints (512 MiB).
  static void check_population(const Scenario& s, int64_t population, int nodes) {
    if (population * static_cast<int64_t>(nodes) > (int64_t{1} << 27))
      throw ScenarioError(s.where("planner.population"), "planner.population",
                          std::to_string(population) + " individuals of " + std::to_string(nodes) +
                              " nodes: more than 2^27 genes (512 MiB); give fewer");
  }

 private:
  int64_t limit_;
  std::chrono::steady_clock::time_point deadline_;
  int64_t used_ = 0;
  bool timed_out_ = false;
};

}  // namespace rv
