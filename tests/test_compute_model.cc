// The calibrated compute model (core/compute/): work counted as operations by pass, kind and
// intensity class,
// a device's time for it (one function, time_of), profile files, and the simulator and the planner
// charging exactly that time.
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>

#include "catch.h"
#include "core/compute/profile.h"
#include "core/compute/work.h"
#include "core/error.h"
#include "core/model/cost_model.h"
#include "core/output/metrics.h"
#include "planner/cost.h"
#include "sim/sim_runner.h"
#include "test_support.h"

using namespace rv;
namespace fs = std::filesystem;

namespace {

ComputeProfile example_profile() {
  ComputeProfile p;
  p.name = "example";
  p.peak_flops_per_s = 2e11;
  p.threads = 2;
  for (int q = 0; q < kPasses; ++q)
    for (int k = 0; k < kOpKinds; ++k) {
      KindCost& c = p.of(static_cast<Pass>(q), static_cast<OpKind>(k));
      c.overhead = (20 + 10 * q + k) * 1e-6;
      for (int e = 0; e < kOpClasses; ++e) c.efficiency[e] = 0.01 * (k + 1) * (e + 1) + 0.001 * q;
    }
  return p;
}

// A model's scenario after its [model] table: synthetic 8 x 8 data, batch 16, one device, timing.
constexpr const char* kSyntheticTiming = R"([data]
kind = "synthetic"
side = 8
classes = 10
batch_size = 16
[sim]
mode = "timing"
[[devices]]
count = 1
)";

// The operations of `k` in pass `q` that `w` holds, over every class.
double ops(const Work& w, OpKind k, Pass q) {
  double o = 0;
  for (int c = 0; c < kOpClasses; ++c) o += w.ops(k, q, c);
  return o;
}

fs::path temp_file(const std::string& name, const std::string& text) {
  const fs::path p =
      fs::temp_directory_path() / ("rv-compute-" + std::to_string(getpid()) + "-" + name);
  std::ofstream(p) << text;
  return p;
}

}  // namespace

TEST_CASE("work counts operations by pass, kind and intensity class", "[compute]") {
  Work w;
  w.add(OpKind::kMatmul, Pass::kForward, 1000, 1000);     // 1 flop/B: the first class
  w.add(OpKind::kMatmul, Pass::kForward, 8000, 1000, 3);  // 8 flop/B: the third (from its bound)
  w.add(OpKind::kMatmul, Pass::kBackward, 32000, 1000);   // 32 flop/B: the fifth
  w.add_elementwise(500, 2, 2);  // 2 ops of 500 elements, 12 B each: 1.5 flops an element (8 B)
  CHECK(w.ops(OpKind::kMatmul, Pass::kForward, 0) == 1);
  CHECK(w.flops(OpKind::kMatmul, Pass::kForward, 2) == 24000);
  CHECK(w.ops(OpKind::kMatmul, Pass::kBackward, 4) == 1);
  CHECK(w.ops(OpKind::kMatmul, Pass::kForward, 4) == 0);
  CHECK(w.ops(OpKind::kElementwise, Pass::kForward, 0) == 2);
  CHECK(w.flops(OpKind::kElementwise, Pass::kForward, 0) == 1500);
  CHECK(w.total_ops() == 7);
  CHECK(w.total_flops() == 1000 + 24000 + 32000 + 1500);
  const Work twice = w.scaled(2);
  CHECK(twice.total_ops() == 14);
  CHECK(twice.flops(OpKind::kMatmul, Pass::kForward, 0) == 2000);
  // No bytes: nothing bounds it but the flops.
  CHECK(op_class_of(10, 0) == kIntensities - 1);
  CHECK(op_class_of(1e8, 2e6) == kIntensities + 4);         // 50 flop/B beyond the cache
  CHECK(op_class_of(1e9, 2e7) == 2 * kIntensities + 4);     // 50 flop/B streamed from memory
  CHECK(op_class_of(5e6, kStreamedBytes) == kIntensities);  // 8 MiB itself: the middle footprint
  CHECK(op_class_name(kIntensities + 1) == "<8 flop/B, beyond 1 MiB");
  CHECK(op_class_name(2 * kIntensities + 1) == "<8 flop/B, beyond 8 MiB");
  CHECK(op_class_name(kIntensities - 1) == ">=64 flop/B");
  CHECK_THROWS_AS(w.add(OpKind::kConv, Pass::kForward, -1, 1), Error);
  CHECK_THROWS_AS(w.add(OpKind::kConv, Pass::kForward, 1, -1), Error);
}

TEST_CASE("a device's time: a fixed cost per operation plus flops at its efficiency", "[compute]") {
  const ComputeProfile p = example_profile();
  Work w;
  w.add(OpKind::kMatmul, Pass::kForward, 1e9, 1e7, 2);  // 100 flop/B, 10 MB: the last class, 0.18
  w.add(OpKind::kConv, Pass::kBackward, 1e5, 1e5, 4);   // 1 flop/B, cached: the first, 0.021
  w.add(OpKind::kPool, Pass::kForward, 2e6, 2e5);       // 10 flop/B, cached: the third, 0.12
  const double expected = 2 * 20e-6 + 2e9 / (2e11 * 0.18) + 4 * 31e-6 + 4e5 / (2e11 * 0.021) +
                          23e-6 + 2e6 / (2e11 * 0.12);
  CHECK(time_of(w, p) == Approx(expected).epsilon(1e-12));
  // The default profile is the peak model: flops over the peak, nothing per operation.
  ComputeProfile peak;
  peak.peak_flops_per_s = 5e12;
  CHECK(time_of(w, peak) == Approx(w.total_flops() / 5e12).epsilon(1e-12));
  CHECK(time_of(Work(), p) == 0);
}

TEST_CASE("a span's first operation of a kind in a class pays the kind's first cost, once per span",
          "[compute]") {
  ComputeProfile p = example_profile();
  p.of(Pass::kForward, OpKind::kMatmul).first = 7e-6;
  p.of(Pass::kBackward, OpKind::kConv).first = 11e-6;
  p.of(Pass::kForward, OpKind::kConv).first = 1.0;  // no forward conv below: never charged
  Work w;
  w.add(OpKind::kMatmul, Pass::kForward, 1e9, 1e7, 2);  // two classes of one kind: two first costs
  w.add(OpKind::kMatmul, Pass::kForward, 1e3, 1e3, 5);
  REQUIRE(op_class_of(1e9, 1e7) != op_class_of(1e3, 1e3));
  w.add(OpKind::kConv, Pass::kBackward, 1e5, 1e5, 4);
  w.add(OpKind::kConv, Pass::kBackward, 2e5, 2e5, 3);  // the same class again: no second
  REQUIRE(op_class_of(1e5, 1e5) == op_class_of(2e5, 2e5));
  ComputeProfile warm = p;
  for (auto& pass : warm.cost)
    for (KindCost& c : pass) c.first = 0;
  CHECK(time_of(w, p) == Approx(time_of(w, warm) + 2 * 7e-6 + 11e-6).epsilon(1e-12));
  // Twice the work in one span: twice the operations, the same first costs.
  CHECK(time_of(w.scaled(2), p) == Approx(time_of(w.scaled(2), warm) + 25e-6).epsilon(1e-12));
  CHECK(time_of(Work(), p) == 0);
}

