// Profiles from published kernel timings (calibrate/calibrate.h, calibrate_published): a samples
// file fitted by the same code as this host's calibration, kinds it lacks modeled on the roofline,
// its errors naming file and line, and the shipped GPU profiles reproducing the timings they came
// from.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "calibrate/calibrate.h"
#include "catch.h"
#include "core/compute/profile.h"
#include "core/compute/work.h"
#include "core/error.h"

using namespace rv;
namespace fs = std::filesystem;

namespace {

fs::path samples_file(const std::string& name, const std::string& text) {
  const fs::path p =
      fs::temp_directory_path() / ("rv-published-" + std::to_string(getpid()) + "-" + name);
  std::ofstream(p) << text;
  return p;
}

// A device to recover: 10 TFLOPS, 5 us per forward operation, 8 us per backward one, and per kind
// and class an efficiency of its own.
constexpr double kPeak = 1e13;
Seconds fixed_of(Pass p) { return p == Pass::kForward ? 5e-6 : 8e-6; }
double efficiency_of(Pass p, OpKind k, int cls) {
  return 0.05 + 0.07 * (cls % kIntensities) + 0.02 * static_cast<int>(k) +
         (p == Pass::kBackward ? -0.01 : 0.0);
}

// One sample line of that device: `flops` over `bytes`, timed as the device would.
std::string line_of(Pass p, OpKind k, double flops, double bytes) {
  const int cls = op_class_of(flops, bytes);
  const double t = fixed_of(p) + flops / (kPeak * efficiency_of(p, k, cls));
  std::ostringstream os;
  os.precision(17);
  os << pass_name(p) << "," << op_kind_name(k) << ",case," << 1 << "," << flops << "," << bytes
     << "," << t << ",0\n";
  return os.str();
}

}  // namespace

TEST_CASE("published timings fit a profile: the device's fixed costs and efficiencies come back",
          "[compute][published]") {
  std::string text = "# a made-up device\n" + std::string(kSamplesHeader) + "\n";
  // Intensities 2, 6, 12, 24, 48 and 96 flop/B, all beyond 1 MiB, for matmul and conv both ways;
  // and in each pass a kernel of 10 flops, the shortest, which costs its fixed cost alone.
  const double bytes = 4e6;
  for (Pass p : {Pass::kForward, Pass::kBackward}) {
    for (OpKind k : {OpKind::kMatmul, OpKind::kConv})
      for (double intensity : {2.0, 6.0, 12.0, 24.0, 48.0, 96.0})
        text += line_of(p, k, intensity * bytes, bytes);
    text += line_of(p, OpKind::kMatmul, 10, 64);
  }
  const fs::path f = samples_file("fit.csv", text);
  const double bandwidth = 5e11;
  const Calibration cal = calibrate_published({f.string(), "made-up", kPeak, bandwidth});
  const ComputeProfile& prof = cal.profile;
  CHECK(prof.peak_flops_per_s == kPeak);
  for (Pass p : {Pass::kForward, Pass::kBackward}) {
    for (int k = 0; k < kOpKinds;
         ++k)  // the shortest kernel's time: the fixed cost, to its 10 flops
      CHECK(prof.of(p, static_cast<OpKind>(k)).overhead == Approx(fixed_of(p)).epsilon(1e-5));
    for (OpKind k : {OpKind::kMatmul, OpKind::kConv})
      for (int cls = kIntensities; cls < kOpClasses; ++cls)  // the large classes, measured
        CHECK(prof.of(p, k).efficiency[cls] == Approx(efficiency_of(p, k, cls)).epsilon(1e-4));
  }
  // Kinds without timings sit on the roofline: a large ReLU (1 flop per 8 bytes) moves its bytes
  // at the memory bandwidth, after the fixed cost.
  Work relu;
  const double n = 1.5e6;
  relu.add(OpKind::kElementwise, Pass::kForward, n, 8 * n);
  CHECK(time_of(relu, prof) == Approx(fixed_of(Pass::kForward) + 8 * n / bandwidth).epsilon(1e-5));
  // Dropout, without timings of its own, is charged as elementwise work (profile.h).
  for (Pass p : {Pass::kForward, Pass::kBackward}) {
    CHECK(prof.of(p, OpKind::kRandom).overhead == prof.of(p, OpKind::kElementwise).overhead);
    CHECK(prof.of(p, OpKind::kRandom).efficiency == prof.of(p, OpKind::kElementwise).efficiency);
  }
  fs::remove(f);
}

