// CollectiveAverager: cross-cluster averaging by the executor's own all-reduce
// (NodeEnv::collectives, c10d ProcessGroupGloo in the real executor), the baseline our rings are
// measured against.
//
// It keeps the multi-ring's structure: the chunks of Plan::rings, each summed over a group made of
// its owners (one node per cluster), every chunk at once; Gloo picks its own algorithm inside a
// group. Groups are joined at construction, in ring order on every node, so that no two nodes wait
// for each other's groups. Bytes on the wire are not observable through c10d: the send and receive
// events carry what a ring all-reduce moves, 2(C - 1)/C of the chunk each way.
#pragma once

#include <memory>
#include <vector>

#include "algo/averager.h"

namespace rv {

class CollectiveAverager : public Averager {
 public:
  // Throws rv::InputError if this node averages and `env` has no collectives.
  CollectiveAverager(NodeEnv& env, const Plan& plan, const ModelDesc& model, int node);

  bool participates() const override { return !chunks_.empty(); }
  void start(at::Tensor state, int64_t rows, int64_t round) override;
  bool hold(Message&) override { return false; }  // nothing travels through the transport
  bool progress() override;
  void wait(const std::function<Message()>& recv,
            const std::function<void(Message)>& other) override;
  bool active() const override { return active_; }
  at::Tensor result() const override;
  void clear() override;

 private:
  struct Chunk {
    std::vector<int> group;  // the ring's owners, ascending
    int64_t lo = 0, hi = 0;  // this node's slice, in the averaged tensor
    int next = -1;           // the next cluster's owner (for the events' peer)
    at::Tensor buffer;       // the slice being summed
    std::unique_ptr<CollectiveWork> work;
  };
  void finish();

  NodeEnv& env_;
  int node_;
  NodeRole role_;
  int clusters_ = 0;
  int64_t own_ = 0;
  std::vector<Chunk> chunks_;
  bool active_ = false, done_ = false, was_1d_ = false;
  at::Tensor state_;
  Event span_;
};

}  // namespace rv