TEST_CASE(
    "cold memory: a span whose stage outgrows the cache reads its cold bytes at the bandwidth",
    "[compute]") {
  ComputeProfile p = example_profile();
  Work w;
  w.add(OpKind::kMatmul, Pass::kForward, 1e9, 1e7, 2);
  const Seconds warm = time_of(w, p);
  w.add_cold(4e6, 9e6);  // 4 MB to read once; the stage touches 9 MB between spans
  CHECK(w.cold_bytes() == 4e6);
  CHECK(w.resident_bytes() == 9e6);
  CHECK(time_of(w, p) == warm);  // no bandwidth or cache in the profile: the term is off
  p.memory_bytes_per_s = 2e9;
  p.cache_bytes = 8e6;
  CHECK(time_of(w, p) == Approx(warm + 4e6 / 2e9).epsilon(1e-12));
  p.cache_bytes = 9e6;  // fits: nothing read cold
  CHECK(time_of(w, p) == warm);
  // Adding works sums the cold bytes and keeps the larger stage; scaling scales the reads.
  Work v;
  v.add_cold(1e6, 20e6);
  v.add(w);
  CHECK(v.cold_bytes() == 5e6);
  CHECK(v.resident_bytes() == 20e6);
  CHECK(v.scaled(3).cold_bytes() == 15e6);
  CHECK(v.scaled(3).resident_bytes() == 20e6);
  CHECK_THROWS_AS(v.add_cold(-1, 0), Error);
  // The profile file carries both or neither.
  const ComputeProfile q = parse_profile(profile_to_toml(p), "p.toml");
  CHECK(q.memory_bytes_per_s == Approx(2e9).epsilon(1e-6));
  CHECK(q.cache_bytes == Approx(9e6).epsilon(1e-6));
  CHECK(profile_to_toml(example_profile()).find("memory_gbps") == std::string::npos);
  // After an idle wait the span reads, of its cold and idle-cold bytes, the fraction of its stage
  // the cooling curve says is gone from the caches, whether or not its stage fits the cache; back
  // to back, only what the cache misses.
  w.add_idle_cold(6e6);
  CHECK(w.idle_cold_bytes() == 6e6);
  CHECK(time_of(w, p, 1.0) == warm);  // no cooling curve in the profile: never
  p.idle_cold = {{1e-3, 1.0}};        // a step: all cold from 1 ms on
  CHECK(time_of(w, p, 0) == warm);
  CHECK(time_of(w, p, 0.9e-3) == warm);
  CHECK(time_of(w, p, 1e-3) == Approx(warm + 10e6 / 2e9).epsilon(1e-12));
  p.cache_bytes = 8e6;  // the stage misses the cache: 4 MB cold back to back, 10 MB after a wait
  CHECK(time_of(w, p, 0) == Approx(warm + 4e6 / 2e9).epsilon(1e-12));
  CHECK(time_of(w, p, 5e-3) == Approx(warm + 10e6 / 2e9).epsilon(1e-12));
  CHECK(w.scaled(2).idle_cold_bytes() == 12e6);
  CHECK_THROWS_AS(w.add_idle_cold(-1), Error);
  // A graded curve: linear in the logarithm of the wait between its points, 0 before the first,
  // the last's fraction after it.
  p.idle_cold = {{1e-4, 0.1}, {1e-3, 0.4}, {1e-2, 0.8}};
  CHECK(cold_fraction(p, 0) == 0);
  CHECK(cold_fraction(p, 0.99e-4) == 0);
  CHECK(cold_fraction(p, 1e-4) == Approx(0.1).epsilon(1e-12));
  CHECK(cold_fraction(p, std::sqrt(1e-4 * 1e-3)) == Approx(0.25).epsilon(1e-9));
  CHECK(cold_fraction(p, 1e-3) == Approx(0.4).epsilon(1e-12));
  CHECK(cold_fraction(p, std::sqrt(1e-3 * 1e-2)) == Approx(0.6).epsilon(1e-9));
  CHECK(cold_fraction(p, 1.0) == Approx(0.8).epsilon(1e-12));
  // 4 MB missed back to back, and 0.4 of the other 6 MB after 1 ms.
  CHECK(time_of(w, p, 1e-3) == Approx(warm + (4e6 + 0.4 * 6e6) / 2e9).epsilon(1e-12));
  p.cache_bytes = 9e6;  // fits: 0.4 of all 10 MB
  CHECK(time_of(w, p, 1e-3) == Approx(warm + 0.4 * 10e6 / 2e9).epsilon(1e-12));
  const ComputeProfile idle = parse_profile(profile_to_toml(p), "p.toml");
  REQUIRE(idle.idle_cold.size() == 3);
  for (size_t i = 0; i < 3; ++i) {
    CHECK(idle.idle_cold[i].wait == Approx(p.idle_cold[i].wait).epsilon(1e-6));
    CHECK(idle.idle_cold[i].cold == Approx(p.idle_cold[i].cold).epsilon(1e-6));
  }
  // A profile written with the step (idle_cold_ms) still reads, as the curve [[ms, 1]].
  const std::string memory = "peak_tflops = 1\nmemory_gbps = 1\ncache_mib = 1\n";
  const std::string example = profile_to_toml(example_profile());
  const ComputeProfile step = parse_profile(
      memory + "idle_cold_ms = 3\n" + example.substr(example.find("[forward]")), "s.toml");
  REQUIRE(step.idle_cold.size() == 1);
  CHECK(step.idle_cold[0].wait == Approx(3e-3).epsilon(1e-9));
  CHECK(step.idle_cold[0].cold == 1.0);
  CHECK(example.find("idle_cold") == std::string::npos);
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"peak_tflops = 1\nidle_cold_ms = 1\n", "idle_cold_ms"},
      {memory + "idle_cold_ms = -1\n", "idle_cold_ms"},
      {"peak_tflops = 1\nidle_cold = [[1, 0.5]]\n", "idle_cold"},
      {memory + "idle_cold = [[1, 0.5]]\nidle_cold_ms = 1\n", "idle_cold_ms"},
      {memory + "idle_cold = 1\n", "idle_cold"},
      {memory + "idle_cold = [[1, 0.5], [1, 0.6]]\n", "idle_cold[1]"},
      {memory + "idle_cold = [[1, 0.5], [2, 0.4]]\n", "idle_cold[1]"},
      {memory + "idle_cold = [[1, 1.5]]\n", "idle_cold[0]"},
      {memory + "idle_cold = [[0, 0.5]]\n", "idle_cold[0]"},
      {memory + "idle_cold = [[1]]\n", "idle_cold[0]"},
      {memory + "idle_cold = [[1, \"a\"]]\n", "idle_cold[0]"}};
  for (const auto& [text, key] : bad) {
    try {
      parse_profile(text, "i.toml");
      FAIL("accepted " << text);
    } catch (const InputError& e) {
      CHECK(std::string(e.what()).find("i.toml: key '" + key + "'") != std::string::npos);
    }
  }
  for (const std::string& one :
       {std::string("memory_gbps = 3\n"), std::string("cache_mib = 3\n")}) {
    try {
      parse_profile(one + profile_to_toml(example_profile()), "p.toml");
      FAIL("accepted " << one);
    } catch (const InputError& e) {
      CHECK(std::string(e.what()).find(one.find("memory") == 0 ? "cache_mib" : "memory_gbps") !=
            std::string::npos);
    }
  }
}

