// Seeds derived from seeds: the data (core/data/) and the model (core/model/) draw independent,
// reproducible streams per (seed, index) from one scenario seed.
#pragma once

#include <cstdint>

namespace rv {

// splitmix64 of a combination: independent, reproducible seeds per (seed, index).
constexpr uint64_t mix_seed(uint64_t a, uint64_t b) {
  uint64_t z = a * 0x9E3779B97F4A7C15ULL + b + 0x632BE59BD9B4E019ULL;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

}  // namespace rv
