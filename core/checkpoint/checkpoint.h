// Checkpoints on disk: what a node keeps at a checkpoint, and the folder that holds a run's.
//
//   <dir>/round-<done>/            one folder per checkpoint, `done` = updates before it
//     node-<r>.state               node r's NodeState (binary, below), written whole or not at all
//     events.state                 the simulator's whole event log (its order and folded totals)
//     complete.json                written last, once every node's file is durable: {"done",
//                                  "time_s", "nodes": [...]}; a folder without it is incomplete
//
// A checkpoint is complete when complete.json exists; the writer of complete.json then removes
// every other round folder, so a run's folder holds its last complete checkpoint (and, while the
// next one is written, that one's partial folder).
//
// The binary format (little-endian as this machine writes it; the files are for resuming on the
// same kind of machine): the magic "RVCKPT02", then fields in a fixed order, tensors as their
// shape and float32 data. A file that is short, has another magic, or whose sizes exceed what
// remains is malformed: rv::InputError naming the file.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/output/metrics.h"
#include "core/units.h"

namespace rv {

// Thrown where a run stops after a checkpoint because it was asked to (--stop-after-checkpoint).
class StoppedAtCheckpoint : public Error {
 public:
  using Error::Error;
};

// One node's state at a checkpoint: all that its algorithm needs to go on as if it had never
// stopped (the data position is `done`: micro-batch ids are update counts, and every random draw
// is seeded by them).
struct NodeState {
  int node = -1;
  int cluster = -1;
  int stage = -1;
  int64_t done = 0;             // updates of its cluster before the checkpoint
  Seconds time = 0;             // the node's clock when it reached the checkpoint (for reading; a
                                // resumed run goes on from CheckpointInfo::time)
  int64_t version = 0;          // the worker's updates (PipelineWorker::version)
  int64_t trained = 0;          // micro-batches whose loss this node computed
  int64_t averagings = 0;       // averaging rounds done
  Bytes peak_memory = 0;        // modeled peak so far
  int64_t stage_version = 0;    // numeric: the Stage's optimizer steps (Stage::version)
  int64_t optimizer_steps = 0;  // numeric: the optimizer's own step count (Adam's bias correction)
  at::Tensor state;  // numeric: [1 + slots, n] float32, Stage::averaged_state(true); else undefined
  std::vector<Event> events;  // the node's events so far, where its executor keeps them per node
};

// Encodes and decodes; decode throws rv::InputError naming `where` if the bytes are malformed.
std::string encode_node_state(const NodeState& s);
NodeState decode_node_state(const std::string& bytes, const std::string& where);
// An event log (the simulator's: every node's events in their order, then EventLog's folded
// totals).
struct LogState {
  std::vector<Event> events, totals;
};
std::string encode_log(const LogState& log);
LogState decode_log(const std::string& bytes, const std::string& where);
LogState read_log(const std::string& path);

// The folder layout above.
std::string round_folder(const std::string& dir, int64_t done);
// The files of the round folder `folder` (CheckpointInfo::folder).
std::string node_state_file(const std::string& folder, int node);
std::string events_file(const std::string& folder);
std::string node_state_path(const std::string& dir, int64_t done, int node);
std::string events_path(const std::string& dir, int64_t done);
// Writes `s` to its path atomically (the round folder is made if needed).
void write_node_state(const std::string& dir, const NodeState& s);
NodeState read_node_state(const std::string& path);

struct CheckpointInfo {
  int64_t done = 0;
  Seconds time = 0;
  std::vector<int> nodes;  // the nodes whose state it holds
  std::string folder;      // its round folder
};
// Marks the checkpoint of `info.done` complete (complete.json, atomically) and removes the other
// round folders of `dir`.
void complete_checkpoint(const std::string& dir, const CheckpointInfo& info);
// The complete checkpoint in the round folder `folder` (rv::InputError if it is not one).
CheckpointInfo read_checkpoint(const std::string& folder);
// The last complete checkpoint in `dir`, if any (rv::InputError if its complete.json is malformed).
std::optional<CheckpointInfo> last_checkpoint(const std::string& dir);

// Node `node`'s state in the complete checkpoint `point`: rv::InputError naming the file if it is
// malformed or holds another node, or another update count.
NodeState read_node_state(const CheckpointInfo& point, int node);

// The checkpoint folder of a run: checkpoint.dir, or <run folder>/checkpoints when it is "".
std::string checkpoint_dir(const std::string& configured, const std::string& run_folder);

}  // namespace rv