TEST_CASE("the wake-up curve: after a wait each operation costs more, once per code", "[compute]") {
  ComputeProfile p = example_profile();
  Work fwd, bwd, step;
  fwd.add(OpKind::kMatmul, Pass::kForward, 1e6, 1e5, 3);
  bwd.add(OpKind::kMatmul, Pass::kBackward, 1e6, 1e5, 5);
  step.add_elementwise(1e4, 2, 4);
  CHECK(fwd.code() != bwd.code());
  CHECK(fwd.code() != step.code());
  CHECK(fwd.code() == fwd.scaled(2).code());  // the same operations, more of them: the same code
  const Seconds warm = time_of(fwd, p);
  CHECK(time_of(fwd, p, 1.0, 1.0) == warm);  // no curve: nothing
  // Linear in the logarithm of the wait between points, 0 before the first, the last's after it.
  p.idle_op = {{1e-4, 2e-6}, {1e-3, 4e-6}, {1e-2, 10e-6}};
  CHECK(wake_cost(p, 0) == 0);
  CHECK(wake_cost(p, 0.99e-4) == 0);
  CHECK(wake_cost(p, 1e-4) == Approx(2e-6).epsilon(1e-12));
  CHECK(wake_cost(p, std::sqrt(1e-4 * 1e-3)) == Approx(3e-6).epsilon(1e-9));
  CHECK(wake_cost(p, std::sqrt(1e-3 * 1e-2)) == Approx(7e-6).epsilon(1e-9));
  CHECK(wake_cost(p, 5.0) == Approx(10e-6).epsilon(1e-12));
  CHECK(time_of(fwd, p, 1.0) == warm);  // a wait, but the span's code is warm (wake 0)
  // Per operation code (Work::codes: the buckets in use), not per operation: the forward's three
  // products are one code; an elementwise kernel beside them another.
  CHECK(fwd.total_ops() == 3);
  CHECK(fwd.codes() == 1);
  CHECK(time_of(fwd, p, 0, 1e-3) == Approx(warm + 4e-6).epsilon(1e-12));
  Work two_codes = fwd;
  two_codes.add_elementwise(1e3);
  CHECK(two_codes.codes() == 2);
  CHECK(time_of(two_codes, p, 0, 1e-3) == Approx(time_of(two_codes, p) + 2 * 4e-6).epsilon(1e-12));
  CHECK(step.codes() == 1);  // 4 kernels on one tensor size: one code
  // A device's spans in turn (DeviceHistory): after a wait the curve charges, each code pays once,
  // at that wait, however the spans follow each other; back to back (or after a wait the curve
  // does not charge) a warm code pays nothing. Each span's idle wait (the cold bytes' term) is the
  // one just before it.
  p.memory_bytes_per_s = 1e9;
  p.cache_bytes = 1e12;
  p.idle_cold = {{1e-5, 0.5}, {1e-2, 1.0}};
  fwd.add_idle_cold(2e5);
  bwd.add_idle_cold(3e5);
  DeviceHistory h;
  auto span = [&](const Work& w, Seconds start, Seconds took) {
    const Seconds t = h.begin(w, p, start);
    h.end(start + took);
    return t;
  };
  const Seconds inf = std::numeric_limits<Seconds>::infinity();
  CHECK(span(fwd, 0, 1e-3) ==
        Approx(time_of(fwd, p, inf, inf)).epsilon(1e-12));  // the first: after ever
  CHECK(span(bwd, 1e-3, 1e-3) == Approx(time_of(bwd, p, 0, inf)).epsilon(1e-12));
  CHECK(span(fwd, 2e-3, 1e-3) == time_of(fwd, p));
  CHECK(span(step, 3e-3, 1e-3) == Approx(time_of(step, p, 0, inf)).epsilon(1e-12));
  CHECK(span(fwd, 4e-3 + 5e-5, 1e-3) ==
        Approx(time_of(fwd, p, 5e-5)).epsilon(1e-9));  // 50 us: below the curve, warm
  // 1 ms: a new busy period; the forward pays, the backward right after it too (its code did not
  // run since), the next forward not.
  CHECK(span(fwd, 6.05e-3, 1e-3) == Approx(time_of(fwd, p, 1e-3, 1e-3)).epsilon(1e-9));
  CHECK(span(bwd, 7.05e-3, 1e-3) == Approx(time_of(bwd, p, 0, 1e-3)).epsilon(1e-9));
  CHECK(span(fwd, 8.05e-3, 1e-3) == time_of(fwd, p));
  CHECK(span(bwd, 9.05e-3 + 1e-2, 1e-3) == Approx(time_of(bwd, p, 1e-2, 1e-2)).epsilon(1e-9));
  CHECK(time_of(fwd, p, 5e-5) > time_of(fwd, p));  // the idle waits above were charged
  // Without a wake-up curve the history charges what time_of charges for the wait alone.
  DeviceHistory plain;
  ComputeProfile none = p;
  none.idle_op.clear();
  CHECK(plain.begin(fwd, none, 0) == time_of(fwd, none, inf));
  plain.end(1e-3);
  CHECK(plain.begin(bwd, none, 1.5e-3) == Approx(time_of(bwd, none, 0.5e-3)).epsilon(1e-12));
  CHECK(time_of(bwd, none, 0.5e-3) > time_of(bwd, none));
  // The profile file: written and read back; bad points name their key.
  const ComputeProfile q = parse_profile(profile_to_toml(p), "p.toml");
  REQUIRE(q.idle_op.size() == 3);
  for (size_t i = 0; i < 3; ++i) {
    CHECK(q.idle_op[i].wait == Approx(p.idle_op[i].wait).epsilon(1e-6));
    CHECK(q.idle_op[i].op == Approx(p.idle_op[i].op).epsilon(1e-6));
  }
  CHECK(profile_to_toml(example_profile()).find("idle_op_us") == std::string::npos);
  const std::string head = "peak_tflops = 1\n", rest = profile_to_toml(example_profile());
  const std::string tables = rest.substr(rest.find("[forward]"));
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"idle_op_us = 3\n", "idle_op_us"},
      {"idle_op_us = [[1]]\n", "idle_op_us[0]"},
      {"idle_op_us = [[1, \"a\"]]\n", "idle_op_us[0]"},
      {"idle_op_us = [[0, 1]]\n", "idle_op_us[0]"},
      {"idle_op_us = [[1, -1]]\n", "idle_op_us[0]"},
      {"idle_op_us = [[1, 2], [1, 3]]\n", "idle_op_us[1]"},
      {"idle_op_us = [[1, 2], [2, 1]]\n", "idle_op_us[1]"},
      {"idle_op_us = [[1, 2, -1]]\n", "idle_op_us[0]"},  // a span cost, the third number
      {"idle_op_us = [[1, 2, \"a\"]]\n", "idle_op_us[0]"},
      {"idle_op_us = [[1, 2, 3, 4]]\n", "idle_op_us[0]"},
      {"idle_op_us = [[1, 2, 3], [2, 2, 1]]\n", "idle_op_us[1]"}};
  for (const auto& [text, key] : bad) {
    try {
      parse_profile(head + text + tables, "o.toml");
      FAIL("accepted " << text);
    } catch (const InputError& e) {
      CHECK(std::string(e.what()).find("o.toml: key '" + key + "'") != std::string::npos);
    }
  }
  CHECK(parse_profile(head + "idle_op_us = []\n" + tables, "o.toml").idle_op.empty());
}

