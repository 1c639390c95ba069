// The calibration's pure steps (calibrate/calibrate.h): the cache a device has to itself, from a
// sweep of working sets read in random order.
#include <utility>
#include <vector>

#include "calibrate/calibrate.h"
#include "catch.h"

using namespace rv;

TEST_CASE("the cache is the last working set before the reads come from memory", "[compute]") {
  constexpr double kMiB = 1048576.0;
  // As measured on this project's VM: 5-7 ns a line up to 1 MiB, 25-70 ns up to 20 MiB, 150-300 ns
  // from 24 MiB on; the largest set's time is memory's.
  const std::vector<std::pair<double, Seconds>> vm{
      {1 * kMiB, 6e-9},   {2 * kMiB, 25e-9},   {8 * kMiB, 51e-9},   {16 * kMiB, 68e-9},
      {20 * kMiB, 70e-9}, {24 * kMiB, 148e-9}, {32 * kMiB, 187e-9}, {128 * kMiB, 275e-9}};
  CHECK(cache_knee(vm) == 20 * kMiB);
  // The first crossing counts: a larger set that happens to read fast after it does not.
  std::vector<std::pair<double, Seconds>> noisy = vm;
  noisy[6].second = 100e-9;
  CHECK(cache_knee(noisy) == 20 * kMiB);
  // Every set but the largest in cache: all of them count.
  CHECK(cache_knee({{1 * kMiB, 5e-9}, {64 * kMiB, 8e-9}, {128 * kMiB, 300e-9}}) == 64 * kMiB);
  // No knee: the smallest set already reads as slowly as memory, or there is nothing to compare.
  CHECK(cache_knee({{1 * kMiB, 200e-9}, {128 * kMiB, 300e-9}}) == 0);
  CHECK(cache_knee({{1 * kMiB, 5e-9}}) == 0);
  CHECK(cache_knee({}) == 0);
}
