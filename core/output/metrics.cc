#include "core/output/metrics.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <iterator>

#include "core/error.h"

namespace rv {

const char* to_string(EventKind kind) {
  switch (kind) {
    case EventKind::kForward:
      return "forward";
    case EventKind::kBackward:
      return "backward";
    case EventKind::kUpdate:
      return "update";
    case EventKind::kSend:
      return "send";
    case EventKind::kRecv:
      return "recv";
    case EventKind::kLoss:
      return "loss";
    case EventKind::kEval:
      return "eval";
    case EventKind::kAverage:
      return "average";
    case EventKind::kMemory:
      return "memory";
    case EventKind::kMeasuredMemory:
      return "measured_memory";
    case EventKind::kWait:
      return "wait";
    case EventKind::kFlush:
      return "flush";
    case EventKind::kParams:
      return "params";
    case EventKind::kLeave:
      return "leave";
    case EventKind::kJoin:
      return "join";
    case EventKind::kAssign:
      return "assign";
    case EventKind::kDrop:
      return "drop";
    case EventKind::kTransfer:
      return "transfer";
    case EventKind::kOut:
      return "out";
    case EventKind::kMeasuredDeviceMemory:
      return "measured_device_memory";
  }
  return "unknown";
}

namespace {
int total_slot(EventKind k) { return k == EventKind::kSend ? 0 : k == EventKind::kRecv ? 1 : 2; }

// Faults a new chunk's pages in with one call rather than one trap per page as events fill it
// (under this project's hypervisor a trap costs about 7 us: a seventh of a timing run's event loop
// at 10 nodes went there). Linux 5.14 and later; elsewhere the pages fault in as they are written.
void prefault(const std::vector<Event>& chunk) {
  const auto page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const auto begin = (reinterpret_cast<uintptr_t>(chunk.data()) + page - 1) / page * page;
  const auto end = reinterpret_cast<uintptr_t>(chunk.data() + chunk.capacity()) / page * page;
#ifdef MADV_POPULATE_WRITE
  if (end > begin) (void)madvise(reinterpret_cast<void*>(begin), end - begin, MADV_POPULATE_WRITE);
#endif
}
}  // namespace

void EventLog::fold(std::vector<char> folded) {
  folded_ = std::move(folded);
  totals_.assign(folded_.size() * 3, Event{});
  for (size_t i = 0; i < totals_.size(); ++i) totals_[i].count = 0;
}

void EventLog::record(const Event& e) {
  if (!is_message_kind(e.kind) || e.node < 0 || static_cast<size_t>(e.node) >= folded_.size() ||
      !folded_[static_cast<size_t>(e.node)]) {
    if (chunks_.empty() || chunks_.back().size() >= kChunk) {
      chunks_.emplace_back();
      chunks_.back().reserve(kChunk);
      prefault(chunks_.back());
    }
    chunks_.back().push_back(e);
    return;
  }
  Event& t = totals_[static_cast<size_t>(e.node) * 3 + total_slot(e.kind)];
  if (t.count == 0) {
    t = e;
    t.count = 1;
    t.peer = -1;
    t.micro_batch = -1;
    return;
  }
  // Seconds summed into a span that ends at the last one's end.
  const Seconds busy = (t.end - t.start) + (e.end - e.start);
  t.end = std::max(t.end, e.end);
  t.start = t.end - busy;
  t.step = e.step;
  t.bytes += e.bytes;
  t.count += e.count;
}

void EventLog::restore(std::vector<Event> events, std::vector<Event> totals) {
  RV_CHECK(totals.size() == totals_.size(),
           "EventLog::restore: the checkpoint's log folds other nodes");
  chunks_.clear();
  if (!events.empty()) chunks_.push_back(std::move(events));  // the next event starts a chunk
  totals_ = std::move(totals);
}

size_t EventLog::size() const {
  size_t n = 0;
  for (const auto& c : chunks_) n += c.size();
  return n;
}

std::vector<Event> EventLog::events() const {
  std::vector<Event> out;
  out.reserve(size());
  for (const auto& c : chunks_) out.insert(out.end(), c.begin(), c.end());
  return out;
}

std::vector<Event> EventLog::take() {
  std::vector<Event> out;
  if (chunks_.size() == 1) {
    out = std::move(chunks_.front());  // no second copy of a short log
  } else {
    out.reserve(size() + totals_.size());
    for (auto& c : chunks_) std::move(c.begin(), c.end(), std::back_inserter(out));
  }
  for (auto& t : totals_)
    if (t.count > 0) out.push_back(std::move(t));
  chunks_.clear();
  totals_.clear();
  folded_.clear();
  return out;
}

}  // namespace rv