TEST_CASE("the wake-up curve's span cost: the span that ends a wait pays it once", "[compute]") {
  ComputeProfile p = example_profile();
  Work fwd, bwd;
  fwd.add(OpKind::kMatmul, Pass::kForward, 1e6, 1e5, 3);
  bwd.add(OpKind::kMatmul, Pass::kBackward, 1e6, 1e5, 5);
  const Seconds warm_f = time_of(fwd, p), warm_b = time_of(bwd, p);
  p.idle_op = {{1e-4, 2e-6, 10e-6}, {1e-2, 4e-6, 30e-6}};
  CHECK(wake_span_cost(p, 0) == 0);
  CHECK(wake_span_cost(p, 0.99e-4) == 0);
  CHECK(wake_span_cost(p, 1e-4) == Approx(10e-6).epsilon(1e-12));
  CHECK(wake_span_cost(p, 1e-3) == Approx(20e-6).epsilon(1e-9));  // half way, in the logarithm
  CHECK(wake_span_cost(p, 5.0) == Approx(30e-6).epsilon(1e-12));
  CHECK(wake_cost(p, 1e-3) == Approx(3e-6).epsilon(1e-9));
  // time_of: the span after an idle wait pays the span cost; the code's first run after a wait,
  // the cost per code; back to back, neither.
  CHECK(time_of(fwd, p) == warm_f);
  CHECK(time_of(fwd, p, 1e-3) == Approx(warm_f + 20e-6).epsilon(1e-12));
  CHECK(time_of(fwd, p, 0, 1e-3) == Approx(warm_f + 3e-6).epsilon(1e-12));
  CHECK(time_of(fwd, p, 1e-3, 1e-3) == Approx(warm_f + 20e-6 + 3e-6).epsilon(1e-12));
  CHECK(time_of(fwd, p, 0.5e-4, 0.5e-4) == warm_f);  // below the curve
  // A device's spans: the forward that ends a 1 ms wait pays both, the backward right after it
  // the cost per code alone, then nothing until the next wait.
  DeviceHistory h;
  auto span = [&](const Work& w, Seconds start, Seconds took) {
    const Seconds t = h.begin(w, p, start);
    h.end(start + took);
    return t;
  };
  span(fwd, 0, 1e-3);
  span(bwd, 1e-3, 1e-3);
  CHECK(span(fwd, 3e-3, 1e-3) == Approx(warm_f + 20e-6 + 3e-6).epsilon(1e-9));
  CHECK(span(bwd, 4e-3, 1e-3) == Approx(warm_b + 3e-6).epsilon(1e-9));
  CHECK(span(fwd, 5e-3, 1e-3) == Approx(warm_f).epsilon(1e-12));
  // A curve that charges spans alone still starts a busy period, and charges no operation.
  p.idle_op = {{1e-4, 0, 10e-6}, {1e-2, 0, 30e-6}};
  DeviceHistory g;
  g.begin(fwd, p, 0);
  g.end(1e-3);
  CHECK(g.begin(fwd, p, 2e-3) == Approx(warm_f + 20e-6).epsilon(1e-9));
  g.end(3e-3);
  CHECK(g.begin(bwd, p, 3e-3) == Approx(warm_b).epsilon(1e-12));
  // The profile file: three numbers a point, read back; two still read (no span cost). (Bad
  // points: the test case before.)
  p.idle_op = {{1e-4, 2e-6, 10e-6}, {1e-2, 4e-6, 30e-6}};
  const ComputeProfile q = parse_profile(profile_to_toml(p), "p.toml");
  REQUIRE(q.idle_op.size() == 2);
  for (size_t i = 0; i < 2; ++i) {
    CHECK(q.idle_op[i].wait == Approx(p.idle_op[i].wait).epsilon(1e-6));
    CHECK(q.idle_op[i].op == Approx(p.idle_op[i].op).epsilon(1e-6));
    CHECK(q.idle_op[i].span == Approx(p.idle_op[i].span).epsilon(1e-6));
  }
  const std::string head = "peak_tflops = 1\n", rest = profile_to_toml(example_profile());
  const std::string tables = rest.substr(rest.find("[forward]"));
  const ComputeProfile two =
      parse_profile(head + "idle_op_us = [[1, 2], [3, 4]]\n" + tables, "o.toml");
  REQUIRE(two.idle_op.size() == 2);
  CHECK(two.idle_op[1].op == Approx(4e-6).epsilon(1e-12));
  CHECK(two.idle_op[1].span == 0);
}

TEST_CASE(
    "a backward reads its saved activations from memory where other micro-batches' pushed them out",
    "[compute]") {
  ComputeProfile p = example_profile();
  p.memory_bytes_per_s = 1e9;
  p.cache_bytes = 10e6;
  Work fwd, bwd;
  fwd.add(OpKind::kConv, Pass::kForward, 1e8, 1e6, 3);
  fwd.add_saved(6e6);
  CHECK(fwd.saved_bytes() == 6e6);
  CHECK(fwd.scaled(2).saved_bytes() == 12e6);
  CHECK_THROWS_AS(Work().add_saved(-1), Error);
  bwd.add(OpKind::kConv, Pass::kBackward, 2e8, 1e6, 5);
  bwd.add_idle_cold(6e6);
  const Seconds warm = time_of(bwd, p);
  CHECK(time_of(bwd, p, 0, 0, 2e6) == Approx(warm + 2e6 / 1e9).epsilon(1e-12));
  using Use = SavedActivations::Use;
  CHECK(SavedActivations::of(Pass::kForward, 3).use == Use::kWrites);
  CHECK(SavedActivations::of(Pass::kBackward, 3).use == Use::kReads);
  CHECK(SavedActivations::of(Pass::kBackward, 3).micro_batch == 3);
  CHECK(SavedActivations::of(Pass::kForward, -2).use == Use::kNone);  // an evaluation batch
  // A recorded span's (the executors charge it so, validate replays it so).
  Event span_event;
  span_event.micro_batch = 4;
  span_event.kind = EventKind::kForward;
  CHECK(saved_activations_of(span_event).use == Use::kWrites);
  span_event.kind = EventKind::kBackward;
  CHECK(saved_activations_of(span_event).use == Use::kReads);
  CHECK(saved_activations_of(span_event).micro_batch == 4);
  span_event.kind = EventKind::kUpdate;
  CHECK(saved_activations_of(span_event).use == Use::kNone);
  DeviceHistory h;
  Seconds at = 0;
  auto span = [&](const Work& w, Use use, int64_t mb) {
    const Seconds t = h.begin(w, p, at, {use, mb});
    at += 1e-3;  // back to back: no curve charges anything here
    h.end(at);
    return t;
  };
  // Back to back, as a pipeline's last stage runs them: warm.
  span(fwd, Use::kWrites, 0);
  CHECK(span(bwd, Use::kReads, 0) == warm);
  // One micro-batch ahead, as a first stage of two: the next forward's 6 MB leave 4 MB of the 10 MB
  // cache to this one's 6 MB, 2 MB of which come from memory.
  span(fwd, Use::kWrites, 1);
  span(fwd, Use::kWrites, 2);
  CHECK(span(bwd, Use::kReads, 1) == Approx(warm + 2e6 / 1e9).epsilon(1e-12));
  // Since micro-batch 2's forward: micro-batch 1's backward and micro-batch 3's forward, 12 MB.
  span(fwd, Use::kWrites, 3);
  CHECK(span(bwd, Use::kReads, 2) == Approx(warm + 6e6 / 1e9).epsilon(1e-12));
  // Each other micro-batch counts once, however often it was touched: micro-batch 6's written and
  // read back before micro-batch 5's backward, 6 MB.
  span(fwd, Use::kWrites, 4);
  span(bwd, Use::kReads, 3);
  span(bwd, Use::kReads, 4);
  span(fwd, Use::kWrites, 5);
  span(fwd, Use::kWrites, 6);
  CHECK(span(bwd, Use::kReads, 6) == warm);
  CHECK(span(bwd, Use::kReads, 5) == Approx(warm + 2e6 / 1e9).epsilon(1e-12));
  // A backward whose forward the history did not see, and spans that touch none: nothing.
  CHECK(span(bwd, Use::kReads, 99) == warm);
  CHECK(span(bwd, Use::kNone, -1) == warm);
  // Forwards whose backwards never come (micro-batches lost with a node) are forgotten after
  // kMaxKept micro-batches: the history stays bounded, and the recent ones are still charged.
  for (int64_t mb = 100; mb < 100 + static_cast<int64_t>(DeviceHistory::kMaxKept) + 10; ++mb)
    span(fwd, Use::kWrites, mb);
  const int64_t last = 100 + static_cast<int64_t>(DeviceHistory::kMaxKept) + 9;
  CHECK(span(bwd, Use::kReads, last) == warm);
  CHECK(span(bwd, Use::kReads, last - 1) ==
        Approx(warm + 2e6 / 1e9).epsilon(1e-12));  // the last's 6 MB since
  CHECK(span(bwd, Use::kReads, 100) == warm);      // forgotten: as one whose forward was not seen
  // Without the memory term nothing is charged; after a wait that cools everything the bytes
  // are charged once, not twice.
  ComputeProfile off = example_profile();
  DeviceHistory g;
  g.begin(fwd, off, 0, {Use::kWrites, 0});
  g.end(1e-3);
  g.begin(fwd, off, 1e-3, {Use::kWrites, 1});
  g.end(2e-3);
  CHECK(g.begin(bwd, off, 2e-3, {Use::kReads, 0}) == time_of(bwd, off));
  p.idle_cold = {{1e-3, 1.0}};
  DeviceHistory c;
  c.begin(fwd, p, 0, {Use::kWrites, 0});
  c.end(1e-3);
  c.begin(fwd, p, 1e-3, {Use::kWrites, 1});
  c.end(2e-3);
  CHECK(c.begin(bwd, p, 5e-3, {Use::kReads, 0}) == Approx(warm + 6e6 / 1e9).epsilon(1e-12));
  CHECK(time_of(bwd, p, 3e-3) == Approx(warm + 6e6 / 1e9).epsilon(1e-12));
}

