#include "core/env.h"

namespace rv {

bool holds_alone(const at::Tensor& t) { return t.use_count() == 1 && t.storage().use_count() == 1; }

const char* to_string(MsgKind kind) {
  static constexpr const char* kAlgorithmKinds[] = {
      "algorithm+0",  "algorithm+1",  "algorithm+2",  "algorithm+3", "algorithm+4",  "algorithm+5",
      "algorithm+6",  "algorithm+7",  "algorithm+8",  "algorithm+9", "algorithm+10", "algorithm+11",
      "algorithm+12", "algorithm+13", "algorithm+14", "algorithm+15"};
  const int own = static_cast<int>(kind) - static_cast<int>(MsgKind::kAlgorithmFirst);
  if (own >= 0 &&
      own <= static_cast<int>(MsgKind::kLast) - static_cast<int>(MsgKind::kAlgorithmFirst))
    return kAlgorithmKinds[own];
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
    case MsgKind::kAlgorithmFirst:  // an algorithm's own (above)
    case MsgKind::kLast:
      break;
  }
  return "unknown";
}

}  // namespace rv
