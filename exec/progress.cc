#include "exec/progress.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

namespace rv {

bool Progress::enabled_for(ProgressMode mode) {
  switch (mode) {
    case ProgressMode::kOn:
      return true;
    case ProgressMode::kOff:
      return false;
    case ProgressMode::kAuto:
      break;
  }
  return isatty(STDERR_FILENO) != 0;
}

std::string progress_line(int64_t done, int64_t total, const char* clock_name, double time_s,
                          double loss, double wall_s) {
  const double pct = total > 0 ? 100.0 * static_cast<double>(done) / static_cast<double>(total) : 0;
  char buf[256];
  int n = std::snprintf(buf, sizeof buf, "[%5.1f%%] %s time %.2f s", pct, clock_name, time_s);
  std::string line(buf, static_cast<size_t>(std::max(0, n)));
  if (!std::isnan(loss)) {
    n = std::snprintf(buf, sizeof buf, "  loss %.4f", loss);
    line.append(buf, static_cast<size_t>(std::max(0, n)));
  }
  if (done > 0 && wall_s > 0) {
    const double rate = static_cast<double>(done) / wall_s;
    const double left = static_cast<double>(std::max<int64_t>(0, total - done)) / rate;
    const auto secs = static_cast<int64_t>(std::llround(left));
    n = std::snprintf(buf, sizeof buf, "  %.3g updates/s  ETA %lld:%02lld:%02lld", rate,
                      static_cast<long long>(secs / 3600), static_cast<long long>(secs / 60 % 60),
                      static_cast<long long>(secs % 60));
    line.append(buf, static_cast<size_t>(std::max(0, n)));
  }
  return line;
}

Progress::Progress(int64_t total_updates, const char* clock_name, bool enabled)
    : total_(total_updates),
      clock_name_(clock_name),
      enabled_(enabled),
      start_(std::chrono::steady_clock::now()),
      last_print_(start_) {}

void Progress::record(const Event& e) {
  if (!enabled_) return;
  if (e.kind == EventKind::kLoss) last_loss_ = e.loss;
  if (e.kind == EventKind::kUpdate && e.stage == 0 && e.step > done_) done_ = e.step;
  time_ = std::max(time_, e.end);
  auto now = std::chrono::steady_clock::now();
  if (now - last_print_ < std::chrono::seconds(1)) return;
  last_print_ = now;
  printed_ = true;
  const double wall = std::chrono::duration<double>(now - start_).count();
  std::fprintf(stderr, "\r%s   ",
               progress_line(done_, total_, clock_name_, time_, last_loss_, wall).c_str());
  std::fflush(stderr);
}

void Progress::finish() {
  if (enabled_ && printed_) std::fprintf(stderr, "\n");
}

}  // namespace rv