TEST_CASE("a model's work: its layers' operations, the backward's gradients", "[compute]") {
  auto prep = test::prepare(R"(
name = "w"
[model]
head = "linear"
kind = "cnn"
channels = [4, 8]
hidden = [32]
)" + std::string(kSyntheticTiming),
                            {}, false);
  const ModelDesc& m = prep.model;
  const int n = m.layer_count();
  const Work f = m.forward_work(0, n, 16), b = m.backward_work(0, n, 16);
  CHECK(f.total_flops() == Approx(16 * m.forward_flops(0, n)).epsilon(1e-12));
  int convs = 0, linears = 0, views = 0, norms = 0, pools = 0;
  for (const LayerProfile& p : m.profile) {
    convs += p.op_kind == OpKind::kConv;
    linears += p.op_kind == OpKind::kMatmul;
    norms += p.op_kind == OpKind::kNorm;
    pools += p.op_kind == OpKind::kPool;
    views += p.forward_ops == 0;
  }
  CHECK(convs == 2);
  CHECK(norms == 2);
  CHECK(pools == 2);
  CHECK(views == 1);  // the flatten
  CHECK(ops(f, OpKind::kConv, Pass::kForward) == 2);
  CHECK(ops(f, OpKind::kMatmul, Pass::kForward) == linears);
  CHECK(ops(f, OpKind::kNorm, Pass::kForward) == 2);
  CHECK(f.total_ops() == m.layer_count() - views);
  // Backward: the first convolution computes its weights' gradient only (the model's input needs
  // none); every later convolution and linear layer both gradients; the rest one operation each.
  CHECK(ops(b, OpKind::kConv, Pass::kBackward) == 3);
  CHECK(ops(b, OpKind::kMatmul, Pass::kBackward) == 2 * linears);
  CHECK(ops(b, OpKind::kNorm, Pass::kBackward) == 2);
  CHECK(ops(b, OpKind::kConv, Pass::kForward) == 0);
  const Flops first_conv = 16 * m.profile[0].forward_flops;
  double other_flops = 0;
  for (int l = 0; l < n; ++l)
    if (m.profile[l].op_kind != OpKind::kConv && m.profile[l].op_kind != OpKind::kMatmul)
      other_flops += 16 * m.profile[l].forward_flops;
  CHECK(b.total_flops() == Approx(2 * f.total_flops() - first_conv - other_flops).epsilon(1e-12));
  // A later stage's backward also computes its input's gradient.
  CHECK(ops(m.backward_work(1, n, 16), OpKind::kConv, Pass::kBackward) == 2);
  // The stage adds the first stage's input preparation (the indices, then 5 kernels over the
  // inputs) and the last stage's loss (8 kernels); its update runs Adam's 8 kernels on every
  // parameter tensor, (reads + 1) / 2 flops per element each (Work::add_elementwise): five read
  // one tensor, two read two, one reads three, 10 flops per parameter.
  TrainingSpec tr = prep.scenario.training;
  tr.optimizer = OptimizerKind::kAdam;
  const StageCost c = stage_cost(m, 0, n, tr, 16, 1);
  const StageWork sw = stage_work(m, 0, n, tr, 16);
  size_t tensors = 0;
  for (const LayerProfile& p : m.profile) tensors += p.param_elems.size();
  CHECK(tensors > 0);
  CHECK(sw.update.total_flops() == Approx(c.update).epsilon(1e-12));
  CHECK(sw.update.total_flops() ==
        Approx(10.0 * static_cast<double>(m.params(0, n))).epsilon(1e-12));
  CHECK(sw.update.total_ops() == 8.0 * static_cast<double>(tensors));
  CHECK(sw.forward.total_flops() ==
        Approx(c.forward + 5.0 * 16 * m.input_elems + 16).epsilon(1e-12));
  CHECK(sw.forward.total_ops() == f.total_ops() + 6);
  CHECK(sw.backward.total_ops() == b.total_ops() + 8);
  const StageWork middle = stage_work(m, 1, n - 1, tr, 16);
  CHECK(middle.forward.total_ops() == m.forward_work(1, n - 1, 16).total_ops());
  CHECK(middle.backward.total_ops() == m.backward_work(1, n - 1, 16).total_ops());
  // Cold memory: the forward reads the weights, the backward writes their gradients (and reads
  // them again where its input needs a gradient), the step reads both and its state; the stage
  // touches its weights, gradients, a
  // fresh gradient, Adam's two moments, its buffers and a micro-batch's saved activations.
  const double weights = kFloatBytes * static_cast<double>(m.params(0, n));
  CHECK(sw.forward.cold_bytes() == weights);
  CHECK(sw.backward.cold_bytes() == weights);
  const double later = kFloatBytes * static_cast<double>(m.params(1, n - 1));
  CHECK(middle.backward.cold_bytes() == 2 * later);
  CHECK(sw.forward.resident_bytes() ==
        Approx(5 * weights + kFloatBytes * (static_cast<double>(m.buffers(0, n)) +
                                            16.0 * m.activation_elems(0, n)))
            .epsilon(1e-12));
  CHECK(sw.backward.resident_bytes() == sw.forward.resident_bytes());
  CHECK(sw.update.cold_bytes() == 4 * weights);  // the weights, their gradients, Adam's two moments
  CHECK(sw.update.resident_bytes() == sw.forward.resident_bytes());
  // After an idle wait a backward fetches its saved activations; what a span receives (a later
  // stage's input, the incoming gradient) arrives after the wait, warm.
  CHECK(sw.forward.idle_cold_bytes() == 0);
  CHECK(sw.backward.idle_cold_bytes() ==
        kFloatBytes * 16.0 * static_cast<double>(m.activation_elems(0, n)));
  CHECK(middle.forward.idle_cold_bytes() == 0);
  CHECK(middle.backward.idle_cold_bytes() ==
        kFloatBytes * 16.0 * static_cast<double>(m.activation_elems(1, n - 1)));
  // The forward keeps the saved activations for the backward (DeviceHistory); without weight
  // stashing only its input, the backward recomputing the rest.
  CHECK(middle.forward.saved_bytes() == middle.backward.idle_cold_bytes());
  CHECK(middle.backward.saved_bytes() == 0);
  CHECK(sw.update.saved_bytes() == 0);
  TrainingSpec no_stash = tr;
  no_stash.weight_stashing = false;
  CHECK(stage_work(m, 1, n - 1, no_stash, 16).forward.saved_bytes() ==
        kFloatBytes * 16.0 * static_cast<double>(m.input_elems_of(1)));
  CHECK(sw.update.idle_cold_bytes() == 0);
}

const char* kOneNode = R"(
name = "one"
[model]
head = "linear"
kind = "mlp"
hidden = [256, 64]
[data]
kind = "synthetic"
side = 8
classes = 10
batch_size = 32
[training]
steps = 5
eval_every = 0
[sim]
mode = "timing"
[network]
model = "ideal"
[[devices]]
count = 1
tflops = 0.2
)";

