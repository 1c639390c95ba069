#include "real/real_checkpoints.h"

#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>

#include "core/error.h"

namespace rv {

RealCheckpoints::RealCheckpoints(int64_t every, std::string dir, std::vector<int> trainers,
                                 int rank, GlooTransport& transport, const EventLog& log,
                                 const Clock& clock, std::optional<NodeState> resume,
                                 int64_t stop_after)
    : every_(every),
      dir_(std::move(dir)),
      trainers_(std::move(trainers)),
      rank_(rank),
      transport_(transport),
      log_(log),
      clock_(clock),
      resume_(std::move(resume)),
      stop_after_(stop_after) {}

RealCheckpoints::~RealCheckpoints() = default;

const NodeState* RealCheckpoints::resume(int node) {
  RV_CHECK(node == rank_, "RealCheckpoints: rank " + std::to_string(rank_) + " asked for node " +
                              std::to_string(node));
  return resume_ ? &*resume_ : nullptr;
}

void RealCheckpoints::barrier() {
  if (!group_) group_ = transport_.make_group(trainers_);
  try {
    group_->barrier()->wait();
  } catch (const std::exception& e) {
    throw PeerError("rank " + std::to_string(rank_) +
                    ": the checkpoint's barrier failed: " + e.what());
  }
}

void RealCheckpoints::save(const NodeState& state) {
  NodeState mine = state;
  mine.events = log_.events();
  write_node_state(dir_, mine);
  barrier();  // every training rank's file is whole on disk
  const bool coordinator = rank_ == trainers_.front();
  if (coordinator) {
    CheckpointInfo info;
    info.done = state.done;
    info.time = clock_.now();
    info.nodes = trainers_;
    complete_checkpoint(dir_, info);
  }
  if (++completed_ != stop_after_) return;
  barrier();  // the checkpoint is complete before any rank stops
  throw StoppedAtCheckpoint("stopped after checkpoint " + std::to_string(completed_) + " (" +
                            std::to_string(state.done) + " updates), as asked");
}

}  // namespace rv
