#include "core/output/metrics.h"

namespace rv {

const char* to_string(EventKind kind) {
  switch (kind) {
    case EventKind::kForward: return "forward";
    case EventKind::kBackward: return "backward";
    case EventKind::kUpdate: return "update";
    case EventKind::kSend: return "send";
    case EventKind::kRecv: return "recv";
    case EventKind::kLoss: return "loss";
    case EventKind::kEval: return "eval";
    case EventKind::kAverage: return "average";
    case EventKind::kMemory: return "memory";
    case EventKind::kMeasuredMemory: return "measured_memory";
    case EventKind::kWait: return "wait";
    case EventKind::kFlush: return "flush";
    case EventKind::kParams: return "params";
  }
  return "unknown";
}

}  // namespace rv