TEST_CASE("a dropout's three kernels are of the random kind, forward and backward", "[compute]") {
  auto prep = test::prepare(R"(
name = "d"
[model]
head = "linear"
kind = "mlp"
hidden = [32, 16]
dropout = 0.25
)" + std::string(kSyntheticTiming),
                            {}, false);
  const ModelDesc& m = prep.model;
  const int n = m.layer_count();
  int dropouts = 0;
  for (const LayerProfile& p : m.profile)
    if (p.name.rfind("dropout", 0) == 0) {
      ++dropouts;
      CHECK(p.op_kind == OpKind::kRandom);
    }
  REQUIRE(dropouts >= 1);
  const Work f = m.forward_work(0, n, 16), b = m.backward_work(0, n, 16);
  CHECK(ops(f, OpKind::kRandom, Pass::kForward) == 3 * dropouts);
  // The first dropout comes before any weights: nothing needs its gradient.
  CHECK(ops(b, OpKind::kRandom, Pass::kBackward) == 3 * (dropouts - 1));
  // Charged at the random kind's rate: a profile whose random kind is 30 times slower than its
  // elementwise one makes the forward slower than the same profile with both alike (control).
  ComputeProfile alike;
  alike.peak_flops_per_s = 1e10;
  for (int q = 0; q < kPasses; ++q)
    for (OpKind k : {OpKind::kElementwise, OpKind::kRandom})
      alike.of(static_cast<Pass>(q), k).efficiency.fill(0.05);
  ComputeProfile slow = alike;
  slow.of(Pass::kForward, OpKind::kRandom).efficiency.fill(0.05 / 30);
  const Work drops = [&] {
    Work w;
    for (int l = 0; l < n; ++l)
      if (m.profile[l].op_kind == OpKind::kRandom) w.add(m.forward_work(l, l + 1, 16));
    return w;
  }();
  CHECK(time_of(f, slow) - time_of(f, alike) == Approx(29 * time_of(drops, alike)).epsilon(1e-9));
}

TEST_CASE("an optimizer step: its kernels on each parameter tensor, each at that tensor's size",
          "[compute]") {
  auto prep = test::prepare(kOneNode, {"model.hidden=[512, 256]"}, false);
  const ModelDesc& m = prep.model;
  int lin = -1;  // linear(512->256): a weight of 131,072 floats and a bias of 256
  for (int l = 0; l < m.layer_count(); ++l)
    if (m.profile[static_cast<size_t>(l)].name.rfind("linear(512->256)", 0) == 0) lin = l;
  REQUIRE(lin >= 0);
  CHECK(m.profile[static_cast<size_t>(lin)].param_elems == std::vector<int64_t>{512 * 256, 256});
  CHECK(m.profile[static_cast<size_t>(lin)].params == 512 * 256 + 256);
  // Kernels per tensor as Optimizer::step runs them: (reads, count), (reads + 1) / 2 flops per
  // element.
  auto expect = [&](const TrainingSpec& tr, std::vector<std::pair<int, int>> kernels) {
    const Work w = m.update_work(lin, lin + 1, tr);
    double ops = 0, flops_per_element = 0;
    for (auto [reads, count] : kernels) {
      ops += 2 * count;
      flops_per_element += count * (reads + 1) / 2.0;
      // Each tensor's kernels fall in the class of that tensor's size: the weight's p - lr g
      // (12 bytes an element, 1.5 MiB) beyond the core's cache, the bias's within it.
      for (double elements : {512.0 * 256, 256.0}) {
        const int c = op_class_of(elements, kFloatBytes * elements * (reads + 1));
        CHECK(w.ops(OpKind::kElementwise, Pass::kForward, c) >= count);
      }
    }
    CHECK(w.total_ops() == ops);
    CHECK(w.total_flops() == Approx(flops_per_element * (512 * 256 + 256)).epsilon(1e-12));
  };
  TrainingSpec sgd = prep.scenario.training;
  sgd.optimizer = OptimizerKind::kSgd;
  sgd.momentum = 0;
  sgd.weight_decay = 0;
  expect(sgd, {{1, 1}, {2, 1}});
  CHECK(op_class_of(512 * 256, 12.0 * 512 * 256) / kIntensities == 1);
  CHECK(op_class_of(256, 12.0 * 256) / kIntensities == 0);
  TrainingSpec momentum = sgd;
  momentum.momentum = 0.9;
  expect(momentum, {{1, 2}, {2, 2}});
  TrainingSpec adam = sgd;
  adam.optimizer = OptimizerKind::kAdam;
  expect(adam, {{1, 5}, {2, 2}, {3, 1}});
  adam.weight_decay = 0.01;
  expect(adam, {{1, 6}, {2, 3}, {3, 1}});
  TrainingSpec adamw = adam;
  adamw.optimizer = OptimizerKind::kAdamW;
  expect(adamw, {{1, 6}, {2, 2}, {3, 1}});
}

TEST_CASE("profile files read back as written, bad ones name the key", "[compute]") {
  const ComputeProfile p = example_profile();
  const ComputeProfile q = parse_profile(profile_to_toml(p, "a comment"), "p.toml");
  CHECK(q.name == p.name);
  CHECK(q.peak_flops_per_s == Approx(p.peak_flops_per_s).epsilon(1e-6));
  for (int r = 0; r < kPasses; ++r)
    for (int k = 0; k < kOpKinds; ++k) {
      const KindCost& a = p.of(static_cast<Pass>(r), static_cast<OpKind>(k));
      const KindCost& b = q.of(static_cast<Pass>(r), static_cast<OpKind>(k));
      CHECK(b.overhead == Approx(a.overhead).epsilon(1e-6));
      CHECK(b.first == 0);
      for (size_t c = 0; c < kOpClasses; ++c)
        CHECK(b.efficiency[c] == Approx(a.efficiency[c]).epsilon(1e-6));
    }
  // The first operations' costs read back per pass and kind.
  {
    ComputeProfile f = p;
    for (int r = 0; r < kPasses; ++r)
      for (int k = 0; k < kOpKinds; ++k)
        f.of(static_cast<Pass>(r), static_cast<OpKind>(k)).first = (10 * r + k + 1) * 1e-6;
    const std::string text = profile_to_toml(f);
    CHECK(text.find("first_op_us = [[1, 2, 3, 4, 5, 6], [11, 12, 13, 14, 15, 16]]") !=
          std::string::npos);
    const ComputeProfile g = parse_profile(text, "f.toml");
    for (int r = 0; r < kPasses; ++r)
      for (int k = 0; k < kOpKinds; ++k)
        CHECK(g.of(static_cast<Pass>(r), static_cast<OpKind>(k)).first ==
              Approx((10 * r + k + 1) * 1e-6));
  }
  // A profile of 12 efficiencies per kind (before the middle footprint) gives its second six to
  // both footprints beyond the cache.
  {
    const std::string old_row =
        " = [2, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.1, 1.2]\n";
    const std::string old_kinds = "matmul" + old_row + "conv" + old_row + "norm" + old_row +
                                  "pool" + old_row + "elementwise" + old_row;
    const ComputeProfile o = parse_profile(
        "peak_tflops = 1\n[forward]\n" + old_kinds + "[backward]\n" + old_kinds, "o.toml");
    const KindCost& m = o.of(Pass::kBackward, OpKind::kPool);
    CHECK(m.overhead == Approx(2e-6));
    for (int c = 0; c < kIntensities; ++c) {
      CHECK(m.efficiency[static_cast<size_t>(c)] == Approx(0.1 * (c + 1)));
      CHECK(m.efficiency[static_cast<size_t>(kIntensities + c)] == Approx(0.1 * (c + 7)));
      CHECK(m.efficiency[static_cast<size_t>(2 * kIntensities + c)] == Approx(0.1 * (c + 7)));
    }
  }
  // A profile from before the random kind (no `random` rows, five kinds in first_op_us) charges
  // dropout as elementwise: the random kind takes elementwise's costs, first ones included.
  {
    const std::string row = " = [2, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.1, 1.2]\n";
    const std::string ew =
        " = [7, 0.01, 0.02, 0.03, 0.04, 0.05, 0.06, 0.07, 0.08, 0.09, 0.1, 0.11, 0.12]\n";
    const std::string five =
        "matmul" + row + "conv" + row + "norm" + row + "pool" + row + "elementwise" + ew;
    const ComputeProfile o = parse_profile(
        "peak_tflops = 1\nfirst_op_us = [[1, 2, 3, 4, 5], [11, 12, 13, 14, 15]]\n"
        "[forward]\n" +
            five + "[backward]\n" + five,
        "o.toml");
    for (int r = 0; r < kPasses; ++r) {
      const KindCost& e = o.of(static_cast<Pass>(r), OpKind::kElementwise);
      const KindCost& d = o.of(static_cast<Pass>(r), OpKind::kRandom);
      CHECK(d.overhead == Approx(7e-6));
      CHECK(d.first == Approx((10 * r + 5) * 1e-6));
      CHECK(d.first == e.first);
      for (size_t c = 0; c < kOpClasses; ++c) CHECK(d.efficiency[c] == e.efficiency[c]);
    }
    // Control: a profile with its own random rows keeps them.
    const ComputeProfile n = parse_profile("peak_tflops = 1\n[forward]\n" + five + "random" + row +
                                               "[backward]\n" + five + "random" + row,
                                           "n.toml");
    CHECK(n.of(Pass::kForward, OpKind::kRandom).overhead == Approx(2e-6));
    CHECK(n.of(Pass::kForward, OpKind::kRandom).efficiency[0] == Approx(0.1));
  }
  const std::string good = profile_to_toml(p);
  struct Bad {
    std::string text, says;
  };
  const std::string row = " = [1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1]\n";
  const std::string kinds =
      "matmul" + row + "conv" + row + "norm" + row + "pool" + row + "elementwise" + row;
  const std::string backward = "peak_tflops = 1\n[backward]\n" + kinds + "[forward]\n";
  for (const Bad& bad :
       {Bad{"peak_tflops = 1\n[forward]\n" + kinds, "key 'backward'"},
        Bad{"speed = 3\n" + good, "key 'speed': unknown key"},
        Bad{good + "attention" + row, "key 'backward.attention': unknown kind"},
        Bad{backward + kinds + "random = 5\n", "key 'forward.random'"},
        Bad{"peak_tflops = -1\n", "key 'peak_tflops'"},
        Bad{backward + "matmul = [1, 1, 1, 1]\n" + kinds.substr(6 + row.size()),
            "key 'forward.matmul'"},
        Bad{backward + "matmul = [1, 1, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1]\n" +
                kinds.substr(6 + row.size()),
            "(0, 16]"},
        Bad{backward + "matmul = [-1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1]\n" +
                kinds.substr(6 + row.size()),
            "fixed cost"},
        Bad{"peak_tflops = [", "p.toml:1"},
        Bad{"first_op_us = [[1, 2, 3, 4, 5]]\n" + good, "key 'first_op_us'"},
        Bad{"first_op_us = [[1, 2, 3, 4, 5], [1, 2, 3, 4]]\n" + good, "key 'first_op_us[1]'"},
        Bad{"first_op_us = [[1, 2, 3, 4, 5], [1, 2, -3, 4, 5]]\n" + good,
            "key 'first_op_us[1][2]'"}}) {
    INFO(bad.text);
    try {
      parse_profile(bad.text, "p.toml");
      FAIL("accepted");
    } catch (const InputError& e) {
      CHECK(std::string(e.what()).find(bad.says) != std::string::npos);
    }
  }
}

