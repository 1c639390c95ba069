// Averager: one node's part in cross-cluster averaging, the mean over the clusters of a tensor laid
// out like the node's stage state (ModelDesc::state_offset order, its stage's slice).
//
// Implementations (training.allreduce):
//   multi-ring   Ravnest's parallel multi-ring all-reduce (ring_averager.h), every ring at once
//   single-ring  one ring over the whole model between the clusters' first stages, each of which
//                collects its cluster's stages first and hands the means back (ring_averager.h)
//   gloo         the executor's own all-reduce (c10d ProcessGroupGloo), one group per ring of the
//                multi-ring, for comparison (collective_averager.h; the real executor only)
//
// The averaged tensor is [n] or [rows, n] (n = the stage state's length): every row is averaged
// (rows carry, e.g., optimizer state laid out like the parameters). In the simulator's timing mode
// the tensor is undefined and only the modeled transfers and additions of `rows` rows happen.
//
// Contract: every node of every cluster that takes part averages for the same `round`s, in order,
// with the same number of rows. Blocking: average(). Non-blocking: start(), then offer every
// message to hold() and call progress() until it returns true; result() then gives the mean.
#pragma once

#include <ATen/core/Tensor.h>

#include <functional>
#include <memory>
#include <string>

#include "algo/registry.h"
#include "algo/roster.h"
#include "core/env.h"
#include "core/model/model.h"
#include "core/plan.h"

namespace rv {

class Averager {
 public:
  virtual ~Averager() = default;

  // Whether this node takes part in averaging at all (false with one cluster, or for a stage
  // that holds no state where the topology needs none from it).
  virtual bool participates() const = 0;
  // Starts averaging `state` (see above) as averaging number `round`. An averager may work in
  // `state`'s memory when the caller hands over the only reference (std::move); otherwise it
  // copies it first. It never writes a tensor that someone else still holds.
  virtual void start(at::Tensor state, int64_t rows, int64_t round) = 0;
  // Keeps a message of this or a later averaging; returns false (and leaves `m`) for any other.
  virtual bool hold(Message& m) = 0;
  // Does whatever can be done without waiting; true once the mean is ready.
  virtual bool progress() = 0;
  // Blocks until the averaging in progress is done: `recv` gives the node's next message, and
  // messages that are not the averaging's go to `other`, in arrival order.
  virtual void wait(const std::function<Message()>& recv,
                    const std::function<void(Message)>& other);
  virtual bool active() const = 0;  // started and not yet cleared
  // The mean, once progress() returned true (numeric mode). Read-only: parts of it may still be on
  // their way to peers.
  virtual at::Tensor result() const = 0;
  virtual void clear() = 0;  // back to idle after a finished averaging

  // Churn (multi-ring only; the others throw rv::InputError, which the scenario's checks
  // forestall): From the next start(), this node holds `role`'s stage and averages among the
  // clusters of `view` (ascending), whose stages are held by `nodes`. Fewer than two clusters: no
  // averaging.
  virtual void reconfigure(const NodeRole& role, const Assignment& nodes,
                           const std::vector<int>& view);
  // `node` left: the rings of the averaging in progress that it belongs to are given up here; this
  // node keeps its own values for their chunks (another member that finished a ring first keeps
  // the mean). Rings without it go on.
  virtual void drop(int node);

  // start() then wait(); returns the mean (read-only, as result()), `state` itself if this node
  // does not take part, an undefined tensor in timing mode (where `state` is undefined too). Hand
  // `state` over with std::move to spare a copy.
  at::Tensor average(at::Tensor state, int64_t rows, int64_t round,
                     const std::function<Message()>& recv,
                     const std::function<void(Message)>& other);

 protected:
  // True from average()'s start() to its return: the caller waits in wait() for this averaging,
  // so an averager may make progress only there (the direct channel's works complete in a wait:
  // ring_averager.h). Every node averages a round the same way (blocking or not: the scenario's).
  bool blocking() const { return blocking_; }
  // An event of `kind` of the node in `role` (no micro-batch), starting and ending now.
  static Event event_now(NodeEnv& env, const NodeRole& role, EventKind kind);
  // `state` as [rows, n] in memory the averager may write: its own if the caller handed over the
  // only reference to a contiguous tensor, else a copy.
  static at::Tensor take_over(at::Tensor state);

 private:
  bool blocking_ = false;
};

// The averager for the all-reduce `kind` (training.allreduce, algo/registry.h). Throws
// rv::InputError for one on the executor's collectives where the environment has none (the
// simulator, loopback).
// `piece_bytes`: the rings' largest segment in one message (ring_piece_bytes; 0: whole).
std::unique_ptr<Averager> make_averager(NodeEnv& env, const Plan& plan, const ModelDesc& model,
                                        int node, const Allreduce& kind, int64_t piece_bytes = 0);

}  // namespace rv
