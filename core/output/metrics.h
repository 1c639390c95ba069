// Metrics: the events a node records during a run. Both executors produce the same events, so
// every output (metrics.csv, trace.json, summary.json, eval.csv) has one schema.
//
// Contract: record() is cheap and never blocks; events of one node arrive in non-decreasing `end`.
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "core/compute/work.h"
#include "core/units.h"

namespace rv {

enum class EventKind : int32_t {
  kForward = 1,   // span: forward pass of one micro-batch on one stage
  kBackward = 2,  // span: backward pass (the last stage's includes forward + loss)
  kUpdate = 3,    // span: optimizer step; `staleness` = updates since this micro-batch's forward
  kSend = 4,      // instant at send: `bytes`, `peer`
  kRecv = 5,      // instant at receipt: `bytes`, `peer`
  kLoss = 6,      // instant: training loss of micro-batch `micro_batch` (last stage)
  kEval = 7,      // instant: test loss and accuracy after `step` updates (last stage)
  kAverage = 8,   // span: cross-cluster averaging
  kMemory = 9,    // instant: memory in use, `bytes` (modeled); peak is kept
  kMeasuredMemory = 10,  // instant: peak resident memory measured by the OS, `bytes`
  kWait = 11,            // span: blocked waiting for a message (idle)
  kFlush = 12,           // span: a synchronous pipeline's flush (its update)
  kParams = 13,  // instant: the stage's parameters after update `step` (`values`; models that
                 // record them, ModelDesc::record_params), written to params.csv
  // Churn (algo/roster.h):
  kLeave = 14,     // instant: `node` left (at the departure; `peer` -1)
  kJoin = 15,      // instant: `node` arrived, as a spare
  kAssign = 16,    // instant: `node` takes stage `stage` of cluster `cluster` in place of `peer`
  kDrop = 17,      // instant: micro-batch `micro_batch` of `samples` samples was dropped unfinished
  kTransfer = 18,  // span: `node` fetched its stage's state after averaging `step` (`bytes` in all)
  kOut = 19,       // instant: cluster `cluster` sits out averaging `step` (recorded by its nodes)
  kMeasuredDeviceMemory = 20,  // instant: peak GPU memory the node's stage held (its caching
                               // allocator's peak allocated bytes), `bytes`; real runs on a GPU
  kLastKind = kMeasuredDeviceMemory,
};

const char* to_string(EventKind kind);

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

struct Event {
  EventKind kind = EventKind::kForward;
  int node = -1;
  int cluster = -1;
  int stage = -1;
  int64_t step = -1;         // updates applied on this node so far
  int64_t micro_batch = -1;  // micro-batch id, or eval batch id
  Seconds start = 0;         // == end for instants
  Seconds end = 0;
  double loss = kNaN;
  double accuracy = kNaN;
  int64_t staleness = -1;
  Bytes bytes = 0;
  int peer = -1;
  int64_t samples = 0;  // samples this event covers (loss, eval: the batch or test-set size)
  // Compute spans on a real clock: CPU seconds the node's thread spent on the span's maths, the
  // host's own work (below end - start where the host gave its core to others meanwhile, or where
  // the span waited out an emulated device's modeled time); NaN where the clock has none.
  Seconds cpu = kNaN;
  // Compute spans on a GPU: seconds the device spent on the span's kernels, between two device
  // (CUDA) events recorded on its stream before and after the maths; NaN elsewhere.
  Seconds device = kNaN;
  // kUpdate in numeric runs: the squared norm of the gradient the stage's update applied (its mean
  // over the update's micro-batches), computed after the span, not charged to it; NaN elsewhere.
  double grad_norm2 = kNaN;
  std::vector<float> values;  // kParams: the stage's flat parameters (StageModule::flat_state)
  // How many events this one stands for: 1, or, where a log folds (EventLog::fold), all of a
  // node's send, recv or wait events (`bytes` and end - start summed, `end` the last one's).
  int64_t count = 1;
};

// Send, recv and wait: the kinds EventLog::fold keeps as one total per node.
inline bool is_message_kind(EventKind k) {
  return k == EventKind::kSend || k == EventKind::kRecv || k == EventKind::kWait;
}

// What a compute span does with its micro-batch's saved activations (core/compute/work.h): a
// training forward writes them, its backward reads them, an optimizer step neither. The span's
// work is charged with it (PipelineWorker::compute) and replayed with it (ravnest validate).
inline SavedActivations saved_activations_of(const Event& span) {
  if (span.kind == EventKind::kForward)
    return SavedActivations::of(Pass::kForward, span.micro_batch);
  if (span.kind == EventKind::kBackward)
    return SavedActivations::of(Pass::kBackward, span.micro_batch);
  return {};
}

class Metrics {
 public:
  virtual ~Metrics() = default;
  virtual void record(const Event& e) = 0;
};

// Keeps every event in memory (one node, or all nodes of a simulation), or, for the nodes fold()
// names, their send, recv and wait events as one total each (output.metrics = "summary": a
// 10,000-node run records tens of millions of them).
//
// Events are kept in chunks of kChunk, each allocated once: a growing vector of them copied every
// event at each doubling and faulted in twice the memory it ended with (a third of a timing run's
// event loop went there).
class EventLog : public Metrics {
 public:
  // Nodes i with folded[i] != 0 keep one event per message kind (count: how many it stands for).
  void fold(std::vector<char> folded);
  void record(const Event& e) override;
  // The events kept so far, in record order (a copy; the folded totals not among them).
  std::vector<Event> events() const;
  size_t size() const;
  // Every event kept, the folded totals (in node order) after them; the log is left empty.
  std::vector<Event> take();
  // Checkpoints: the folded totals as they stand (one per folded node and message kind, count 0
  // where none came), and the log put back as it was (after fold(), with the same nodes).
  const std::vector<Event>& totals() const { return totals_; }
  void restore(std::vector<Event> events, std::vector<Event> totals);

 private:
  static constexpr size_t kChunk = 4096;  // events per chunk (about 0.6 MB)
  std::vector<std::vector<Event>> chunks_;
  std::vector<char> folded_;
  std::vector<Event> totals_;  // per folded node: send, recv, wait (count 0 until one comes)
};

}  // namespace rv