TEST_CASE("a device's profile: the simulator and the planner charge time_of, nothing else",
          "[compute][sim]") {
  const fs::path file = temp_file("profile.toml", profile_to_toml(example_profile()));
  auto p = test::prepare(kOneNode, {"devices.0.profile=\"" + file.string() + "\""}, false);
  const ComputeProfile device = p.scenario.devices[0].compute_profile();
  CHECK(device.peak_flops_per_s == 0.2e12);  // the device's peak, the profile's efficiencies
  CHECK(device.of(Pass::kForward, OpKind::kMatmul).overhead == Approx(20e-6).epsilon(1e-9));
  const int n = p.model.layer_count();
  const StageCost c = stage_cost(p.model, 0, n, p.scenario.training, 32, 1);
  const StageWork w = stage_work(p.model, 0, n, p.scenario.training, 32);
  SimResult r = run_simulation(p.spec());
  int checked = 0;
  for (const Event& e : r.events) {
    if (e.kind != EventKind::kForward || e.node != 0 || e.micro_batch < 0) continue;  // not evals
    CHECK(e.end - e.start == Approx(time_of(w.forward, device)).epsilon(1e-9));
    ++checked;
  }
  CHECK(checked == 5);
  // The planner predicts the same compute time per micro-batch.
  CostModel cost(p.scenario, p.model);
  CHECK(cost.compute_time(0, 0, n) == Approx(stage_compute_time(w, device)).epsilon(1e-12));
  CHECK(stage_compute_time(w, device) >
        (c.forward + c.backward + c.update) / device.peak_flops_per_s);
  fs::remove(file);
}

TEST_CASE(
    "a stage before the last: the planner and the simulator charge the activations the next "
    "forward evicts",
    "[compute][sim]") {
  ComputeProfile small = example_profile();
  small.memory_bytes_per_s = 1e9;
  small.cache_bytes = 0.01 * 1048576;  // 10 KiB: smaller than a micro-batch's saved activations
  const fs::path file = temp_file("profile.toml", profile_to_toml(small));
  auto p = test::prepare(kOneNode,
                         {"devices.0.profile=\"" + file.string() + "\"", "devices.0.count=2",
                          "planner.method=\"manual\"", "planner.clusters=1"},
                         false);
  REQUIRE(p.plan.nodes == 2);
  const NodeRole first = p.plan.role_of(0);
  REQUIRE(first.layer_end < p.model.layer_count());
  const ComputeProfile device = p.scenario.devices[0].compute_profile();
  const StageWork w =
      stage_work(p.model, first.layer_begin, first.layer_end, p.scenario.training, 32);
  const double saved = w.forward.saved_bytes();
  REQUIRE(saved > device.cache_bytes);
  CHECK(evicted_bytes(saved, saved, device) == saved);  // the next forward's fill the cache
  CHECK(evicted_bytes(saved, 0, device) == Approx(saved - device.cache_bytes).epsilon(1e-12));
  CHECK(evicted_bytes(saved, saved, example_profile()) == 0);  // no memory term
  const Seconds backward = time_of(w.backward, device, 0, 0, saved);
  CHECK(backward == Approx(time_of(w.backward, device) + saved / 1e9).epsilon(1e-12));
  // The planner: the first stage runs the next micro-batch's forward before each backward.
  CostModel cost(p.scenario, p.model);
  CHECK(cost.pass_time(0, first.layer_begin, first.layer_end) ==
        Approx(time_of(w.forward, device) + backward).epsilon(1e-12));
  CHECK(cost.pass_time(0, first.layer_begin, first.layer_end) ==
        Approx(stage_pass_time(w, device, 1)).epsilon(1e-12));
  CHECK(stage_pass_time(w, device, 1) > stage_pass_time(w, device, 0));
  // The simulator: each backward after the first stage's second forward finds its own activations
  // gone (the first's forward 1 ran between forward 0 and backward 0).
  int checked = 0;
  for (const Event& e : run_simulation(p.spec()).events) {
    if (e.kind != EventKind::kBackward || e.node != 0) continue;
    CHECK(e.end - e.start == Approx(backward).epsilon(1e-9));
    ++checked;
  }
  CHECK(checked >= 4);
  fs::remove(file);
}

TEST_CASE("the simulator charges a span after an idle wait its cold bytes (idle_cold)",
          "[compute][sim]") {
  // The node's first span follows an unbounded wait and reads cold; the others follow its own
  // spans back to back (one node: nothing to wait for) and do not.
  ComputeProfile idle = example_profile();
  idle.memory_bytes_per_s = 1e9;
  idle.cache_bytes = 1e12;
  idle.idle_cold = {{1e-6, 1.0}};
  const fs::path idle_file = temp_file("idle.toml", profile_to_toml(idle));
  auto q = test::prepare(kOneNode, {"devices.0.profile=\"" + idle_file.string() + "\""}, false);
  const ComputeProfile idle_device = q.scenario.devices[0].compute_profile();
  const StageWork w = stage_work(q.model, 0, q.model.layer_count(), q.scenario.training, 32);
  std::vector<Seconds> forwards;
  for (const Event& e : run_simulation(q.spec()).events)
    if (e.kind == EventKind::kForward && e.node == 0 && e.micro_batch >= 0)
      forwards.push_back(e.end - e.start);
  REQUIRE(forwards.size() == 5);
  const Seconds warm = time_of(w.forward, idle_device), cold = time_of(w.forward, idle_device, 1.0);
  CHECK(cold == Approx(warm + w.forward.cold_bytes() / 1e9).epsilon(1e-12));
  CHECK(forwards[0] == Approx(cold).epsilon(1e-9));
  for (size_t i = 1; i < forwards.size(); ++i) CHECK(forwards[i] == Approx(warm).epsilon(1e-9));
  fs::remove(idle_file);
}

