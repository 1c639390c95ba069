#include "exec/calibrate.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <thread>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include "core/compute_threads.h"
#include "core/error.h"

namespace rv {
namespace {

// The median time of one call of `op`, in seconds: a warm-up, then repeats until `budget`
// seconds have passed (at least 5, at most 200 repeats).
Seconds median_time(const std::function<void()>& op, Seconds budget) {
  op();
  std::vector<Seconds> t;
  Seconds spent = 0;
  while (t.size() < 5 || (spent < budget && t.size() < 200)) {
    const auto a = std::chrono::steady_clock::now();
    op();
    const Seconds d = std::chrono::duration<double>(std::chrono::steady_clock::now() - a).count();
    t.push_back(d);
    spent += d;
  }
  std::nth_element(t.begin(), t.begin() + static_cast<std::ptrdiff_t>(t.size() / 2), t.end());
  return t[t.size() / 2];
}

double median(std::vector<double> v) {
  RV_CHECK(!v.empty(), "calibrate: median of nothing");
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

std::string dims(std::initializer_list<int64_t> d) {
  std::string s;
  for (int64_t x : d) s += (s.empty() ? "" : "x") + std::to_string(x);
  return s;
}

}  // namespace

Calibration calibrate(const CalibrateOptions& options) {
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const int threads = options.threads > 0 ? options.threads : cores;
  set_compute_threads(threads);
  at::NoGradGuard no_grad;
  const Seconds budget = options.quick ? 0.01 : 0.1;
  Calibration cal;
  auto sample = [&](OpKind kind, const std::string& shape, Flops flops, const std::function<void()>& op) {
    cal.samples.push_back({kind, shape, flops, median_time(op, budget)});
  };

  // Dispatch cost: operations on a handful of elements.
  std::vector<Seconds> tiny;
  {
    at::Tensor a = at::rand({1, 1}), b = at::rand({1, 1}), e = at::rand({8});
    tiny.push_back(median_time([&] { at::mm(a, b); }, budget));
    tiny.push_back(median_time([&] { at::relu(e); }, budget));
    tiny.push_back(median_time([&] { at::add(e, e); }, budget));
  }
  const Seconds overhead = median(tiny);

  // Matmuls: a linear layer's forward (batch x in) * (in x out).
  const std::vector<int64_t> batches = options.quick ? std::vector<int64_t>{16, 128}
                                                     : std::vector<int64_t>{16, 64, 256};
  const std::vector<int64_t> widths = options.quick ? std::vector<int64_t>{64, 512}
                                                    : std::vector<int64_t>{64, 256, 1024, 2048};
  for (int64_t b : batches)
    for (int64_t in : widths)
      for (int64_t out : widths) {
        at::Tensor x = at::rand({b, in}), w = at::rand({in, out});
        sample(OpKind::kMatmul, dims({b, in, out}), 2.0 * b * in * out, [&] { at::mm(x, w); });
      }
  // Convolutions: 3x3, padding 1, the image sizes and channel counts of small CNNs.
  struct Conv {
    int64_t cin, cout, side;
  };
  const std::vector<Conv> convs = options.quick
                                      ? std::vector<Conv>{{1, 8, 28}, {16, 32, 8}}
                                      : std::vector<Conv>{{1, 8, 28}, {8, 16, 28}, {16, 32, 14},
                                                          {32, 64, 14}, {16, 32, 8}, {64, 64, 8}};
  const std::vector<int64_t> conv_batches = options.quick ? std::vector<int64_t>{16}
                                                          : std::vector<int64_t>{16, 64};
  for (int64_t b : conv_batches)
    for (const Conv& c : convs) {
      at::Tensor x = at::rand({b, c.cin, c.side, c.side}), w = at::rand({c.cout, c.cin, 3, 3});
      const Flops f = 2.0 * b * c.cin * 9 * c.cout * c.side * c.side;
      sample(OpKind::kConv, dims({b, c.cin, c.side, c.side}) + "->" + std::to_string(c.cout), f,
             [&] { at::conv2d(x, w, {}, 1, 1); });
    }
  // Elementwise: ReLU over activations of every size.
  const std::vector<int64_t> sizes = options.quick ? std::vector<int64_t>{1 << 12, 1 << 20}
                                                   : std::vector<int64_t>{1 << 10, 1 << 14, 1 << 18,
                                                                          1 << 21, 1 << 24};
  for (int64_t n : sizes) {
    at::Tensor x = at::rand({n});
    sample(OpKind::kElementwise, std::to_string(n), static_cast<Flops>(n), [&] { at::relu(x); });
  }

  // Fit. A sample's achieved rate counts its time beyond the fixed cost (at least a tenth of it,
  // so that a noisy tiny sample cannot claim an absurd rate).
  auto rate = [&](const CalibrationSample& s) {
    return s.flops / std::max(s.time - overhead, 0.1 * s.time);
  };
  // The peak: the best large matmul (small ones are mostly overhead, and a noisy one must not
  // define it); the best medium one on a host where no matmul was large.
  double peak = 0;
  for (int c = kSizeClasses - 1; c >= 0 && peak == 0; --c)
    for (const auto& s : cal.samples)
      if (s.kind == OpKind::kMatmul && size_class_of(s.flops) == c) peak = std::max(peak, rate(s));
  RV_CHECK(peak > 0, "calibrate: no matmul was timed");
  ComputeProfile& p = cal.profile;
  p.name = "host";
  p.peak_flops_per_s = peak;
  p.op_overhead = overhead;
  p.threads = threads;
  for (int k = 0; k < kOpKinds; ++k) {
    std::array<std::vector<double>, kSizeClasses> by_class;
    for (const auto& s : cal.samples)
      if (static_cast<int>(s.kind) == k)
        by_class[static_cast<size_t>(size_class_of(s.flops))].push_back(rate(s) / peak);
    std::array<double, kSizeClasses> eff{};
    for (int c = 0; c < kSizeClasses; ++c)
      eff[static_cast<size_t>(c)] = by_class[static_cast<size_t>(c)].empty()
                                        ? 0
                                        : std::min(1.5, median(by_class[static_cast<size_t>(c)]));
    // Classes without a sample take the nearest measured class's value.
    for (int c = 0; c < kSizeClasses; ++c) {
      if (eff[static_cast<size_t>(c)] > 0) continue;
      for (int d = 1; d < kSizeClasses && eff[static_cast<size_t>(c)] == 0; ++d) {
        if (c - d >= 0 && !by_class[static_cast<size_t>(c - d)].empty())
          eff[static_cast<size_t>(c)] = eff[static_cast<size_t>(c - d)];
        else if (c + d < kSizeClasses && !by_class[static_cast<size_t>(c + d)].empty())
          eff[static_cast<size_t>(c)] = eff[static_cast<size_t>(c + d)];
      }
    }
    for (int c = 0; c < kSizeClasses; ++c) {
      RV_CHECK(eff[static_cast<size_t>(c)] > 0, "calibrate: a kind with no sample");
      p.efficiency[static_cast<size_t>(k)][static_cast<size_t>(c)] = eff[static_cast<size_t>(c)];
    }
  }
  return cal;
}

}  // namespace rv
