// ravnest validate's parts that need no run: the error of a figure, the comparison of two summaries
// and its verdict, and the choice of a dilation from host and modeled times.
#include <fmt/core.h>

#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>

#include "catch.h"
#include "core/output/run_output.h"
#include "core/output/validation.h"
#include "exec/dilation.h"
#include "test_support.h"

using namespace rv;
using nlohmann::json;

namespace {

json summary(double samples, double busy0, double busy1, double accuracy, int64_t sent0) {
  return json{{"scenario", "s"},
              {"algorithm", "ravnest"},
              {"nodes", 3},
              {"clusters", 1},
              {"time_s", 10.0},
              {"steady_samples_per_s", samples},
              {"time_per_step_s", 64.0 / samples},
              {"staleness", {{"mean", 1.0}, {"max", 2}}},
              {"averaging", {{"mean_round_s", 0.0}}},
              {"final", {{"train_loss", 0.5}, {"test_loss", 0.6}, {"test_accuracy", accuracy}}},
              {"per_node",
               {{{"device", "a"},
                 {"stage", 0},
                 {"busy_fraction", busy0},
                 {"bytes_sent", sent0},
                 {"bytes_received", 10}},
                {{"device", "b"},
                 {"stage", 1},
                 {"busy_fraction", busy1},
                 {"bytes_sent", 10},
                 {"bytes_received", sent0}},
                {{"device", "c"},
                 {"stage", -1},
                 {"busy_fraction", 0.0},
                 {"bytes_sent", 0},
                 {"bytes_received", 0}}}}};
}

const json* figure(const json& v, const std::string& name) {
  for (const auto& f : v["figures"])
    if (f["figure"] == name) return &f;
  return nullptr;
}

}  // namespace

TEST_CASE("a figure's error is exp(|ln(sim/real)|) - 1, symmetric", "[validate]") {
  CHECK(ratio_error(110, 100) == Approx(0.1));
  CHECK(ratio_error(100, 110) == Approx(0.1));
  CHECK(ratio_error(200, 100) == Approx(1.0));
  CHECK(ratio_error(50, 100) == Approx(1.0));
  CHECK(ratio_error(0, 0) == 0);
  CHECK(std::isnan(ratio_error(0, 1)));
  CHECK(std::isnan(ratio_error(-1, 1)));
  CHECK(std::isnan(ratio_error(std::numeric_limits<double>::quiet_NaN(), 1)));
}

