// diloco and local-sgd (algo/diloco.cc, local_sgd.cc; algo/outer_optimizer.h): the outer step is
// SGD with Nesterov momentum on the mean of the clusters' parameter deltas, buffers take the mean,
// local SGD's step is the mean itself (so a local-sgd run is ravnest's averaging of parameters
// alone, to the byte), and diloco trains digits to a good accuracy with its loss falling. (Its
// timing: tests/test_sim_analytic.cc.)
#include <ATen/ATen.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "algo/outer_optimizer.h"
#include "catch.h"
#include "cli_support.h"
#include "core/output/run_output.h"
#include "snippets.h"

using namespace rv;
namespace fs = std::filesystem;

TEST_CASE("diloco's outer step is SGD with Nesterov momentum on the mean parameter delta") {
  OuterOptimizer outer(0.5, 0.9);
  outer.set_anchor(at::tensor({1.0f, 2.0f, 10.0f}));
  const at::Tensor mask = at::tensor({1.0f, 1.0f, 0.0f});  // the third entry is a buffer
  // Step 1: g = anchor - mean = (0.2, -0.4); v = g; anchor -= 0.5 (g + 0.9 v) = 0.5 * 1.9 g.
  at::Tensor a = outer.step(at::tensor({0.8f, 2.4f, 12.0f}), mask);
  CHECK(a[0].item<float>() == Approx(1.0 - 0.95 * 0.2));
  CHECK(a[1].item<float>() == Approx(2.0 + 0.95 * 0.4));
  CHECK(a[2].item<float>() == 12.0f);  // a buffer takes the mean
  // Step 2 from anchor (0.81, 2.38): mean (0.71, 2.38): g = (0.1, 0); v = 0.9 (0.2, -0.4) + g.
  a = outer.step(at::tensor({0.71f, 2.38f, 11.0f}), mask);
  const double v0 = 0.9 * 0.2 + 0.1, v1 = 0.9 * -0.4;
  CHECK(a[0].item<float>() == Approx(0.81 - 0.5 * (0.1 + 0.9 * v0)));
  CHECK(a[1].item<float>() == Approx(2.38 - 0.5 * (0.0 + 0.9 * v1)));
  CHECK(a[2].item<float>() == 11.0f);
  // A new anchor forgets the momentum.
  outer.set_anchor(at::tensor({0.0f, 0.0f, 0.0f}));
  a = outer.step(at::tensor({-1.0f, 0.0f, 0.0f}), mask);
  CHECK(a[0].item<float>() == Approx(-0.5 * 1.9));
}

TEST_CASE("local SGD's outer step (learning rate 1, no momentum) is the mean, exactly") {
  OuterOptimizer outer(1.0, 0.0);
  outer.set_anchor(at::tensor({0.1f, 0.7f}));
  const at::Tensor mean = at::tensor({0.3333333f, -1.2345678f});
  for (int k = 0; k < 3; ++k) CHECK(at::equal(outer.step(mean, at::ones({2})), mean));
}

namespace {

const std::string kDigits = std::string(R"(name = "outer"
)") + test::kDigitsMlp + R"([training]
optimizer = "adamw"
lr = 0.003
steps = 600
eval_every = 200
average_every = 20
[planner]
method = "manual"
[[planner.cluster]]
nodes = [0, 1]
[[planner.cluster]]
nodes = [2, 3]
[[devices]]
count = 4
up_mbps = 20
down_mbps = 50
latency_ms = 10
tflops = 0.001
)";

fs::path sim(const fs::path& d, const std::string& algorithm, const std::string& run) {
  const test::Result r =
      test::ravnest({"sim", "s.toml", "--set", "training.algorithm=\"" + algorithm + "\"",
                     "--run-dir", run, "--progress", "off"},
                    d);
  INFO(r.err);
  REQUIRE(r.status == 0);
  return d / run;
}

}  // namespace

TEST_CASE("a local-sgd run is ravnest's averaging of the parameters alone, to the byte",
          "[sim][diloco]") {
  const fs::path d = test::fresh_dir("rv-diloco", "local");
  std::ofstream(d / "s.toml") << kDigits;
  const fs::path local = sim(d, "local-sgd", "local"), ravnest = sim(d, "ravnest", "ravnest");
  CHECK(test::slurp(local / "metrics.csv") == test::slurp(ravnest / "metrics.csv"));
  CHECK(test::slurp(local / "eval.csv") == test::slurp(ravnest / "eval.csv"));
  fs::remove_all(d);
}

TEST_CASE("diloco trains digits across two pipeline clusters, its loss falling", "[sim][diloco]") {
  const fs::path d = test::fresh_dir("rv-diloco", "train");
  std::ofstream(d / "s.toml") << kDigits;
  const fs::path run = sim(d, "diloco", "run");
  const auto summary = nlohmann::json::parse(test::slurp(run / "summary.json"));
  CHECK(summary.at("final").at("test_accuracy").get<double>() > 0.9);
  const std::vector<Event> events = read_events_csv((run / "metrics.csv").string());
  std::vector<double> losses;
  for (const Event& e : events)
    if (e.kind == EventKind::kLoss && e.cluster == 0) losses.push_back(e.loss);
  REQUIRE(losses.size() >= 200);
  double first = 0, last = 0;
  for (size_t i = 0; i < 50; ++i) first += losses[i], last += losses[losses.size() - 1 - i];
  CHECK(last < 0.2 * first);
  // Every outer step is one exchange: steps / average_every of them on every node.
  int averages = 0;
  for (const Event& e : events) averages += e.kind == EventKind::kAverage && e.node == 0;
  CHECK(averages == 30);
  // diloco is refused with another inner optimizer, saying which it needs.
  const test::Result r = test::ravnest({"sim", "s.toml", "--set", "training.algorithm=\"diloco\"",
                                        "--set", "training.optimizer=\"adam\""},
                                       d);
  CHECK(r.status == 2);
  CHECK(r.err.find("diloco is defined with training.optimizer = \"adamw\"") != std::string::npos);
  fs::remove_all(d);
}
