// What a layer's time owes to other things than its flops and bytes, which are all the compute
// model (core/compute) sees of it:
//   values  max-pooling (2x2, stride 2, with the indices a training forward keeps) of one shape,
//           timed on four inputs of that shape:
//             smooth   a random field smooth over 4 pixels (bilinear from a quarter of the side),
//             ReLU'd network  that field through a 3x3 convolution of random weights, batch
//             normalisation
//                      and a ReLU (what `ravnest calibrate` pools: network_activations,
//                      calibrate/calibrate.h)
//             noise    independent normal values, ReLU'd
//             zeros    all zero
//   planes  batch normalisation's backward (to the input, the scale and the shift) on maps of
//           32 x 32 channels of side 12 to 30, in time per element: planes whose length is not a
//           multiple of the vector width end in a scalar loop each.
// Median of --reps calls each, one intra-op thread, a fresh copy of the input before each call (as
// a stage's input is fresh).
//
//   bench_layer_cost [--part all|values|planes] [--reps 40] [--out FILE]
#include <ATen/ATen.h>
#include <torch/csrc/autograd/autograd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

#include "bench/bench_common.h"
#include "calibrate/calibrate.h"
#include "core/memory/allocator.h"
#include "exec/compute_threads.h"

using nlohmann::json;
namespace bench = rv::bench;

namespace {

double pool_ms(const at::Tensor& source, int reps) {
  std::vector<double> t;
  for (int r = 0; r < reps; ++r) {
    const at::Tensor x = source.clone();
    const double a = bench::wall_now();
    const auto out = at::max_pool2d_with_indices(x, {2, 2}, {2, 2});
    t.push_back(bench::wall_now() - a);
  }
  return bench::median(t) * 1e3;
}

json part_values(int reps) {
  json rows = json::array();
  const std::vector<std::vector<int64_t>> shapes{
      {32, 16, 28, 28}, {128, 16, 28, 28}, {32, 32, 14, 14}, {128, 32, 14, 14}, {128, 64, 6, 6}};
  for (const auto& shape : shapes) {
    const int64_t n = shape[0], c = shape[1], h = shape[2], w = shape[3];
    const at::Tensor smooth = rv::image_like_field(shape);
    const at::Tensor network = rv::network_activations(smooth);
    const double ms_smooth = pool_ms(at::relu(smooth).contiguous(), reps);
    const double ms_network = pool_ms(network, reps);
    const double ms_noise = pool_ms(at::relu(at::randn(shape)), reps);
    const double ms_zeros = pool_ms(at::zeros(shape), reps);
    rows.push_back({{"layer", "maxpool2"},
                    {"input", shape},
                    {"smooth_ms", ms_smooth},
                    {"network_ms", ms_network},
                    {"noise_ms", ms_noise},
                    {"zeros_ms", ms_zeros},
                    {"noise_over_smooth", ms_noise / ms_smooth},
                    {"network_over_smooth", ms_network / ms_smooth}});
    std::fprintf(
        stderr,
        "maxpool2 %ldx%ldx%ldx%ld: smooth %.3f ms, network %.3f ms, noise %.3f ms, zeros %.3f ms\n",
        static_cast<long>(n), static_cast<long>(c), static_cast<long>(h), static_cast<long>(w),
        ms_smooth, ms_network, ms_noise, ms_zeros);
  }
  return rows;
}

json part_planes(int reps) {
  json rows = json::array();
  for (int64_t side : {12, 13, 14, 15, 16, 20, 28, 30}) {
    const std::vector<int64_t> shape{32, 32, side, side};
    const at::Tensor source = at::randn(shape);
    const at::Tensor scale = at::ones({32}).requires_grad_(true),
                     shift = at::zeros({32}).requires_grad_(true);
    const at::Tensor running_mean = at::zeros({32}), running_var = at::ones({32});
    std::vector<double> t;
    for (int r = 0; r < reps; ++r) {
      const at::Tensor x = source.clone().requires_grad_(true);
      const at::Tensor y =
          at::batch_norm(x, scale, shift, running_mean, running_var, true, 0.1, 1e-5, false);
      const at::Tensor g = at::randn_like(y);
      const double a = bench::wall_now();
      const auto grads = torch::autograd::grad({y}, {scale, shift, x}, {g});
      t.push_back(bench::wall_now() - a);
    }
    const double s = bench::median(t), elems = static_cast<double>(32 * 32 * side * side);
    rows.push_back({{"layer", "batchnorm backward"},
                    {"input", shape},
                    {"ms", s * 1e3},
                    {"ns_per_element", s * 1e9 / elems}});
    std::fprintf(stderr, "batchnorm backward 32x32x%ldx%ld: %.3f ms, %.3f ns per element\n",
                 static_cast<long>(side), static_cast<long>(side), s * 1e3, s * 1e9 / elems);
  }
  return rows;
}

}  // namespace

int main(int argc, char** argv) {
  rv::configure_allocator();  // as ravnest does
  std::string part = "all", out;
  int reps = 40;
  CLI::App app{"what a layer's time owes to its input's values and its planes' length"};
  app.add_option("--part", part)->check(CLI::IsMember({"all", "values", "planes"}));
  app.add_option("--reps", reps, "timed calls per input (the median is reported)")
      ->check(CLI::PositiveNumber);
  app.add_option("--out", out);
  CLI11_PARSE(app, argc, argv);
  rv::set_compute_threads(1);
  at::manual_seed(1);
  json j = {{"benchmark", "layer_cost"}, {"intra_op_threads", 1}};
  if (part == "all" || part == "values") j["values"] = part_values(reps);
  if (part == "all" || part == "planes") j["planes"] = part_planes(reps);
  bench::emit(j, out);
}