TEST_CASE("two summaries side by side: errors, per-node differences and the verdict",
          "[validate]") {
  ValidationContext ctx;
  ctx.dilation = 4;
  SECTION("within every target") {
    const json v = compare_runs(summary(105, 0.5, 0.8, 0.851, 1000),
                                summary(100, 0.45, 0.85, 0.85, 1000), ctx);
    REQUIRE(figure(v, "steady_samples_per_s") != nullptr);
    CHECK((*figure(v, "steady_samples_per_s"))["error"].get<double>() == Approx(0.05));
    CHECK((*figure(v, "final/test_accuracy"))["difference"].get<double>() == Approx(0.001));
    CHECK(v["per_node"][0]["busy_fraction"]["difference"].get<double>() == Approx(0.05));
    CHECK(v["per_node"][1]["bytes_received"]["error"].get<double>() == 0);
    CHECK(v["agrees"].get<bool>());
    CHECK(v["verdict"].get<std::string>().rfind("agrees: steady samples/s 5.0% apart", 0) == 0);
    CHECK(v["verdict"].get<std::string>().find("(dilation 4)") != std::string::npos);
    const std::string md = validation_markdown(v);
    CHECK(md.find("| steady-state samples/s (samples/s) | 105 | 100 | 5.0% |") !=
          std::string::npos);
  }
  SECTION("each missed target is named first") {
    json v =
        compare_runs(summary(130, 0.5, 0.8, 0.80, 1000), summary(100, 0.3, 0.8, 0.85, 1100), ctx);
    CHECK_FALSE(v["agrees"].get<bool>());
    const std::string verdict = v["verdict"].get<std::string>();
    CHECK(verdict.rfind("differs: steady samples/s 30.0% apart", 0) == 0);
    CHECK(verdict.find("busy fractions within 0.200") < verdict.find("late"));
    CHECK(verdict.find("test accuracy 5.00 points apart") != std::string::npos);
    CHECK(v["per_node"][0]["bytes_sent"]["error"].get<double>() == Approx(0.1));
    ctx.late_fraction = 0.2;
    ctx.same_plan = false;
    v = compare_runs(summary(100, 0.5, 0.8, 0.85, 1000), summary(100, 0.5, 0.8, 0.85, 1000), ctx);
    CHECK_FALSE(v["agrees"].get<bool>());
    CHECK(v["verdict"].get<std::string>().find("20.0% of the real run's compute spans late") !=
          std::string::npos);
    CHECK(v["verdict"].get<std::string>().find("plans differ") != std::string::npos);
  }
  SECTION("against hardware, the host's drift is judged, not lateness nor the spans' own ratio") {
    ctx.agreement = Agreement::kHardware;
    ctx.late_fraction = 0.5;  // not an executor agreement's: ignored
    ctx.compute_ratio = 1.6;  // the model's error on the spans: reported, not judged
    ctx.host_drift = 1.05;
    ctx.host = {{"threads", 1},
                {"ranks", 3},
                {"cores", 2},
                {"peak_tflops", 0.04},
                {"peak_tflops_after", 0.042}};
    json v =
        compare_runs(summary(100, 0.5, 0.8, 0.85, 1000), summary(104, 0.5, 0.8, 0.85, 1000), ctx);
    CHECK(v["agreement"] == "hardware");
    CHECK(v["agrees"].get<bool>());
    CHECK_FALSE(v.contains("late_fraction"));
    CHECK(v["compute_ratio"].get<double>() == Approx(1.6));
    CHECK(v["host_drift"].get<double>() == Approx(1.05));
    CHECK(v["verdict"].get<std::string>().find(
              "the host's calibration after the run at 1.05x the one before") != std::string::npos);
    CHECK(v["verdict"].get<std::string>().find("(undilated)") != std::string::npos);
    const std::string md = validation_markdown(v);
    CHECK(md.rfind("## Model against hardware", 0) == 0);
    CHECK(md.find("shares the host's 2 cores among its 3 ranks") != std::string::npos);
    CHECK(md.find("peak 0.04 TFLOPS before the real run, 0.042 after it") != std::string::npos);
    CHECK(md.find("would take 1.050x") != std::string::npos);
    CHECK(md.find("The real spans took 1.600x") != std::string::npos);
    // A run whose host's speed moved by more than 10% between the two calibrations is flagged,
    // faster or slower.
    for (const double drift : {1.4, 0.85}) {
      ctx.host_drift = drift;
      v = compare_runs(summary(100, 0.5, 0.8, 0.85, 1000), summary(104, 0.5, 0.8, 0.85, 1000), ctx);
      CHECK_FALSE(v["agrees"].get<bool>());
      CHECK(v["verdict"].get<std::string>().rfind(
                fmt::format("differs: the host's calibration after the run at {:.2f}x", drift),
                0) == 0);
    }
    // Not measured (no spans): not a pass.
    ctx.host_drift = std::numeric_limits<double>::quiet_NaN();
    v = compare_runs(summary(100, 0.5, 0.8, 0.85, 1000), summary(104, 0.5, 0.8, 0.85, 1000), ctx);
    CHECK_FALSE(v["agrees"].get<bool>());
    CHECK(v["host_drift"].is_null());
    const json unmeasured = {{"agreement", "hardware"}, {"measured", false}, {"why", "not root"}};
    CHECK(validation_markdown(unmeasured).find("**Not measured**: not root") != std::string::npos);
  }
  SECTION("an idle node's busy fraction does not count") {
    json sim = summary(100, 0.5, 0.8, 0.85, 1000), real = sim;
    sim["per_node"][2]["busy_fraction"] =
        0.5;  // (an idle node is never busy; this checks the filter)
    CHECK(compare_runs(sim, real, ctx)["agrees"].get<bool>());
  }
}

namespace {

NodeDemand demand(int node, double host_ms, double modeled_ms) {
  NodeDemand d;
  d.node = node;
  d.group = node;
  d.device = "d" + std::to_string(node);
  d.host_s = host_ms * 1e-3;
  d.modeled_s = modeled_ms * 1e-3;
  return d;
}

bool has(const std::string& text, const std::string& part) {
  INFO(text);
  return text.find(part) != std::string::npos;
}

}  // namespace

TEST_CASE("ravnest real's host check says where this host is slower or faster, and what follows",
          "[validate]") {
  Scenario s;
  // Three nodes on three cores, a whole core each: 10x slower, alike, 4x faster.
  const DilationChoice c =
      choose_dilation({demand(0, 4.0, 0.4), demand(1, 1.0, 1.0), demand(2, 0.5, 2.0)}, 3);
  const std::string text = host_check_text(s, c);
  CHECK(has(text, "node 0 (d0): 4 ms here, 0.4 ms modeled: this host is 10x slower"));
  CHECK(has(text, "node 1 (d1): 1 ms here, 1 ms modeled: follows it"));
  CHECK(has(text, "node 2 (d2): 0.5 ms here, 2 ms modeled: this host is 4x faster"));
  CHECK(has(text, "--set real.emulate_speed=true --set dilation=15"));  // 1.5 x 10
  SECTION("with emulate_speed, a dilation that leaves room, and one that does not") {
    s.real.emulate_speed = true;
    s.dilation = 20;
    CHECK(has(host_check_text(s, c), "leaves this host room"));
    CHECK(
        has(host_check_text(s, c), "node 0 (d0): 4 ms here, 8 ms modeled: this host is 2x faster"));
    s.dilation = 5;
    CHECK(has(host_check_text(s, c), "spans will run late"));
    CHECK(has(host_check_text(s, c), "--set dilation=15"));
  }
  SECTION("only faster, and alike") {
    CHECK(has(host_check_text(s, choose_dilation({demand(2, 0.5, 2.0)}, 1)),
              "faster than the scenario"));
    // Two nodes on one core, half a core each: 0.5 ms of work takes 1 ms of the run's time.
    CHECK(has(host_check_text(s, choose_dilation({demand(0, 0.5, 1.0), demand(1, 0.5, 1.0)}, 1)),
              "computes as the scenario's devices do"));
  }
}

