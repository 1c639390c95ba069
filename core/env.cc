#include "core/env.h"

namespace rv {

bool holds_alone(const at::Tensor& t) { return t.use_count() == 1 && t.storage().use_count() == 1; }

const char* to_string(MsgKind kind) {
  switch (kind) {
    case MsgKind::kForward:
      return "forward";
    case MsgKind::kBackward:
      return "backward";
    case MsgKind::kEvalForward:
      return "eval-forward";
    case MsgKind::kStop:
      return "stop";
    case MsgKind::kReduce:
      return "reduce";
    case MsgKind::kGather:
      return "gather";
    case MsgKind::kControl:
      return "control";
    case MsgKind::kCollect:
      return "collect";
    case MsgKind::kDistribute:
      return "distribute";
    case MsgKind::kMember:
      return "member";
    case MsgKind::kStateRequest:
      return "state_request";
    case MsgKind::kState:
      return "state";
    case MsgKind::kProgress:
      return "progress";
    case MsgKind::kPart:
      return "part";
    case MsgKind::kPartSum:
      return "part_sum";
  }
  return "unknown";
}

}  // namespace rv
