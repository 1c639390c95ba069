// NodeEnv: the only door between an algorithm (one node's straight-line, blocking code) and the
// world. The simulator (sim/), the real processes (real/) and the in-process loopback (loopback/)
// implement it; core/ never includes SimGrid, sockets, threads or sleeps.
//
// Threading: one NodeEnv belongs to one node; its methods are called from that node's own thread
// (or SimGrid actor) only. Implementations may use threads internally.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <vector>

#include "core/clock.h"
#include "core/compute/work.h"
#include "core/output/metrics.h"
#include "core/units.h"

namespace rv {

// What a message means to the receiving algorithm. Values are part of the wire format.
enum class MsgKind : int32_t {
  kForward = 1,   // activations of micro-batch `id`, towards the next stage
  kBackward = 2,  // gradient w.r.t. the activations of micro-batch `id`, towards the previous stage
  kEvalForward = 3,  // activations of evaluation batch `id` (no backward follows)
  kStop = 4,         // the sender has finished; the receiver finishes its own work and stops
  kReduce = 5,       // a chunk in a reduce-scatter round (`aux` = ring, `step` = round)
  kGather = 6,       // a chunk in an all-gather round
  kControl = 7,      // executor-level control (barriers, shutdown); never seen by algorithms
  kCollect = 8,      // single-ring averaging: a stage's state, towards its cluster's leader
  kDistribute = 9,   // single-ring averaging: the mean of a stage's state, from the leader
  kMember = 10,      // from the executor (src -1): the membership changed (Membership); no payload
  kStateRequest = 11,  // churn: layers' state wanted after averaging `id` (aux, step: state range)
  kState = 12,         // churn: the answer, the state [aux, step) with its optimizer rows
  // Kinds from here to kLast belong to the algorithm that runs: its own file names the ones it
  // sends (algorithm_kind below) and says what id, step and aux carry.
  kAlgorithmFirst = 13,
  kLast = kAlgorithmFirst + 15,  // the wire format checks kinds against it
};

// The algorithm's own message kind number `i` (0 to 15), for its file to name.
constexpr MsgKind algorithm_kind(int i) {
  return static_cast<MsgKind>(static_cast<int32_t>(MsgKind::kAlgorithmFirst) + i);
}

// The kind's name ("forward"); an algorithm's own kinds read "algorithm+i".
const char* to_string(MsgKind kind);

// One message. The payload (possibly empty in timing mode) and the modeled size are separate, like
// SimGrid's put(data, simulated_size): the simulator charges `bytes`, the real executor sends the
// payload and reports what it sent.
struct Message {
  MsgKind kind = MsgKind::kControl;
  int32_t src = -1;                 // filled in by the transport on receipt
  int64_t id = 0;                   // micro-batch or evaluation batch id
  int64_t step = 0;                 // sender's step (update count) or round
  int64_t aux = 0;                  // kind-specific: version, ring id, ...
  double scalar = 0.0;              // kind-specific: e.g. a loss value
  std::vector<at::Tensor> payload;  // contiguous CPU float32 tensors (empty in timing mode)
  // The sender will never write these payload tensors again (nor will anyone it hands them to), so
  // a transport may send them as they are; otherwise a transport that sends after send() returns
  // copies any tensor the message does not hold alone.
  bool payload_frozen = false;
  Bytes bytes = 0;  // modeled size on the wire, in bytes (payload plus a header)
  // Transports across processes: when the message's last byte arrived, on this machine's steady
  // clock (CLOCK_MONOTONIC, seconds); -1 where unknown.
  double arrived = -1;
};

// Whether `t` is the only tensor with its memory (no other handle, view or storage user): whoever
// holds it may hand that memory on without a copy (Message::payload_frozen's "holds alone").
bool holds_alone(const at::Tensor& t);

// Names one expected message by its fields (Transport::offer).
struct MessageMatch {
  MsgKind kind = MsgKind::kControl;
  int64_t id = 0, step = 0, aux = 0;
  bool operator==(const MessageMatch& o) const {
    return kind == o.kind && id == o.id && step == o.step && aux == o.aux;
  }
  bool matches(const Message& m) const {
    return m.kind == kind && m.id == id && m.step == step && m.aux == aux;
  }
};

// Size of the fixed header that precedes every message on the wire, in bytes.
constexpr Bytes kHeaderBytes = 64;

// Point-to-point transport. send() never blocks on the receiver; messages from one sender to one
// receiver arrive in the order they were sent (FIFO per pair); recv() takes the next message from
// any peer. Errors (a peer that died, a timeout) are thrown as rv::PeerError.
// Received payload tensors are read-only: a transport within one process (the simulator's) hands
// the receiver the sender's own tensors.
class Transport {
 public:
  virtual ~Transport() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual void send(int dst, Message msg) = 0;
  // Blocks until a message arrives.
  virtual Message recv() = 0;
  // Returns a message that has fully arrived, or nothing, without blocking.
  virtual std::optional<Message> try_recv() = 0;
  // Blocks until every message sent so far has left this node (safe to stop afterwards).
  virtual void flush() = 0;

