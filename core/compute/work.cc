#include "core/compute/work.h"

#include <algorithm>
#include <cstdio>

#include "core/error.h"

namespace rv {

const char* op_kind_name(OpKind k) {
  switch (k) {
    case OpKind::kMatmul:
      return "matmul";
    case OpKind::kConv:
      return "conv";
    case OpKind::kNorm:
      return "norm";
    case OpKind::kPool:
      return "pool";
    case OpKind::kElementwise:
      return "elementwise";
    case OpKind::kRandom:
      return "random";
  }
  return "?";
}

const char* pass_name(Pass p) { return p == Pass::kForward ? "forward" : "backward"; }

int op_class_of(Flops op_flops, double op_bytes) {
  const int footprint =
      kIntensities * ((op_bytes > kCachedBytes ? 1 : 0) + (op_bytes > kStreamedBytes ? 1 : 0));
  if (op_bytes <= 0) return kIntensities - 1;
  const double intensity = op_flops / op_bytes;
  int c = 0;
  while (c < kIntensities - 1 && intensity >= kIntensityBounds[static_cast<size_t>(c)]) ++c;
  return footprint + c;
}

std::string op_class_name(int c) {
  RV_CHECK(c >= 0 && c < kOpClasses, "no such operation class");
  const int i = c % kIntensities;
  char buf[48];
  if (i < kIntensities - 1)
    std::snprintf(buf, sizeof buf, "<%g flop/B", kIntensityBounds[static_cast<size_t>(i)]);
  else
    std::snprintf(buf, sizeof buf, ">=%g flop/B", kIntensityBounds.back());
  const int level = c / kIntensities;
  return std::string(buf) + (level == 0 ? "" : level == 1 ? ", beyond 1 MiB" : ", beyond 8 MiB");
}

void Work::add(OpKind kind, Pass pass, Flops op_flops, double op_bytes, double count) {
  RV_CHECK(op_flops >= 0 && op_bytes >= 0 && count >= 0,
           "work: negative flops, bytes or operations");
  if (count == 0) return;
  Bucket& b = b_[index(kind, pass, op_class_of(op_flops, op_bytes))];
  b.ops += count;
  b.flops += count * op_flops;
}

void Work::add_elementwise(double elements, int reads, double count) {
  RV_CHECK(reads >= 1, "work: an elementwise kernel reads one tensor at least");
  add(OpKind::kElementwise, Pass::kForward, elements * (reads + 1) / 2.0,
      static_cast<double>(kFloatBytes) * elements * (reads + 1), count);
}

void Work::add_cold(double cold, double resident) {
  RV_CHECK(cold >= 0 && resident >= 0, "work: negative cold or resident bytes");
  cold_ += cold;
  resident_ = std::max(resident_, resident);
}

void Work::add_idle_cold(double bytes) {
  RV_CHECK(bytes >= 0, "work: negative idle-cold bytes");
  idle_cold_ += bytes;
}

void Work::add_saved(double bytes) {
  RV_CHECK(bytes >= 0, "work: negative saved bytes");
  saved_ += bytes;
}

void Work::add(const Work& other) {
  for (size_t i = 0; i < b_.size(); ++i) {
    b_[i].ops += other.b_[i].ops;
    b_[i].flops += other.b_[i].flops;
  }
  cold_ += other.cold_;
  idle_cold_ += other.idle_cold_;
  saved_ += other.saved_;
  resident_ = std::max(resident_, other.resident_);
}

Work Work::scaled(double factor) const {
  RV_CHECK(factor >= 0, "work: negative factor");
  Work w = *this;
  for (Bucket& b : w.b_) {
    b.ops *= factor;
    b.flops *= factor;
  }
  w.cold_ *= factor;
  w.idle_cold_ *= factor;
  w.saved_ *= factor;
  return w;
}

Flops Work::total_flops() const {
  Flops f = 0;
  for (const Bucket& b : b_) f += b.flops;
  return f;
}

uint64_t Work::code() const {
  uint64_t h = 1469598103934665603ull;  // FNV-1a over the indices of the buckets in use
  for (size_t i = 0; i < b_.size(); ++i) {
    if (b_[i].ops == 0) continue;
    h = (h ^ static_cast<uint64_t>(i + 1)) * 1099511628211ull;
  }
  return h;
}

int Work::codes() const {
  int n = 0;
  for (const Bucket& b : b_) n += b.ops > 0 ? 1 : 0;
  return n;
}

double Work::total_ops() const {
  double n = 0;
  for (const Bucket& b : b_) n += b.ops;
  return n;
}

}  // namespace rv
