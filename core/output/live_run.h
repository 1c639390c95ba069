// A run folder that exists while its run does: a run started from the command line shows its
// metrics and evaluations as they come, and a run that is killed keeps what it had.
//
//   start     the folder is made (never over an existing one) with scenario.toml, plan.json and
//             run.json {"status": "running", ...}; bad input has been refused before, so it
//             leaves no folder
//   running   every event's metrics.csv row (unless output.metrics = "summary") and every
//             evaluation's eval.csv row is appended in the order events arrive, written to the
//             file in whole rows (one write() per flush) at least every kFlushSeconds of wall
//             time and at every evaluation
//   finish    the final outputs (run_output.h: metrics.csv sorted, summary.json, trace.json, ...)
//             are written beside, then moved over the live files one by one, run.json last
//             ({"status": "complete"}): each file is whole at every moment
//   fail      run.json {"status": "failed", "error": ...}; what was appended stays
//   killed    run.json still says "running": the rows appended so far are what the run did
//
// Time: the flushes' cadence and a failed run's wall time come from `wall`, the executor's wall
// clock (exec/wall_env.h; a manual one in tests): nothing here reads a clock itself. The run's
// start for run.json is the caller's RunInfo::started_unix_s.
//
// Not thread-safe: record() is called by one thread at a time (a run's observer).
#pragma once

#include <sstream>
#include <string>
#include <vector>

#include "core/env.h"
#include "core/output/metrics.h"
#include "core/output/run_output.h"

namespace rv {

class LiveRun : public Metrics {
 public:
  static constexpr double kFlushSeconds = 1.0;
  // rv::Error if the folder exists already or cannot be made.
  LiveRun(const std::string& path, const Scenario& s, const Plan& plan, const ModelDesc& model, RunInfo info,
          const Clock& wall);
  LiveRun(const LiveRun&) = delete;
  LiveRun& operator=(const LiveRun&) = delete;
  // Marks the run failed if neither finish() nor fail() was called (an exception on its way out).
  ~LiveRun() override;

  void record(const Event& e) override;
  // The finished run's outputs, in place of the live ones; run.json says complete, with the wall
  // time since construction. Returns the path.
  std::string finish(std::vector<Event> events);
  // run.json says failed, with `why`.
  void fail(const std::string& why);
  const std::string& path() const { return path_; }

 private:
  void write_status(const std::string& status, const std::string& error, Seconds wall_seconds);
  void flush_if_due(bool force);
  void close_files();

  std::string path_;
  const Scenario& scenario_;
  const Plan& plan_;
  const ModelDesc& model_;
  RunInfo info_;
  const Clock& wall_;
  // The live files (-1: not open) and the rows not yet written to them.
  int metrics_fd_ = -1, eval_fd_ = -1;
  std::ostringstream metrics_rows_, eval_rows_;
  bool live_metrics_;
  bool done_ = false;
  int64_t since_check_ = 0;
  Seconds start_, last_flush_;  // by wall_
};

}  // namespace rv