TEST_CASE(
    "published timings: a kind with none needs the memory bandwidth, a bad file names its line",
    "[compute][published]") {
  const std::string header = std::string(kSamplesHeader) + "\n";
  const std::string good =
      "forward,matmul,gemm,1,2e9,1e7,0.001,0\nbackward,matmul,gemm,1,2e9,1e7,0.002,0\n";
  const fs::path f = samples_file("nomem.csv", header + good);
  try {
    calibrate_published({f.string(), "x", kPeak, 0});
    FAIL("expected an InputError");
  } catch (const InputError& e) {
    CHECK_THAT(e.what(), Catch::Contains("no conv case in the forward pass") &&
                             Catch::Contains("--memory-gbps"));
  }
  CHECK_THROWS_WITH(calibrate_published({f.string(), "x", 0, 1e11}),
                    Catch::Contains("--peak-tflops"));
  fs::remove(f);

  struct Bad {
    std::string text, says;
  };
  for (const Bad& b :
       {Bad{"pass,kind\n", ":1: expected the header"},
        Bad{header + "sideways,matmul,g,1,1,1,1,0\n", ":2: pass must be forward or backward"},
        Bad{header + "forward,attention,g,1,1,1,1,0\n", ":2: unknown kind 'attention'"},
        Bad{header + "# ok\nforward,matmul,g,1,1,1\n", ":3: 8 fields expected"},
        Bad{header + "forward,matmul,g,1,2e9,ten,0.001,0\n", ":2: bytes must be a number"},
        Bad{header + "forward,matmul,g,1,2e9,-5,0.001,0\n", ":2: bytes must be a number >= 0"},
        Bad{header + "forward,matmul,g,1,2e9,1e7,0,0\n", ":2: ops, bytes and seconds must be > 0"},
        Bad{header + "forward,matmul,g,1,2e9,1e7,0.1,yes\n", ":2: fixed_cost must be 0 or 1"},
        Bad{"", "empty samples file"}}) {
    const fs::path bad = samples_file("bad.csv", b.text);
    INFO(b.text);
    CHECK_THROWS_WITH(read_samples(bad.string()),
                      Catch::Contains(bad.string()) && Catch::Contains(b.says));
    fs::remove(bad);
  }
  CHECK_THROWS_AS(read_samples("/nonexistent/samples.csv"), InputError);
}

TEST_CASE("the shipped GPU profiles give back the published timings they were fitted to",
          "[compute][published]") {
  for (const std::string name : {"gtx-1080-ti", "titan-xp"}) {
    INFO(name);
    const ComputeProfile prof =
        read_profile(std::string(RV_SOURCE_DIR) + "/profiles/" + name + ".toml");
    const std::vector<CalibrationSample> samples =
        read_samples(std::string(RV_SOURCE_DIR) + "/profiles/published/" + name + ".csv");
    REQUIRE(samples.size() > 100);
    // Each kernel as the model times it, against its published time, by kind. A class's efficiency
    // is its kernels' median, so the median error measures how much a class's kernels differ:
    // little for GEMMs (4-6%), much for convolutions (about 37%: cuDNN picks Winograd, implicit
    // GEMM or FFT by shape, which an intensity class does not see). A broken fit is far off both.
    std::vector<double> matmul, conv;
    for (const CalibrationSample& s : samples) {
      Work w;
      w.add(s.kind, s.pass, s.flops / s.ops, s.bytes, s.ops);
      (s.kind == OpKind::kMatmul ? matmul : conv)
          .push_back(std::abs(std::log(time_of(w, prof) / s.time)));
    }
    auto median = [](std::vector<double> v) {
      std::sort(v.begin(), v.end());
      return v[v.size() / 2];
    };
    REQUIRE(matmul.size() > 100);
    REQUIRE(conv.size() > 100);
    CHECK(median(matmul) < std::log(1.10));
    CHECK(median(conv) < std::log(1.50));
  }
}
