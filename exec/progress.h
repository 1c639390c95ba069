// Progress on a terminal for long runs: a Metrics observer that prints, at most once a second of
// wall time, the percentage of training done, the run's own time (simulated or wall), the latest
// training loss, the rate (updates per wall second) and the wall time left at that rate. Silent
// unless enabled (by default when stderr is a terminal). Progress counts the updates of stage 0
// of each cluster it sees (`ravnest real` shows rank 0's).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include "core/output/metrics.h"
#include "core/scenario/choice.h"

namespace rv {

// --progress: show progress (on), never (off), or when stderr is a terminal (auto).
enum class ProgressMode { kAuto, kOn, kOff };
template <>
struct ChoiceNames<ProgressMode> {
  static constexpr ChoiceName<ProgressMode> kNames[] = {
      {ProgressMode::kAuto, "auto"}, {ProgressMode::kOn, "on"}, {ProgressMode::kOff, "off"}};
};

// One progress line: `done` of `total` updates after `wall_s` wall seconds, the run at `time_s`
// on its own clock (`clock_name`), the latest loss (NaN: none yet). The rate and the time left
// show once there is a rate to go by (some update done, some wall time gone).
std::string progress_line(int64_t done, int64_t total, const char* clock_name, double time_s,
                          double loss, double wall_s);

class Progress : public Metrics {
 public:
  // Whether progress should show for `mode` (auto: when stderr is a terminal).
  static bool enabled_for(ProgressMode mode);
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
  std::chrono::steady_clock::time_point start_, last_print_;
  bool printed_ = false;
};

}  // namespace rv