TEST_CASE("the dilation is the largest need, rounded up to two figures, and at least 1",
          "[validate]") {
  // Four nodes on two cores: half a core each. Node 1 needs 1.5 * 2 / (0.5 * 1) = 6.
  DilationChoice c =
      choose_dilation({demand(0, 1, 1), demand(1, 2, 1), demand(2, 1, 2), demand(3, 0.5, 1)}, 2);
  CHECK(c.share == 0.5);
  CHECK(c.binding == 1);
  CHECK(c.nodes[1].needs == Approx(6));
  CHECK(c.k == Approx(6));
  // Rounded up to two significant figures.
  CHECK(choose_dilation({demand(0, 4.09, 1)}, 4, 1).k == Approx(4.1));
  CHECK(choose_dilation({demand(0, 123.4, 1)}, 4, 1).k == Approx(130));
  // A host faster than the devices needs none.
  CHECK(choose_dilation({demand(0, 0.1, 1)}, 1).k == 1);
  // Beyond the limit, the message names the node and the --set that shrinks the run.
  auto p = test::prepare(R"(
name = "big"
[model]
kind = "mlp"
head = "linear"
[data]
kind = "synthetic"
[[devices]]
name = "fast"
count = 1
[[devices]]
name = "faster"
count = 1
tflops = 500
)",
                         {});
  DilationChoice big = choose_dilation({demand(0, 1, 1), demand(1, 300, 1)}, 2);
  CHECK(big.k > kMaxDilation);
  const std::string m = too_large_message(p.scenario, big);
  CHECK(m.find("node 1, a d1 device") != std::string::npos);
  CHECK(m.find("--set devices.1.tflops=111 ") != std::string::npos);  // 500 x 100 / 450
  CHECK(m.find("--set devices.1.tflops=") != std::string::npos);
}

TEST_CASE("a real run whose work did not fit its share raises the dilation by what it measured",
          "[validate]") {
  // 100 spans, each its CPU time over its share of the modeled time.
  std::vector<double> demand(100, 0.7);
  // Within their share everywhere: k stays.
  CHECK(redilation(demand, 8) == 8);
  // 5 of 100 over (exactly the tolerance): still kept up; 4% over counts as within.
  for (size_t i = 0; i < 5; ++i) demand[i] = 2.0;
  demand[5] = 1.04;
  CHECK(redilation(demand, 8) == 8);
  // 20 of 100 over: the 95% quantile of the demands (sorted index floor(0.95 * 99) = 94), times
  // the margin, times k, rounded up to two figures.
  for (size_t i = 0; i < 20; ++i) demand[i] = 1.5 + 0.05 * static_cast<double>(i);
  // Sorted: 80 spans of 0.7, then the 20 over; index 94 is the 15th of those, 2.2.
  CHECK(redilation(demand, 8) == Approx(22));  // 8 * 2.2 * 1.2 = 21.12 -> 22
  // No spans: nothing to go by.
  CHECK(redilation({}, 5) == 5);
}

TEST_CASE("a dilated device is k times slower in every rate and time it gives",
          "[validate][scenario]") {
  const std::string text = R"(
name = "d"
[model]
kind = "mlp"
head = "linear"
[data]
kind = "synthetic"
[real]
timeout_s = 10
[[devices]]
tflops = 2
up_mbps = 80
down_mbps = 40
latency_ms = 5
)";
  const auto plain = test::prepare(text, {});
  const auto slow = test::prepare(text, {"dilation=4"});
  const DeviceGroup& a = plain.scenario.devices[0];
  const DeviceGroup& b = slow.scenario.devices[0];
  CHECK(b.flops_per_s() == Approx(a.flops_per_s() / 4));
  CHECK(b.up_bytes_per_s() == Approx(a.up_bytes_per_s() / 4));
  CHECK(b.down_bytes_per_s() == Approx(a.down_bytes_per_s() / 4));
  CHECK(b.latency_s() == Approx(a.latency_s() * 4));
  CHECK(b.ram_bytes() == a.ram_bytes());  // memory is not time
  CHECK(b.compute_profile().peak_flops_per_s == Approx(a.compute_profile().peak_flops_per_s / 4));
  CHECK(slow.scenario.peer_timeout_s() == Approx(40));
  // The resolved scenario keeps the key and the devices as written, so a run folder reloads alike.
  const std::string toml = to_toml(slow.scenario);
  CHECK(toml.find("dilation = 4") != std::string::npos);
  CHECK(toml.find("tflops = 2") != std::string::npos);
}
