// Work as the calibrated compute model counts it: operations (one layer's kernels in one pass) by
// kind, pass and intensity class, and their floating-point operations. A device does a unit of
// work in
//   sum over buckets of  ops * overhead[pass][kind] + flops / (peak *
//   efficiency[pass][kind][class])
// (profile.h): every operation has a fixed cost (dispatch, autograd bookkeeping, allocation), and
// operations that move many bytes per flop run far below the peak.
//
// The class of an operation is its arithmetic intensity, flops per byte of the tensors it reads
// and writes (float32), and its footprint, not its flops: a 3x3 convolution of 1 input channel
// and one of 16 can have the same flops, yet the first does 4 flops per byte and runs at a third
// of the second's rate; an elementwise kernel over 4 MB runs at a third of its rate over 64 kB.
// Small operations are slow through their fixed cost.
//
// Cold memory: the efficiencies are measured with an operation's tensors in the cache (the
// calibration repeats it). A stage whose resident bytes (weights, gradients, optimizer state, one
// micro-batch's saved activations) exceed the device's cache finds its weights gone from it at
// every span (its own optimizer step and backward pushed them out): such a span also reads its
// `cold` bytes once from memory, at the device's memory bandwidth (profile.h).
//
// Flop conventions (the calibration uses the same ones, so efficiencies are comparable):
//   forward            the layer's flops (2 per multiply-add; 1 per element for elementwise kinds)
//   backward, matmul and conv: the forward's flops per gradient computed (input, weights)
//   backward, others   the forward's flops
//   add_elementwise    one per 8 bytes moved: a kernel that reads one tensor and writes one (the
//                      calibration's ReLU) one per element, one that reads two 1.5 per element
//
// Units: flops (floating-point operations), bytes, operations. Torch-free, so that the planner and
// the simulator's timing mode can describe models of any size.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/units.h"

namespace rv {

// What kind of layer an operation belongs to; each has its own fixed cost and efficiency curve.
// (attention comes with the transformer layers.) kRandom: a layer that draws random numbers, a
// dropout (its mask, product and scaling, and their backward), measured apart because its mask
// draws each element from a generator: on the host measured (Debian's LibTorch, CPU), the digits
// CNN's two dropouts took 0.40 ms of a 0.72 ms forward where the ReLU's rate charged 0.04 ms. A
// profile without it (written before it) charges such layers as elementwise (profile.h).
enum class OpKind : int {
  kMatmul = 0,
  kConv = 1,
  kNorm = 2,
  kPool = 3,
  kElementwise = 4,
  kRandom = 5
};
constexpr int kOpKinds = 6;
const char* op_kind_name(OpKind k);  // "matmul", "conv", "norm", "pool", "elementwise", "random"

// Forward or backward (gradients) of a layer. Optimizer steps and averaging are forward
// elementwise work.
enum class Pass : int { kForward = 0, kBackward = 1 };
constexpr int kPasses = 2;
const char* pass_name(Pass p);  // "forward", "backward"

// Operation classes: by arithmetic intensity (flops per byte moved: below 4, 8, 16, 32, 64, and
// beyond) and by footprint (the bytes an operation moves: within a core's own cache, up to
// kStreamedBytes, or beyond, where it streams from memory), 6 x 3. The middle level exists because
// one "beyond the cache" class averaged rates 2.6x apart: on the host measured, a ReLU's backward
// ran at 0.055 of the peak over 4.8 MB and at 0.021-0.029 over 9.6-36 MB, and batch
// normalisation's backward at batch 128 took 1.4-1.8x what the same class at batch 32 gave.
constexpr int kIntensities = 6;
constexpr std::array<double, kIntensities - 1> kIntensityBounds{{4, 8, 16, 32, 64}};  // flop/B
constexpr double kCachedBytes = 1 << 20;    // up to here an operation runs from the core's cache
constexpr double kStreamedBytes = 8 << 20;  // beyond here it streams from memory
constexpr int kFootprints = 3;
constexpr int kOpClasses = kFootprints * kIntensities;
// intensity + kIntensities * footprint (0: <= kCachedBytes, 1: <= kStreamedBytes, 2: beyond)
int op_class_of(Flops op_flops, double op_bytes);
std::string op_class_name(
    int c);  // "<4 flop/B", ..., ">=64 flop/B, beyond 1 MiB", ">=64 flop/B, beyond 8 MiB"

class Work {
 public:
  // `count` operations of `kind` in `pass`, each of `op_flops` flops moving `op_bytes` bytes.
  void add(OpKind kind, Pass pass, Flops op_flops, double op_bytes, double count = 1);
  // Elementwise forward work over `elements` float32 values read `reads` times and written once
  // (an optimizer step, an averaging sum): (reads + 1) / 2 flops per element, so that it takes the
  // time of its bytes at the rate the calibration's ReLU (one read, one write) achieves. Such
  // kernels are bound by memory, not arithmetic: on the host measured, p - t over 131k-1M floats
  // took 1.5-1.8x a ReLU's time over as many (the optimizer steps of compute_model.sh's MLP, whose
  // SGD runs lr g and then p - that, ran 1.2x what one flop per element charged).
  void add_elementwise(double elements, int reads = 1, double count = 1);
  // Bytes this work reads from memory once if `resident` bytes (what its stage keeps between
  // spans) do not fit the device's cache. Adds to the cold bytes; the resident bytes are the
  // largest given.
  void add_cold(double cold, double resident);
  // Bytes this work reads that a device keeps in its caches between back-to-back spans but not
  // over an idle wait (a stage waiting for its next message): the activations it reads (a
  // forward's input; a backward's saved activations and incoming gradient). After such a wait the
  // span reads the fraction of them, and of its cold bytes, that the device's cooling curve gives
  // (profile.h, idle_cold) from memory.
  void add_idle_cold(double bytes);
  // Bytes of activations a forward keeps for its micro-batch's backward (Stage::forward's saved
  // tensors). The backward reads them back, from memory where the device's work in between (other
  // micro-batches' activations) pushed them out of its cache: DeviceHistory charges that whatever
  // the idle wait. They are part of the backward's idle-cold bytes.
  void add_saved(double bytes);
  void add(const Work& other);  // cold, idle-cold and saved bytes add; resident bytes: the larger
  Work scaled(double factor) const;  // `factor` times as many of every operation and cold bytes

