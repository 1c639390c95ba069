// Progress on a terminal for long runs: a Metrics observer that prints, at most once a second of
// wall time, the percentage of training done, the run's own time (simulated or wall) and the
// latest training loss. Silent unless enabled (by default when stderr is a terminal). Progress
// counts the updates of stage 0 of each cluster it sees (`ravnest real` shows rank 0's).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include "core/output/metrics.h"

namespace rv {

class Progress : public Metrics {
 public:
  // Whether progress should show for `mode` ("on", "off", or "auto": when stderr is a terminal).
  static bool enabled_for(const std::string& mode);
  Progress(int64_t total_updates, const char* clock_name, bool enabled);
  void record(const Event& e) override;
  void finish();

 private:
  int64_t total_;
  const char* clock_name_;
  bool enabled_;
  int64_t done_ = 0;
  double last_loss_ = kNaN;
  double time_ = 0;
  std::chrono::steady_clock::time_point last_print_;
  bool printed_ = false;
};

}  // namespace rv
