// Ravnest's parallel multi-ring all-reduce: the mean of every cluster's model state.
//
// The flat model state (each layer's parameters, then its buffers) is cut at every cluster's stage
// boundaries into chunks; chunk k has one ring, made of the node holding it in each cluster
// (Plan::rings). Each ring splits its chunk into C segments and runs a reduce-scatter then an
// all-gather, 2(C - 1) rounds; every ring runs at the same time, and a node that holds several
// chunks serves all its rings in each round. After it, every cluster holds the exact mean (up to
// float rounding).
//
// Contract: every node of every cluster that holds state averages for the same `round`s, in order.
// average() blocks until its rings are done; messages that are not this averaging's (pipeline work
// that arrives meanwhile) are handed to `defer`, in arrival order. Or, without blocking: start(),
// then hold() every averaging message that arrives and call progress() until it returns true.
#pragma once

#include <functional>
#include <map>
#include <tuple>
#include <vector>

#include <ATen/core/Tensor.h>

#include "core/env.h"
#include "core/model.h"
#include "core/plan.h"

namespace rv {

class MultiRingAverager {
 public:
  MultiRingAverager(NodeEnv& env, const Plan& plan, const ModelDesc& model, int node);

  // Whether this node takes part in any ring (false with one cluster).
  bool participates() const { return !rings_.empty(); }
  // Averages `state` (this node's stage state, flat; undefined in timing mode, where only the
  // modeled transfers and additions happen) and returns the mean. `round` numbers averagings.
  at::Tensor average(const at::Tensor& state, int64_t round, const std::function<void(Message)>& defer);
  // Keeps an averaging message (for this or a later averaging). Returns false (and leaves `m`)
  // for any other message.
  bool hold(Message& m);

  // Non-blocking averaging: start() sends the first round; progress() does every round whose
  // messages have arrived and returns true once the mean is ready (then result() gives it).
  void start(const at::Tensor& state, int64_t round);
  bool progress();
  bool active() const { return phase_ != Phase::kIdle; }
  at::Tensor result() const { return state_; }
  // Back to idle after a finished non-blocking averaging.
  void clear() {
    phase_ = Phase::kIdle;
    state_ = at::Tensor();
  }

 private:
  struct MyRing {
    int id = 0;           // index in Plan::rings
    int64_t lo = 0, hi = 0;  // this node's slice of the ring's chunk, relative to its stage state
    int member = 0;       // this node's position (its cluster) in the ring
    int prev = -1, next = -1;
    int64_t seg_lo(int i) const;  // segment i of C: [seg_lo(i), seg_lo(i + 1))
    int members = 0;
  };
  enum class Phase { kIdle, kReduce, kGather, kDone };
  void send_round();
  void note(EventKind kind, int peer, Bytes bytes);  // a send or receive event

  NodeEnv& env_;
  int node_;
  NodeRole role_;
  std::vector<MyRing> rings_;
  std::map<std::tuple<int, int, int64_t, int64_t>, Message> early_;  // (kind, ring, step, round)
  // The averaging in progress.
  Phase phase_ = Phase::kIdle;
  int t_ = 0;            // round within the phase
  bool sent_ = false;    // this round's segments are sent
  int64_t round_ = 0;
  at::Tensor state_;
  Event span_;
};

}  // namespace rv
