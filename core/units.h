// Units live in names and types: Seconds, Bytes, Flops; conversions from the scenario's units.
#pragma once

#include <cstdint>
#include <limits>

namespace rv {

using Seconds = double;  // simulated or wall-clock seconds
using Bytes = int64_t;   // sizes on the wire and in memory
using Flops = double;    // floating-point operations (not per second)

constexpr Bytes kFloatBytes = 4;  // one float32 value

// Sizes that multiply (a batch's bytes, times the micro-batches in flight) saturate at kBytesMax
// instead of wrapping around: a size beyond 64 bits is more than every memory and link has.
// Arguments are sizes: never negative.
constexpr Bytes kBytesMax = std::numeric_limits<Bytes>::max();
inline Bytes sat_mul(Bytes a, Bytes b) {
  Bytes r;
  return __builtin_mul_overflow(a, b, &r) ? kBytesMax : r;
}
inline Bytes sat_add(Bytes a, Bytes b) {
  Bytes r;
  return __builtin_add_overflow(a, b, &r) ? kBytesMax : r;
}

constexpr double kMbpsToBytesPerSecond = 1e6 / 8.0;      // 1 Mbit/s in bytes per second
constexpr double kGbToBytes = 1024.0 * 1024.0 * 1024.0;  // ram_gb: GiB
constexpr double kMsToSeconds = 1e-3;
constexpr double kTflopsToFlopsPerSecond = 1e12;

}  // namespace rv