TEST_CASE("the simulator charges each span's code once after a wait (idle_op)", "[compute][sim]") {
  // One node: its first spans follow an unbounded wait, each of its forward, backward and step
  // pays once; after them it runs back to back and pays nothing. A dilation doubles the cost per
  // operation, as it does the fixed costs. (One simulation per process: SimGrid's engine.)
  ComputeProfile waking = example_profile();
  waking.idle_op = {{1e-4, 5e-6, 40e-6}, {1e-2, 20e-6, 80e-6}};
  waking.of(Pass::kBackward, OpKind::kConv).first = 30e-6;
  const fs::path file = temp_file("waking.toml", profile_to_toml(waking));
  for (double dilation : {1.0, 2.0}) {
    auto q = test::prepare(
        kOneNode,
        {"devices.0.profile=\"" + file.string() + "\"", "dilation=" + std::to_string(dilation)},
        false);
    const ComputeProfile device = q.scenario.devices[0].compute_profile();
    REQUIRE(device.idle_op.size() == 2);
    CHECK(device.idle_op[1].wait == Approx(1e-2 * dilation).epsilon(1e-12));  // a wait, dilated too
    CHECK(device.idle_op[1].op == Approx(20e-6 * dilation).epsilon(1e-12));
    CHECK(device.idle_op[1].span == Approx(80e-6 * dilation).epsilon(1e-12));
    CHECK(device.of(Pass::kForward, OpKind::kMatmul).overhead ==
          Approx(20e-6 * dilation).epsilon(1e-12));
    CHECK(device.of(Pass::kBackward, OpKind::kConv).first ==
          Approx(30e-6 * dilation).epsilon(1e-12));
    if (dilation == 1.0) continue;
    const StageWork w = stage_work(q.model, 0, q.model.layer_count(), q.scenario.training, 32);
    std::vector<Seconds> forwards, backwards, steps;
    for (const Event& e : run_simulation(q.spec()).events) {
      if (e.node != 0) continue;
      if (e.kind == EventKind::kUpdate) steps.push_back(e.end - e.start);
      if (e.micro_batch < 0) continue;
      if (e.kind == EventKind::kForward) forwards.push_back(e.end - e.start);
      if (e.kind == EventKind::kBackward) backwards.push_back(e.end - e.start);
    }
    REQUIRE(forwards.size() == 5);
    REQUIRE(backwards.size() == 5);
    REQUIRE(steps.size() == 5);
    CHECK(steps[0] ==
          Approx(time_of(w.update, device) + w.update.codes() * 20e-6 * dilation).epsilon(1e-9));
    for (size_t i = 1; i < steps.size(); ++i)
      CHECK(steps[i] == Approx(time_of(w.update, device)).epsilon(1e-9));
    const Seconds inf = std::numeric_limits<Seconds>::infinity();
    // The first forward ends the unbounded wait before the run: it pays the span cost too.
    CHECK(forwards[0] == Approx(time_of(w.forward, device) + 80e-6 * dilation +
                                w.forward.codes() * 20e-6 * dilation)
                             .epsilon(1e-9));
    CHECK(backwards[0] == Approx(time_of(w.backward, device, 0, inf)).epsilon(1e-9));
    CHECK(backwards[0] > time_of(w.backward, device));
    for (size_t i = 1; i < forwards.size(); ++i) {
      CHECK(forwards[i] == Approx(time_of(w.forward, device)).epsilon(1e-9));
      CHECK(backwards[i] == Approx(time_of(w.backward, device)).epsilon(1e-9));
    }
  }
  fs::remove(file);
}

TEST_CASE("a missing or bad profile file is a scenario error naming the device's key",
          "[compute]") {
  const fs::path bad = temp_file("bad.toml", "peak_tflops = 1\n");
  for (const std::string& path : {std::string("/nonexistent/profile.toml"), bad.string()}) {
    try {
      parse_scenario(kOneNode, "one.toml", {"devices.0.profile=\"" + path + "\""});
      FAIL("accepted " << path);
    } catch (const ScenarioError& e) {
      CHECK(std::string(e.what()).find("devices[0].profile") != std::string::npos);
      CHECK(std::string(e.what()).find(path) != std::string::npos);
    }
  }
  fs::remove(bad);
}

TEST_CASE("devices.efficiency replaces the profile's efficiencies and keeps its fixed costs",
          "[compute]") {
  auto peak = test::prepare(kOneNode, {"devices.0.efficiency=0.25"}, false);
  const ComputeProfile uniform = peak.scenario.devices[0].compute_profile();
  const int n = peak.model.layer_count();
  const StageWork w = stage_work(peak.model, 0, n, peak.scenario.training, 32);
  ComputeProfile at_peak = uniform;
  for (auto& pass : at_peak.cost)
    for (KindCost& k : pass) k.efficiency.fill(1.0);
  // No profile: the peak model at a quarter of the peak, so exactly 4x the time.
  CHECK(time_of(w.forward, uniform) == Approx(4 * time_of(w.forward, at_peak)).epsilon(1e-12));

  const fs::path file = temp_file("eff.toml", profile_to_toml(example_profile()));
  auto p = test::prepare(
      kOneNode, {"devices.0.profile=\"" + file.string() + "\"", "devices.0.efficiency=0.5"}, false);
  const ComputeProfile d = p.scenario.devices[0].compute_profile();
  for (int q = 0; q < kPasses; ++q)
    for (int k = 0; k < kOpKinds; ++k) {
      const KindCost& c = d.of(static_cast<Pass>(q), static_cast<OpKind>(k));
      CHECK(c.overhead ==
            Approx(example_profile().of(static_cast<Pass>(q), static_cast<OpKind>(k)).overhead));
      for (double e : c.efficiency) CHECK(e == 0.5);
    }
  // The resolved scenario keeps the key, so a run folder's scenario.toml reproduces the device.
  CHECK(to_toml(p.scenario).find("efficiency = 0.5") != std::string::npos);
  // Dilated k times, a device's fixed costs are k times longer (and its peak k times lower).
  auto dilated =
      test::prepare(kOneNode, {"devices.0.profile=\"" + file.string() + "\"", "dilation=3"}, false);
  const ComputeProfile slow = dilated.scenario.devices[0].compute_profile();
  CHECK(slow.of(Pass::kBackward, OpKind::kConv).overhead ==
        Approx(3 * example_profile().of(Pass::kBackward, OpKind::kConv).overhead));
  // The memory bandwidth keeps its ratio to the peak: the device's peak over the profile's,
  // dilated.
  ComputeProfile banded = example_profile();
  banded.memory_bytes_per_s = 1e9;
  banded.cache_bytes = 1e6;
  const fs::path band_file = temp_file("band.toml", profile_to_toml(banded));
  auto band = test::prepare(
      kOneNode, {"devices.0.profile=\"" + band_file.string() + "\"", "dilation=2"}, false);
  const ComputeProfile b = band.scenario.devices[0].compute_profile();
  CHECK(b.memory_bytes_per_s == Approx(1e9 * (0.2e12 / 2) / banded.peak_flops_per_s).epsilon(1e-9));
  CHECK(b.cache_bytes == Approx(1e6).epsilon(1e-6));
  fs::remove(band_file);
  CHECK(time_of(w.forward, slow) ==
        Approx(3 * time_of(w.forward,
                           test::prepare(kOneNode, {"devices.0.profile=\"" + file.string() + "\""},
                                         false)
                               .scenario.devices[0]
                               .compute_profile()))
            .epsilon(1e-12));
  CHECK_THROWS_AS(parse_scenario(kOneNode, "one.toml", {"devices.0.efficiency=2"}), ScenarioError);
  fs::remove(file);
}