  double cold_bytes() const { return cold_; }
  double resident_bytes() const { return resident_; }
  double idle_cold_bytes() const { return idle_cold_; }
  double saved_bytes() const { return saved_; }

  double ops(OpKind kind, Pass pass, int c) const { return at(kind, pass, c).ops; }
  Flops flops(OpKind kind, Pass pass, int c) const { return at(kind, pass, c).flops; }
  Flops total_flops() const;
  double total_ops() const;
  // How many distinct operation codes it runs, as far as its buckets tell: the buckets (pass,
  // kind, class) it has operations in. An optimizer step runs the same two or three kernels on
  // every tensor: many operations, few codes.
  int codes() const;
  // Which code the work runs, as far as its buckets tell: a fingerprint of the buckets (pass,
  // kind, class) it has operations in. A stage's forward, backward and optimizer step differ; two
  // micro-batches' forwards do not; two works of one kind and class (an optimizer step and an
  // averaging sum, both forward elementwise) count as one code. The wake-up curve (profile.h)
  // charges each code once after a wait.
  uint64_t code() const;

 private:
  struct Bucket {
    double ops = 0;
    Flops flops = 0;
  };
  static size_t index(OpKind k, Pass p, int c) {
    return (static_cast<size_t>(p) * kOpKinds + static_cast<size_t>(k)) * kOpClasses +
           static_cast<size_t>(c);
  }
  const Bucket& at(OpKind k, Pass p, int c) const { return b_[index(k, p, c)]; }
  std::array<Bucket, static_cast<size_t>(kPasses) * kOpKinds * kOpClasses>
      b_{};               // by pass, kind, class
  double cold_ = 0;       // bytes
  double resident_ = 0;   // bytes
  double idle_cold_ = 0;  // bytes
  double saved_ = 0;      // bytes
};

// What a span does with its micro-batch's saved activations (Work::add_saved): a training
// forward writes them, the backward of the same micro-batch reads them; other spans (an optimizer
// step, an evaluation, averaging) neither.
struct SavedActivations {
  enum class Use { kNone, kWrites, kReads };
  Use use = Use::kNone;
  int64_t micro_batch = -1;
  // A training span's (micro_batch >= 0; evaluation batches are negative and keep none): its
  // forward writes them, its backward reads them.
  static SavedActivations of(Pass pass, int64_t micro_batch) {
    if (micro_batch < 0) return {};
    return {pass == Pass::kForward ? Use::kWrites : Use::kReads, micro_batch};
  }
};

}  // namespace rv
