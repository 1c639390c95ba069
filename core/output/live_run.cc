#include "core/output/live_run.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/output/whole_file.h"

namespace fs = std::filesystem;

namespace rv {
namespace {

// O_APPEND: the rows of several processes (a real run's ranks) go to the end, whole.
int open_new(const fs::path& p) {
  const int fd = ::open(p.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) throw Error(p.string() + ": cannot create: " + std::strerror(errno));
  return fd;
}

int open_existing(const fs::path& p) {
  const int fd = ::open(p.c_str(), O_WRONLY | O_APPEND | O_CLOEXEC);
  if (fd < 0)
    throw Error(p.string() + ": cannot open the run's live file: " + std::strerror(errno));
  return fd;
}

// Writes `rows` (whole rows) to `fd` in one write() where it can and empties it; rv::Error on
// failure.
void write_rows(int fd, std::ostringstream& rows, const std::string& what) {
  const std::string text = rows.str();
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t w = ::write(fd, text.data() + done, text.size() - done);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) throw Error(what + ": cannot write: " + std::strerror(errno));
    done += static_cast<size_t>(w);
  }
  rows.str("");
}

}  // namespace

LiveRows::LiveRows(const std::string& dir, bool live_metrics, const Clock& wall, bool create)
    : dir_(dir), wall_(wall), last_flush_(wall.now()) {
  const fs::path d(dir_);
  if (live_metrics)
    metrics_fd_ = create ? open_new(d / "metrics.csv") : open_existing(d / "metrics.csv");
  try {
    eval_fd_ = create ? open_new(d / "eval.csv") : open_existing(d / "eval.csv");
  } catch (...) {
    close();
    throw;
  }
  if (create) {
    if (live_metrics) metrics_rows_ << metrics_csv_header() << "\n";
    eval_rows_ << eval_csv_header() << "\n";
    flush_if_due(true);
  }
}

LiveRows::~LiveRows() {
  for (int fd : {metrics_fd_, eval_fd_})
    if (fd >= 0) ::close(fd);
}

void LiveRows::record(const Event& e) {
  if (eval_fd_ < 0) return;  // closed
  if (metrics_fd_ >= 0) append_event_row(metrics_rows_, e);
  if (e.kind == EventKind::kEval) {
    append_eval_row(eval_rows_, e);
    flush_if_due(true);  // evaluations are rare and what a reader watches for
    return;
  }
  // The clock only every 256 events: a simulation records millions.
  if (++since_check_ >= 256) {
    since_check_ = 0;
    flush_if_due(false);
  }
}

void LiveRows::flush_if_due(bool force) {
  const Seconds now = wall_.now();
  if (!force && now - last_flush_ < kFlushSeconds) return;
  last_flush_ = now;
  if (metrics_fd_ >= 0) write_rows(metrics_fd_, metrics_rows_, dir_ + "/metrics.csv");
  if (eval_fd_ >= 0) write_rows(eval_fd_, eval_rows_, dir_ + "/eval.csv");
}

void LiveRows::close() {
  try {
    flush_if_due(true);
  } catch (const std::exception&) {
    // A full disk: the rows held are lost, the files stay whole rows.
  }
  for (int* fd : {&metrics_fd_, &eval_fd_}) {
    if (*fd >= 0) ::close(*fd);
    *fd = -1;
  }
}

void mark_run(const std::string& path, const std::string& status, const std::string& why) {
  const fs::path file = fs::path(path) / "run.json";
  std::error_code ec;
  if (!fs::is_regular_file(file, ec)) return;
  nlohmann::json j;
  try {
    j = read_json_file(file.string());
  } catch (const std::exception&) {
    return;  // not a run.json this code wrote whole: leave it
  }
  if (!j.is_object() || !j.contains("status") || j["status"] == "complete" ||
      j["status"] == "stopped")
    return;
  j["status"] = status;
  j.erase("error");
  j.erase("reason");
  j[why_key(status)] = why;
  write_whole_file(file.string(), j.dump(2) + "\n");
}

LiveRun::LiveRun(const std::string& path, const Scenario& s, const Plan& plan,
                 const ModelDesc& model, RunInfo info, const Clock& wall)
    : path_(fs::absolute(fs::path(path)).lexically_normal().string()),
      scenario_(s),
      plan_(plan),
      model_(model),
      info_(std::move(info)),
      wall_(wall),
      start_(wall.now()) {
  const fs::path dir(path_);
  std::error_code ec;
  fs::create_directories(dir.parent_path(), ec);
  // create_directory reports whether it made the folder: never one that exists (another run's).
  if (!fs::create_directory(dir, ec) || ec)
    throw Error(path + (ec ? ": cannot make the run folder: " + ec.message()
                           : ": run folder exists already"));
  write_whole_file((dir / "scenario.toml").string(), to_toml(s));
  write_whole_file((dir / "plan.json").string(), plan_file_text(plan, model));
  info_.wall_seconds = 0;
  write_whole_file((dir / "run.json").string(), run_json_text(info_, "running", ""));
  rows_ =
      std::make_unique<LiveRows>(path_, s.output.metrics != MetricsOutput::kSummary, wall, true);
}

LiveRun::~LiveRun() {
  if (done_) return;
  try {
    fail("the run ended before it finished (an error on the way out)");
  } catch (...) {
    // A destructor must not throw; the folder keeps run.json "running".
  }
}

void LiveRun::record(const Event& e) {
  if (!done_) rows_->record(e);
}

void LiveRun::write_status(const std::string& status, const std::string& why,
                           Seconds wall_seconds) {
  info_.wall_seconds = wall_seconds;
  write_whole_file((fs::path(path_) / "run.json").string(), run_json_text(info_, status, why));
}

std::string LiveRun::finish(std::vector<Event> events) {
  RV_CHECK(!done_, path_ + ": finish() after the run ended");
  rows_->flush_if_due(true);
  const fs::path dir(path_);
  const fs::path tmp = dir / ".final.partial";
  std::error_code ec;
  fs::remove_all(tmp, ec);
  fs::create_directories(tmp);
  info_.wall_seconds = wall_.now() - start_;
  try {
    write_run_outputs(tmp.string(), scenario_, plan_, model_, std::move(events), info_);
    rows_->close();
    // Each file replaces its live one whole (a rename); run.json last, so "complete" is said only
    // once every other file is final. A live metrics.csv that the final outputs do not have
    // (output.metrics = "summary" writes node_metrics.csv) cannot exist: it was never opened.
    for (const auto& entry : fs::directory_iterator(tmp)) {
      if (entry.path().filename() == "run.json") continue;
      fs::rename(entry.path(), dir / entry.path().filename());
    }
    fs::rename(tmp / "run.json", dir / "run.json");
    fs::remove(tmp);
  } catch (const std::exception& e) {
    fs::remove_all(tmp, ec);
    fail(std::string("writing the final outputs: ") + e.what());
    throw;
  }
  done_ = true;
  return path_;
}

void LiveRun::fail(const std::string& why) { end("failed", why); }

void LiveRun::stop(const std::string& why) { end("stopped", why); }

void LiveRun::end(const std::string& status, const std::string& why) {
  if (done_) return;
  done_ = true;
  rows_->close();  // the rows appended stay, whole; run.json below says why, if it can
  write_status(status, why, wall_.now() - start_);
}

}  // namespace rv
