// `ravnest calibrate`: a microbenchmark of LibTorch on this host that yields its compute profile
// (core/compute/profile.h). It times, with autograd off, matmuls, 2-D convolutions and elementwise
// operations over a grid of shapes (batch sizes 16 to 256, layer widths 64 to 2048, images 8x8 to
// 28x28), takes the median time of each, and fits:
//   op_overhead  the median time of operations too small to cost anything but their dispatch
//   peak         the best rate a large matmul achieved (flops / (time - overhead))
//   efficiency   per kind and size class, the median of each sample's rate over the peak
// A size class with no sample takes its nearest neighbour's value. Nothing is fitted to a
// scenario: the profile describes the host, for any model.
#pragma once

#include <string>
#include <vector>

#include "core/compute/profile.h"

namespace rv {

struct CalibrateOptions {
  int threads = 0;     // LibTorch threads to measure with; 0: every core
  bool quick = false;  // fewer shapes and repeats (tests)
};

struct CalibrationSample {
  OpKind kind = OpKind::kMatmul;
  std::string shape;  // "64x784x256"
  Flops flops = 0;    // of one operation
  Seconds time = 0;   // median of one operation
};

struct Calibration {
  ComputeProfile profile;
  std::vector<CalibrationSample> samples;
};

Calibration calibrate(const CalibrateOptions& options);

}  // namespace rv
