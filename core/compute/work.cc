#include "core/compute/work.h"

#include "core/error.h"

namespace rv {

const char* op_kind_name(OpKind k) {
  switch (k) {
    case OpKind::kMatmul:
      return "matmul";
    case OpKind::kConv:
      return "conv";
    case OpKind::kElementwise:
      return "elementwise";
  }
  return "?";
}

int size_class_of(Flops op_flops) {
  if (op_flops < kSmallOpFlops) return 0;
  if (op_flops < kMediumOpFlops) return 1;
  return 2;
}

const char* size_class_name(int c) {
  static const char* const names[kSizeClasses] = {"small", "medium", "large"};
  RV_CHECK(c >= 0 && c < kSizeClasses, "no such size class");
  return names[c];
}

void Work::add(OpKind kind, Flops op_flops, double count) {
  RV_CHECK(op_flops >= 0 && count >= 0, "work: negative flops or operations");
  if (count == 0) return;
  Bucket& b = b_[static_cast<size_t>(kind)][static_cast<size_t>(size_class_of(op_flops))];
  b.ops += count;
  b.flops += count * op_flops;
}

void Work::add(const Work& other) {
  for (size_t k = 0; k < b_.size(); ++k)
    for (size_t c = 0; c < b_[k].size(); ++c) {
      b_[k][c].ops += other.b_[k][c].ops;
      b_[k][c].flops += other.b_[k][c].flops;
    }
}

Work Work::scaled(double factor) const {
  RV_CHECK(factor >= 0, "work: negative factor");
  Work w = *this;
  for (auto& kind : w.b_)
    for (Bucket& b : kind) {
      b.ops *= factor;
      b.flops *= factor;
    }
  return w;
}

Flops Work::total_flops() const {
  Flops f = 0;
  for (const auto& kind : b_)
    for (const Bucket& b : kind) f += b.flops;
  return f;
}

double Work::total_ops() const {
  double n = 0;
  for (const auto& kind : b_)
    for (const Bucket& b : kind) n += b.ops;
  return n;
}

}  // namespace rv
