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
//   stop      run.json {"status": "stopped", "reason": ...}: stopped on request after a checkpoint
//             (--stop-after-checkpoint), to be resumed (--resume); what was appended stays
//   interrupt a signal (SIGINT, SIGTERM) ended it: run.json {"status": "interrupted", "reason":
//   ...}
//             where the launcher of several processes caught it (mark_run)
//   killed    run.json still says "running": the rows appended so far are what the run did
//
// Time: the flushes' cadence and a failed run's wall time come from `wall`, the executor's wall
// clock (exec/wall_env.h; a manual one in tests): nothing here reads a clock itself. The run's
// start for run.json is the caller's RunInfo::started_unix_s.
//
// A real run's ranks other than 0 (each its own process) join rank 0's folder with LiveRows:
// their rows go to the same metrics.csv and eval.csv, opened for appending (O_APPEND), each write
// whole rows, so that the processes' rows never mix within a row. A rank closes its rows before it
// hands its events to rank 0, which finishes the folder.
//
// Not thread-safe: record() is called by one thread at a time (a run's observer).
#pragma once

#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "core/clock.h"
#include "core/output/metrics.h"
#include "core/output/run_output.h"

namespace rv {

// The live rows of one process: metrics.csv (unless output.metrics = "summary") and eval.csv of
// the folder at `dir`, opened for appending, flushed in whole rows. A LiveRun holds its own; a
// joining process (a real run's rank other than 0) makes one on the run's files.
class LiveRows : public Metrics {
 public:
  static constexpr double kFlushSeconds = 1.0;
  // `create`: makes the files (never over existing ones) and writes their header rows; else opens
  // the ones the run's LiveRun made (rv::Error if they are not there).
  LiveRows(const std::string& dir, bool live_metrics, const Clock& wall, bool create);
  LiveRows(const LiveRows&) = delete;
  LiveRows& operator=(const LiveRows&) = delete;
  ~LiveRows() override;
  void record(const Event& e) override;
  // Writes what is held if kFlushSeconds have passed since the last write (always with `force`).
  void flush_if_due(bool force);
  void close();  // flushes what it can and closes; record() does nothing after it

 private:
  std::string dir_;
  const Clock& wall_;
  int metrics_fd_ = -1, eval_fd_ = -1;  // -1: not open
  std::ostringstream metrics_rows_, eval_rows_;
  int64_t since_check_ = 0;
  Seconds last_flush_;  // by wall_
};

// Rewrites the run.json of the folder at `path` as `status` ("failed" or "interrupted") with `why`
// unless it says complete or stopped (an end its writer chose): what the launcher of several
// processes does when its run failed or was interrupted, since it knows the root cause (a writer
// that was killed left "running"; one that stopped because it lost a peer said only that). Does
// nothing where there is no such folder.
void mark_run(const std::string& path, const std::string& status, const std::string& why);
inline void mark_run_failed(const std::string& path, const std::string& why) {
  mark_run(path, "failed", why);
}

class LiveRun : public Metrics {
 public:
  static constexpr double kFlushSeconds = LiveRows::kFlushSeconds;
  // rv::Error if the folder exists already or cannot be made.
  LiveRun(const std::string& path, const Scenario& s, const Plan& plan, const ModelDesc& model,
          RunInfo info, const Clock& wall);
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
  // run.json says stopped, with `why`: the run ended on request and is to be resumed.
  void stop(const std::string& why);
  const std::string& path() const { return path_; }

 private:
  void write_status(const std::string& status, const std::string& why, Seconds wall_seconds);
  void end(const std::string& status, const std::string& why);  // fail(), stop()

  std::string path_;
  const Scenario& scenario_;
  const Plan& plan_;
  const ModelDesc& model_;
  RunInfo info_;
  const Clock& wall_;
  bool done_ = false;
  Seconds start_;                   // by wall_
  std::unique_ptr<LiveRows> rows_;  // made once the folder exists
};

}  // namespace rv
