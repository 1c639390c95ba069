#include "exec/progress.h"

#include <cmath>
#include <unistd.h>

#include <cstdio>

namespace rv {

bool Progress::enabled_for(const std::string& mode) {
  if (mode == "on") return true;
  if (mode == "off") return false;
  return isatty(STDERR_FILENO) != 0;
}

Progress::Progress(int64_t total_updates, const char* clock_name, bool enabled)
    : total_(total_updates), clock_name_(clock_name), enabled_(enabled),
      last_print_(std::chrono::steady_clock::now()) {}

void Progress::record(const Event& e) {
  if (!enabled_) return;
  if (e.kind == EventKind::kLoss) last_loss_ = e.loss;
  if (e.kind == EventKind::kUpdate && e.stage == 0 && e.step > done_) done_ = e.step;
  time_ = std::max(time_, e.end);
  auto now = std::chrono::steady_clock::now();
  if (now - last_print_ < std::chrono::seconds(1)) return;
  last_print_ = now;
  printed_ = true;
  double pct = total_ > 0 ? 100.0 * static_cast<double>(done_) / static_cast<double>(total_) : 0;
  if (std::isnan(last_loss_))
    std::fprintf(stderr, "\r[%5.1f%%] %s time %.2f s   ", pct, clock_name_, time_);
  else
    std::fprintf(stderr, "\r[%5.1f%%] %s time %.2f s  loss %.4f   ", pct, clock_name_, time_, last_loss_);
  std::fflush(stderr);
}

void Progress::finish() {
  if (enabled_ && printed_) std::fprintf(stderr, "\n");
}

}  // namespace rv
