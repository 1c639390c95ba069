// Units live in names and types: Seconds, Bytes, Flops; conversions from the scenario's units.
#pragma once

#include <cstdint>

namespace rv {

using Seconds = double;  // simulated or wall-clock seconds
using Bytes = int64_t;   // sizes on the wire and in memory
using Flops = double;    // floating-point operations (not per second)

constexpr Bytes kFloatBytes = 4;  // one float32 value

constexpr double kMbpsToBytesPerSecond = 1e6 / 8.0;   // 1 Mbit/s in bytes per second
constexpr double kGbToBytes = 1024.0 * 1024.0 * 1024.0;  // ram_gb: GiB
constexpr double kMsToSeconds = 1e-3;
constexpr double kTflopsToFlopsPerSecond = 1e12;

}  // namespace rv
