// Work as the calibrated compute model counts it: kernels (operations) by kind and size class, and
// their floating-point operations. A device does a unit of work in
//   sum over buckets of  ops * op_overhead + flops / (peak * efficiency[kind][class])
// (profile.h): every kernel has a fixed cost, and small kernels run far below the peak.
//
// Units: flops (floating-point operations), operations (kernel launches). Torch-free, so that the
// planner and the simulator's timing mode can describe models of any size.
#pragma once

#include <array>
#include <cstddef>

#include "core/units.h"

namespace rv {

// What kind of kernel an operation is; each has its own efficiency curve.
enum class OpKind : int { kMatmul = 0, kConv = 1, kElementwise = 2 };
constexpr int kOpKinds = 3;
const char* op_kind_name(OpKind k);  // "matmul", "conv", "elementwise"

// Size classes of one operation, by its flops: small kernels cannot fill a device.
constexpr int kSizeClasses = 3;
constexpr Flops kSmallOpFlops = 1 << 20;   // below: small (about a 64x64x128 matmul)
constexpr Flops kMediumOpFlops = 1 << 27;  // below: medium; from here on: large
int size_class_of(Flops op_flops);
const char* size_class_name(int c);  // "small", "medium", "large"

class Work {
 public:
  // `count` operations of `kind`, each of `op_flops` flops.
  void add(OpKind kind, Flops op_flops, double count = 1);
  void add(const Work& other);
  Work scaled(double factor) const;  // `factor` times as many of every operation

  double ops(OpKind kind, int size_class) const { return at(kind, size_class).ops; }
  Flops flops(OpKind kind, int size_class) const { return at(kind, size_class).flops; }
  Flops total_flops() const;
  double total_ops() const;

 private:
  struct Bucket {
    double ops = 0;
    Flops flops = 0;
  };
  const Bucket& at(OpKind k, int c) const { return b_[static_cast<size_t>(k)][static_cast<size_t>(c)]; }
  std::array<std::array<Bucket, kSizeClasses>, kOpKinds> b_{};
};

}  // namespace rv
