// `ravnest calibrate`: a microbenchmark of LibTorch on this host that yields its compute profile
// (core/compute/profile.h). It runs the project's own layers (core/model/layers.h) the way a
// pipeline stage does: the forward with autograd recording, the backward through autograd to the
// weights and the input. Over a grid of generic shapes (batch 8 to 256, widths 16 to 2048,
// 3x3 convolutions of 1 to 64 channels on 6x6 to 30x30 images, normalisation, pooling and ReLU
// on 3 thousand to 3 million values) it takes each case's median time over 5 rounds of the whole
// list (a drifting host slows one round, not all), and fits:
//   peak       the best rate of a plain large matmul (autograd off)
//   overhead   per pass and kind, the time per operation of a layer too small to cost anything
//              but its fixed cost
//   efficiency per pass, kind and operation class (work.h), the median over the class's cases of
//              flops / (time - fixed costs) over the peak
// A class with no case takes its nearest neighbour's value. Nothing is fitted to a scenario: the
// profile describes the host, for any model made of these layers.
//
// With share = K the host is measured as one of K devices working at once (K - 1 load processes
// beside the measuring one): a K-node real run on one host gets what each of its nodes achieves.
#pragma once

#include <ATen/core/Tensor.h>

#include <string>
#include <vector>

#include "core/compute/profile.h"

namespace rv {

// What the calibration pools: pooling's time depends on its input's values, not only its shape
// (bench/bench_layer_cost), and in a network its input comes out of a convolution, a
// normalisation and a ReLU. image_like_field: random values of shape N x C x H x W, smooth over 4
// pixels (bilinear from a quarter of the side). network_activations: `field` through a 3x3
// convolution of random weights (C to C channels), batch normalisation and a ReLU, contiguous.
at::Tensor image_like_field(const std::vector<int64_t>& nchw);
at::Tensor network_activations(const at::Tensor& field);

struct CalibrateOptions {
  int threads = 0;     // LibTorch threads to measure with; 0: every core
  bool quick = false;  // fewer shapes and repeats (tests)
  // The host shared by this many devices at once, as in a real run of that many nodes on it: the
  // other share - 1 run the same layers meanwhile, in processes of their own (calibration_load),
  // so that the profile counts what they take of the cores, caches and memory bandwidth.
  int share = 1;
};

struct CalibrationSample {
  Pass pass = Pass::kForward;
  OpKind kind = OpKind::kMatmul;
  std::string shape;        // "linear 64x784->256"
  double ops = 1;           // operations (work.h conventions)
  Flops flops = 0;          // of all of them
  double bytes = 0;         // moved by one operation
  Seconds time = 0;         // median of the case
  bool fixed_cost = false;  // a tiny case that measures the fixed cost
};

struct Calibration {
  ComputeProfile profile;
  std::vector<CalibrationSample> samples;  // each case timed over and over (a loop)
  // This host only: the fixed-cost cases timed as a network runs them, each between the others
  // (time_chain in calibrate.cc); the profile's fixed costs are these, its efficiencies are
  // against the loops' fixed costs.
  std::vector<CalibrationSample> network_fixed;
  // The same, each with the core's caches emptied first and then a case of another kind run (as a
  // span's first operation of a kind finds the core): the profile's KindCost::first is what
  // these take more per operation.
  std::vector<CalibrationSample> network_cold;
  ComputeProfile loops;  // fitted to the loops alone (a published profile: the same as profile)
};

Calibration calibrate(const CalibrateOptions& options);

// The load of one other device (CalibrateOptions::share): the calibration's layers over and over,
// timing nothing, until process `parent` is gone. `ravnest calibrate --load PID` runs it.
void calibration_load(const CalibrateOptions& options, int parent);

// The cache a device has to itself, in bytes, from a sweep of working sets read in random order
// (one cache line after another, each line's address read from the one before: no prefetcher
// hides a miss): `sweep` is each set's size (bytes, increasing) and its time per line read. The
// last set before the first that reads in half the largest set's time per line or more (the
// largest comes from memory); 0 where the first set already does, or the sweep has fewer than two
// sets.
double cache_knee(const std::vector<std::pair<double, Seconds>>& sweep);

// A case's achieved fraction of the profile's peak, after its fixed costs.
double achieved_efficiency(const CalibrationSample& s, const ComputeProfile& p);

// Fits `p`'s fixed costs and efficiencies to `samples`, at `p.peak_flops_per_s` (the step of
// calibrate() above): per pass and kind the median time per operation of its fixed-cost cases (a
// kind with none: the median of its pass's other kinds'), per class the median achieved
// efficiency, a class with no case its nearest neighbour's. rv::InputError if a pass has no
// fixed-cost case or a kind no case at all.
void fit_profile(const std::vector<CalibrationSample>& samples, ComputeProfile& p);

// A profile from published measurements of a device rather than from this host: kernel timings
// in a samples file (CSV, the header below, then one kernel a line, its case name without a comma;
// '#' lines are comments)
//   pass,kind,case,ops,flops,bytes,seconds,fixed_cost
//   forward,matmul,gemm 1760x128x1760 NN,1,7.93e8,1.4e7,0.000123,0
// with the CalibrationSample conventions (flops of all `ops`, bytes of one, fixed_cost 1 for a
// kernel too small to cost anything but its fixed cost; where a pass has none, its shortest kernel
// per operation is taken as one: the floor no kernel went below), fitted by fit_profile at the
// published peak. A pass and kind the file has no case of (kernel benchmarks time matmuls and
// convolutions, rarely the memory-bound rest) is modeled on the roofline, if the memory bandwidth
// is given: the calibration's own cases of that kind, each taking the file's median fixed cost per
// operation plus its bytes over the bandwidth, an upper bound on what the device achieves.
constexpr const char* kSamplesHeader = "pass,kind,case,ops,flops,bytes,seconds,fixed_cost";
struct PublishedOptions {
  std::string samples_path;
  std::string name = "published";
  double peak_flops_per_s = 0;    // the device's published peak, flop/s
  double memory_bytes_per_s = 0;  // its published memory bandwidth, bytes/s; 0: none
};
Calibration calibrate_published(const PublishedOptions& options);

// The samples file (above); rv::InputError naming the file and line of what is wrong.
std::vector<CalibrationSample> read_samples(const std::string& path);

// The roofline samples of `kind` in `pass` (above): the calibration's cases of that kind, each
// taking `fixed` per operation plus its bytes at `memory_bytes_per_s`.
std::vector<CalibrationSample> roofline_samples(OpKind kind, Pass pass, double memory_bytes_per_s,
                                                Seconds fixed);

}  // namespace rv