  // Receiving without a copy (optional; the default ignores it). `into`, a contiguous CPU float32
  // tensor, is offered as the place for the payload of the next message from `src` that matches
  // `match` and has exactly into.numel() elements in one tensor. A transport that uses the offer
  // hands that message over with payload[0] sharing into's memory (same data_ptr); one that does
  // not delivers it as usual. From the offer until that message is taken, or withdraw() of the same
  // match returns, the caller neither reads nor writes `into`; the transport holds a reference.
  virtual void offer(int src, const MessageMatch& match, at::Tensor into) {
    (void)src, (void)match, (void)into;
  }
  // Takes back an offer not used yet; if a payload is arriving into it now, returns once it has.
  virtual void withdraw(int src, const MessageMatch& match) { (void)src, (void)match; }
};

// Runs a unit of work and charges its modeled cost.
class Compute {
 public:
  virtual ~Compute() = default;
  // False in the simulator's timing mode: `maths` is never called, tensors stay empty.
  virtual bool numeric() const = 0;
  // Runs `maths` (when numeric) and accounts for `work` on this node. In the simulator the node's
  // clock advances by the device's modeled time for it (core/compute/profile.h time_of); for real,
  // by the time the maths takes (optionally stretched to the modeled time, emulating a slower
  // device). Returns the seconds a GPU spent on the maths' kernels, measured with device events
  // on its stream; NaN where nothing measures them (the CPU, the simulator).
  // `saved`: what the work does with its micro-batch's saved activations (whether a backward finds
  // them in the device's cache: core/compute/profile.h DeviceHistory).
  virtual Seconds run(const Work& work, SavedActivations saved,
                      const std::function<void()>& maths) = 0;
  // Where the maths runs: a stage's tensors live there; those crossing NodeEnv stay on the CPU.
  virtual c10::Device device() const { return c10::kCPU; }
};

// An executor's own collective engine, for baselines (the real executor: c10d ProcessGroupGloo).
// Absent (null) in the simulator and the loopback executor.
class CollectiveWork {
 public:
  virtual ~CollectiveWork() = default;
  virtual bool done() = 0;  // without blocking; throws rv::PeerError if the operation failed
  virtual void wait() = 0;  // blocks until done; throws rv::PeerError on failure or timeout
};

class Collectives {
 public:
  virtual ~Collectives() = default;
  virtual const char* name() const = 0;  // for messages and reports, e.g. "c10d allreduce (Gloo)"
  // Makes the group of `ranks` (ascending, this rank among them) if it is new: blocks until every
  // member has joined. Every member joins its groups in the same order (e.g. by ring).
  virtual void join(const std::vector<int>& ranks) = 0;
  // Starts summing `t` (a contiguous CPU float32 tensor, kept alive until done) in place over the
  // joined group of `ranks`. Members start their sums over one group in the same order.
  virtual std::unique_ptr<CollectiveWork> allreduce_sum(const std::vector<int>& ranks,
                                                        at::Tensor t) = 0;
};

// Churn: the run's one record of nodes that left and arrived, in one order for every node, and
// for each averaging round how many of those events it counts. The first node to ask for a
// round's count fixes it ("seals" the round): events recorded later count for later rounds, so
// every node sees the same membership for each round (algo/roster.h). After each new event and
// each newly sealed round the executor puts a kMember message in every present node's queue.
// Executors without churn provide none (NodeEnv::membership is null).
struct MemberEvent {
  int node = -1;
  bool join = false;  // arrived (as a spare); false: left
  Seconds at = 0;     // when it happened (the notice comes churn.detect_s later)
};

class Membership {
 public:
  virtual ~Membership() = default;
  // Seals `round` if no node has yet (every earlier round is sealed first) and returns the number
  // of events it counts.
  virtual int64_t seal(int64_t round) = 0;
  // The count of a sealed round; -1 if it is not sealed yet.
  virtual int64_t sealed(int64_t round) const = 0;
  // The events recorded so far from index `from` on, in their one order.
  virtual std::vector<MemberEvent> events(size_t from) const = 0;
};

// Checkpoints (core/checkpoint/checkpoint.h): the executor keeps each node's state at a
// checkpoint and hands it back when the run resumes. Executors without them provide none
// (NodeEnv::checkpoints is null).
// Direct exchanges (optional; the real executor without an emulated network or injected faults):
// a tensor goes from a send() straight into the place its receiver posted with recv(), moved once,
// with no message around it, for algorithms whose two ends both know what flows when (a ring
// all-reduce's schedule). What a receiver posts is where the data lands: it must be posted in
// time for nothing to wait long, and a sender's tensor moves only once its receiver's place is
// there (rendezvous). Nothing here goes through the Transport: no recv() sees it, no network
// emulator delays it, no fault touches it; so an executor offers a channel only where the
// transport has none of those, for every node of the run alike (an algorithm decides from its
// presence, and both ends must decide the same).
//
// Matching: between two nodes, in one direction, under one tag, the k-th send meets the k-th
// recv (first in, first out), so both ends post them in the same order, and their lengths agree
// (the algorithm's schedule must make sure of both: a mismatch is a bug, which the channel does not
// promise to catch). Tags: [0, kMaxTag].
//
// Progress: a work may report done() only once wait() was called on it (c10d's sends and receives
// complete in a wait), so a caller that must not block cannot rely on done() alone.
// Memory: `from` is read and `into` written until the work is done; the caller keeps both alive
// and neither writes `from` nor reads or writes `into` meanwhile (the works hold references).
// Threading: the node's own thread.
class DirectChannel {
 public:
  static constexpr int64_t kMaxTag = (int64_t{1} << 30) - 1;
  virtual ~DirectChannel() = default;
  // Starts sending `from` (a contiguous CPU float32 tensor) to node `dst`.
  virtual std::unique_ptr<CollectiveWork> send(int dst, int64_t tag, at::Tensor from) = 0;
  // Starts receiving from node `src` into `into` (a contiguous CPU float32 tensor): the data of
  // its matching send, exactly into.numel() elements.
  virtual std::unique_ptr<CollectiveWork> recv(int src, int64_t tag, at::Tensor into) = 0;
};

struct NodeState;

class Checkpoints {
 public:
  virtual ~Checkpoints() = default;
  // Updates between checkpoints (scenario checkpoint.every).
  virtual int64_t every() const = 0;
  // A resumed run: the state node `node` resumes from, returned at the checkpoint's instant (the
  // simulator releases its nodes in node order then, as at the checkpoint); null in a fresh run
  // (or for a node that kept none).
  virtual const NodeState* resume(int node) = 0;
  // At a checkpoint (every() updates since the last, pipelines drained, averaging done): keeps
  // `state` whole on disk and returns once every node that trains has kept its own for the same
  // update count. Throws rv::Error if the run is to stop there (a stop requested after that
  // checkpoint).
  virtual void save(const NodeState& state) = 0;
};

struct NodeEnv {
  Transport& transport;
  Clock& clock;
  Compute& compute;
  Metrics& metrics;
  Collectives* collectives = nullptr;  // the executor's own collectives, if it has any
  Membership* membership = nullptr;    // churn: the run's membership, if nodes may come and go
  Checkpoints* checkpoints = nullptr;  // the run's checkpoints, if it takes them
  DirectChannel* direct = nullptr;     // direct exchanges, where the executor offers them (above)
};

}  // namespace rv
