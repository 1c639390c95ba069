// What a layer's time owes to its input's values, not its shape: max-pooling (2x2, stride 2, with
// the indices a training forward keeps) of one shape, timed on four inputs of that shape:
//   smooth   a random field smooth over 4 pixels (bilinear from a quarter of the side), ReLU'd
//   network  that field through a 3x3 convolution of random weights, batch normalisation and a
//            ReLU (what `ravnest calibrate` pools: exec/calibrate.cc)
//   noise    independent normal values, ReLU'd
//   zeros    all zero
// A compute model that charges by shape (core/compute) cannot tell them apart; this bench says
// how far apart they are on this host. Median of --reps calls each, one intra-op thread, a fresh
// copy of the input before each call (as a stage's input is fresh).
//
//   bench_value_cost [--reps 40] [--out FILE]
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

#include <ATen/ATen.h>
#include <CLI/CLI.hpp>

#include "bench/bench_common.h"
#include "core/compute/allocator.h"
#include "core/compute_threads.h"

namespace {

double pool_ms(const at::Tensor& source, int reps) {
  std::vector<double> t;
  for (int r = 0; r < reps; ++r) {
    const at::Tensor x = source.clone();
    const double a = rv::bench::wall_now();
    const auto out = at::max_pool2d_with_indices(x, {2, 2}, {2, 2});
    t.push_back(rv::bench::wall_now() - a);
  }
  return rv::bench::median(t) * 1e3;
}

}  // namespace

int main(int argc, char** argv) {
  rv::configure_allocator();  // as ravnest does
  int reps = 40;
  std::string out;
  CLI::App app{"a layer's time on inputs of one shape and different values"};
  app.add_option("--reps", reps, "timed calls per input (the median is reported)")->check(CLI::PositiveNumber);
  app.add_option("--out", out);
  CLI11_PARSE(app, argc, argv);
  rv::set_compute_threads(1);
  at::manual_seed(1);
  nlohmann::json rows = nlohmann::json::array();
  const std::vector<std::vector<int64_t>> shapes{{32, 16, 28, 28}, {128, 16, 28, 28}, {32, 32, 14, 14},
                                                 {128, 32, 14, 14}, {128, 64, 6, 6}};
  for (const auto& shape : shapes) {
    const int64_t n = shape[0], c = shape[1], h = shape[2], w = shape[3];
    const at::Tensor smooth = at::upsample_bilinear2d(
        at::randn({n, c, std::max<int64_t>(1, h / 4), std::max<int64_t>(1, w / 4)}), {h, w}, false);
    const at::Tensor weight = at::randn({c, c, 3, 3}) / std::sqrt(9.0 * static_cast<double>(c));
    const at::Tensor network =
        at::relu(at::batch_norm(at::conv2d(smooth, weight, {}, 1, 1), {}, {}, {}, {}, true, 0.1, 1e-5, false))
            .contiguous();
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
    std::fprintf(stderr, "maxpool2 %ldx%ldx%ldx%ld: smooth %.3f ms, network %.3f ms, noise %.3f ms, zeros %.3f ms\n",
                 static_cast<long>(n), static_cast<long>(c), static_cast<long>(h), static_cast<long>(w), ms_smooth,
                 ms_network, ms_noise, ms_zeros);
  }
  rv::bench::emit({{"benchmark", "value_cost"}, {"intra_op_threads", 1}, {"rows", rows}}, out);
}
