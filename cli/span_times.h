// ravnest validate's reading of a real run's compute spans against the model: how long each
// training forward and backward took, how much CPU its maths took, and its modeled time under the
// run's own devices (Prepared::scenario), charged as the simulator charges it (DeviceHistory).
#pragma once

#include <cmath>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "core/output/validation.h"
#include "core/units.h"

namespace rv {

// The real run's training forwards and backwards: how long each took, how much CPU its maths
// took, and its modeled time.
struct SpanTimes {
  std::vector<Seconds> took, cpu, modeled;
  // The share that ran late (core/output/validation.h is_late), and the share of those whose maths
  // fitted their share of a core: late by a wait that woke late, not by the host's work.
  double late_fraction() const {
    return fraction([&](size_t i) { return is_late(took[i], modeled[i]); });
  }
  double late_within_share(double share) const {
    return fraction([&](size_t i) {
      return is_late(took[i], modeled[i]) && !(cpu[i] > share * modeled[i] * (1 + kLateTolerance));
    });
  }
  // The median of took / modeled over the spans (NaN without any): 1 where the run computed at the
  // model's speed.
  double median_ratio() const;
  // Each span's CPU time over its share of a core times its modeled time (exec/dilation.h).
  std::vector<double> demand(double share) const {
    std::vector<double> d;
    for (size_t i = 0; i < cpu.size(); ++i)
      if (std::isfinite(cpu[i])) d.push_back(cpu[i] / (share * modeled[i]));
    return d;
  }

 private:
  template <typename Pred>
  double fraction(Pred pred) const {
    size_t n = 0;
    for (size_t i = 0; i < took.size(); ++i) n += pred(i) ? 1 : 0;
    return took.empty() ? 0.0 : static_cast<double>(n) / static_cast<double>(took.size());
  }
};

// The median over i of a[i] / b[i] where b[i] > 0; NaN without any, or where a and b differ in
// length (two readings of different spans).
double median_ratio(const std::vector<Seconds>& a, const std::vector<Seconds>& b);

// The spans of the run folder's metrics.csv (`metrics`), `p` the run's scenario, model and plan.
SpanTimes span_times(const Prepared& p, const std::string& metrics);

}  // namespace rv
