// The algorithms on the in-process loopback executor, against numerical oracles:
//   gpipe over p stages == plain single-process SGD with mini-batches of m micro-batches;
//   ravnest with max_in_flight = 1 (no staleness) == plain single-process SGD;
//   ravnest with more in flight trains, with staleness bounded by the cap;
//   a node that crashes stops the others with an error, never a hang.
#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <torch/csrc/autograd/autograd.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "catch.h"
#include "core/error.h"
#include "core/model/optimizer.h"
#include "core/output/run_output.h"
#include "loopback/loopback.h"
#include "snippets.h"
#include "test_support.h"

using namespace rv;

namespace {

const char* kSmall = R"(
name = "small"
seed = 11
[model]
head = "linear"
kind = "mlp"
hidden = [32, 16]
[data]
kind = "synthetic"
side = 6
classes = 5
batch_size = 16
train_samples = 512
test_samples = 256
noise = 2.0
[training]
algorithm = "ravnest"
optimizer = "sgd"
lr = 0.1
steps = 40
micro_batches = 3
[[devices]]
count = 3
ram_gb = 4
)";

// Plain single-process SGD, written without the pipeline code: `steps` updates, update k on the
// mean loss of the samples rows_of(k). Returns the test loss of the final weights.
double plain_sgd(const test::Prepared& p, int64_t steps,
                 const std::function<std::vector<int64_t>(int64_t)>& rows_of) {
  const ModelDesc& m = p.model;
  StageModule whole(m, 0, m.layer_count(), p.scenario.seed);
  std::vector<at::Tensor> params = whole.params();
  for (int64_t step = 0; step < steps; ++step) {
    const std::vector<int64_t> rows = rows_of(step);
    c10::AutoGradMode g(true);
    at::Tensor logits = whole.forward(p.data.inputs(rows, false), params, true, 0, true);
    at::Tensor loss = at::nll_loss(at::log_softmax(logits, 1), p.data.targets(rows, false));
    auto grads = torch::autograd::grad({loss}, params);
    c10::NoGradGuard ng;
    for (size_t i = 0; i < params.size(); ++i)
      params[i] = (params[i] - p.scenario.training.lr * grads[i]).detach().requires_grad_(true);
  }
  c10::NoGradGuard ng;
  std::vector<int64_t> rows;
  for (int64_t i = 0; i < p.data.test_size(); ++i) rows.push_back(i);
  at::Tensor logits = whole.forward(p.data.inputs(rows, true), params, false, 0, false);
  return at::nll_loss(at::log_softmax(logits, 1), p.data.targets(rows, true)).item<double>();
}

// Local SGD (each of C one-node clusters trains on its shard with its own optimizer; every `every`
// updates and after the last, parameters, and with `optimizer_state` the optimizer's slots, are
// replaced by their mean), written with one model per cluster in one process. Returns the test
// loss of the final (common) model.
double local_sgd_test_loss(const test::Prepared& p, int C, int64_t steps, int64_t every,
                           bool optimizer_state);

// The samplers of `clusters` clusters, as the pipeline's nodes draw them (shards when C > 1).
std::vector<Sampler> samplers_of(const test::Prepared& p, int clusters) {
  std::vector<Sampler> out;
  for (int c = 0; c < clusters; ++c) {
    const uint64_t seed = p.scenario.seed + 7919ULL * c;
    if (clusters == 1)
      out.emplace_back(p.data.train_size(), p.scenario.data.batch_size, seed);
    else
      out.emplace_back(shard(p.data.train_size(), clusters, c, p.scenario.seed),
                       p.scenario.data.batch_size, seed);
  }
  return out;
}

// Plain SGD where update k uses micro-batches k*per_step .. k*per_step+per_step-1 of every cluster.
double plain_sgd_test_loss(const test::Prepared& p, int64_t steps, int64_t per_step,
                           int clusters = 1) {
  std::vector<Sampler> samplers = samplers_of(p, clusters);
  return plain_sgd(p, steps, [&](int64_t step) {
    std::vector<int64_t> rows;
    for (auto& smp : samplers)
      for (int64_t j = 0; j < per_step; ++j) {
        auto r = smp.indices(step * per_step + j);
        rows.insert(rows.end(), r.begin(), r.end());
      }
    return rows;
  });
}

double local_sgd_test_loss(const test::Prepared& p, int C, int64_t steps, int64_t every,
                           bool optimizer_state) {
  const ModelDesc& m = p.model;
  std::vector<Sampler> samplers = samplers_of(p, C);
  std::vector<StageModule> models;
  std::vector<Optimizer> opts;
  for (int c = 0; c < C; ++c) {
    models.emplace_back(m, 0, m.layer_count(), p.scenario.seed);
    opts.emplace_back(p.scenario.training);
  }
  auto mean_of = [&](const std::function<at::Tensor(int)>& get) {
    at::Tensor sum = get(0).clone();
    for (int c = 1; c < C; ++c) sum += get(c);
    return sum / static_cast<double>(C);
  };
  for (int64_t step = 0; step < steps; ++step) {
    for (int c = 0; c < C; ++c) {
      const auto rows = samplers[c].indices(step);
      c10::AutoGradMode g(true);
      const auto& params = models[c].params();
      at::Tensor logits = models[c].forward(p.data.inputs(rows, false), params, true, 0, true);
      at::Tensor loss = at::nll_loss(at::log_softmax(logits, 1), p.data.targets(rows, false));
      auto grads = torch::autograd::grad({loss}, params);
      models[c].set_params(opts[c].step(params, grads));
    }
    if ((step + 1) % every != 0 && step + 1 != steps) continue;
    c10::NoGradGuard ng;
    at::Tensor state = mean_of([&](int c) { return models[c].flat_state(); });
    for (auto& model : models) model.set_flat_state(state);
    if (!optimizer_state) continue;
    for (int k = 0; k < opts[0].slots(); ++k) {
      at::Tensor slot = mean_of(
          [&](int c) { return models[c].flatten_like_state(opts[c].slot(k, models[c].params())); });
      for (int c = 0; c < C; ++c) opts[c].set_slot(k, models[c].unflatten_params(slot));
    }
  }
  c10::NoGradGuard ng;
  std::vector<int64_t> rows;
  for (int64_t i = 0; i < p.data.test_size(); ++i) rows.push_back(i);
  at::Tensor logits =
      models[0].forward(p.data.inputs(rows, true), models[0].params(), false, 0, false);
  return at::nll_loss(at::log_softmax(logits, 1), p.data.targets(rows, true)).item<double>();
}

nlohmann::json run(const test::Prepared& p) {
  auto events = run_loopback(p.spec(), 30);
  return summarize(p.scenario, p.plan, events, RunInfo{"loopback", "cpu", 0});
}

}  // namespace

TEST_CASE("gpipe over 3 stages equals plain SGD on mini-batches of m micro-batches",
          "[algo][oracle]") {
  auto p = test::prepare(kSmall, {"training.algorithm=gpipe", "training.steps=12"});
  REQUIRE(p.plan.clusters[0].stages.size() == 3);
  auto s = run(p);
  const double expected = plain_sgd_test_loss(p, 12, 3);
  CHECK(s["final"]["test_loss"].get<double>() == Approx(expected).epsilon(1e-4));
  CHECK(s["train_samples"].get<int64_t>() == 12 * 3 * 16);
  CHECK(s["staleness"]["max"].get<int64_t>() == 0);
}

TEST_CASE("ravnest with one micro-batch in flight equals plain SGD", "[algo][oracle]") {
  for (bool stash : {true, false}) {
    auto p = test::prepare(kSmall,
                           {"training.max_in_flight=1",
                            std::string("training.weight_stashing=") + (stash ? "true" : "false")});
    auto s = run(p);
    INFO("weight_stashing = " << stash);
    CHECK(s["staleness"]["max"].get<int64_t>() == 0);
    CHECK(s["final"]["test_loss"].get<double>() ==
          Approx(plain_sgd_test_loss(p, 40, 1)).epsilon(1e-4));
  }
}

TEST_CASE("ravnest with several micro-batches in flight learns, staleness bounded by the cap",
          "[algo]") {
  for (bool stash : {true, false}) {
    auto p = test::prepare(kSmall,
                           {"training.max_in_flight=3", "training.steps=150",
                            std::string("training.weight_stashing=") + (stash ? "true" : "false")});
    auto s = run(p);
    INFO("weight_stashing = " << stash << "\n" << s.dump(1));
    CHECK(s["staleness"]["max"].get<int64_t>() <= 2);
    CHECK(s["train_samples"].get<int64_t>() == 150 * 16);
    // Better than chance (5 classes) by a wide margin.
    CHECK(s["final"]["test_accuracy"].get<double>() > 0.5);
    for (const auto& node : s["per_node"]) CHECK(node["updates"].get<int64_t>() == 150);
  }
}

TEST_CASE("evaluations happen every eval_every updates and at the end", "[algo]") {
  auto p = test::prepare(kSmall, {"training.eval_every=10"});
  auto events = run_loopback(p.spec(), 30);
  std::vector<int64_t> steps;
  for (const auto& e : events)
    if (e.kind == EventKind::kEval) steps.push_back(e.step);
  CHECK(steps == std::vector<int64_t>{10, 20, 30, 40});
}

TEST_CASE("a node that crashes stops the others with an error instead of a hang",
          "[algo][faults]") {
  auto p = test::prepare(kSmall, {"training.steps=100"});
  FaultSpec crash;
  crash.crash_after_sends = 5;
  try {
    run_loopback(p.spec(), 30, 1, &crash);
    FAIL("no error");
  } catch (const Error& e) {
    CHECK(std::string(e.what()).find("injected crash") != std::string::npos);
  }
}

TEST_CASE("an unexpected message is a clear input error", "[algo][faults]") {
  // Dropping messages makes a later one arrive where it is not expected, or the pipeline stall:
  // either way an error, never a hang.
  auto p = test::prepare(kSmall, {"training.steps=30"});
  FaultSpec drop;
  drop.drop_every = 3;
  CHECK_THROWS_AS(run_loopback(p.spec(), 2, 0, &drop), Error);
}

TEST_CASE("multi-cluster ravnest: every cluster holds the same model after each averaging",
          "[algo][rings]") {
  const std::string allreduce = GENERATE("multi-ring", "single-ring");
  const bool optimizer_state = GENERATE(false, true);
  INFO(allreduce << (optimizer_state ? ", with optimizer state" : ""));
  auto p = test::prepare(
      std::string(kSmall) + test::kTwoClusters,
      {"training.steps=60", "training.average_every=20", "training.eval_every=20",
       "devices.0.count=3", "training.allreduce=" + allreduce, "training.momentum=0.9",
       std::string("training.average_optimizer_state=") + (optimizer_state ? "true" : "false")});
  REQUIRE(p.plan.clusters.size() == 2);
  auto events = run_loopback(p.spec(), 30);
  std::map<int64_t, std::vector<double>> losses;  // step -> test loss of each cluster
  int averagings = 0;
  for (const auto& e : events) {
    if (e.kind == EventKind::kEval) losses[e.step].push_back(e.loss);
    if (e.kind == EventKind::kAverage) ++averagings;
  }
  CHECK(averagings == 3 * 3);  // three nodes, three averagings each
  REQUIRE(losses.size() == 3);
  for (const auto& [step, l] : losses) {
    INFO("step " << step);
    REQUIRE(l.size() == 2);
    CHECK(l[0] == l[1]);  // bit-identical: every cluster gathers the same sums
  }
}

TEST_CASE("clusters train on disjoint shards of the training set", "[data]") {
  std::set<int64_t> all;
  size_t total = 0;
  for (int part = 0; part < 3; ++part) {
    auto rows = shard(100, 3, part, 9);
    total += rows.size();
    all.insert(rows.begin(), rows.end());
    Sampler s(rows, 10, 1);
    for (auto i : s.indices(0)) CHECK(std::binary_search(rows.begin(), rows.end(), i));
  }
  CHECK(total == 100);
  CHECK(all.size() == 100);
}

TEST_CASE("sync-dp with C nodes and batch b equals plain SGD with batch C*b on the same samples",
          "[algo][oracle]") {
  const std::string allreduce = GENERATE("multi-ring", "single-ring");
  INFO(allreduce);
  auto p = test::prepare(kSmall, {"training.algorithm=sync-dp", "training.steps=15",
                                  "training.allreduce=" + allreduce});
  const int C = 3;
  REQUIRE(p.plan.clusters.size() == C);
  auto s = run(p);
  // The oracle: one process, one model, the C nodes' micro-batches of each step as one batch.
  const double expected = plain_sgd_test_loss(p, 15, 1, C);
  CHECK(s["final"]["test_loss"].get<double>() == Approx(expected).epsilon(1e-4));
  CHECK(s["train_samples"].get<int64_t>() == 15 * C * 16);
}

TEST_CASE("sync-dp refuses a pool whose nodes cannot hold the model, saying so", "[algo]") {
  try {
    test::prepare(
        std::string(kSmall) + "[[devices]]\nname = \"tiny\"\ncount = 1\nram_gb = 0.00001\n",
        {"training.algorithm=sync-dp"}, false);
    FAIL("no error");
  } catch (const ScenarioError& e) {
    std::string w = e.what();
    CHECK(w.find("sync-dp needs every node to hold the whole model") != std::string::npos);
    CHECK(w.find("tiny") != std::string::npos);
  }
}

TEST_CASE(
    "gpipe in 2 clusters of 2 stages equals plain SGD on both clusters' micro-batches of a step",
    "[algo][oracle]") {
  auto p = test::prepare(std::string(kSmall) + R"(
[planner]
method = "manual"
[[planner.cluster]]
nodes = [0, 1]
[[planner.cluster]]
nodes = [2, 3]
)",
                         {"training.algorithm=gpipe", "training.steps=8", "devices.0.count=4"});
  REQUIRE(p.plan.clusters.size() == 2);
  auto s = run(p);
  const double expected = plain_sgd_test_loss(p, 8, p.scenario.training.micro_batches, 2);
  CHECK(s["final"]["test_loss"].get<double>() == Approx(expected).epsilon(1e-4));
}

TEST_CASE("overlapped averaging: training goes on meanwhile, and clusters end with the same model",
          "[algo][rings]") {
  const std::string allreduce = GENERATE("multi-ring", "single-ring");
  const bool optimizer_state = GENERATE(false, true);
  INFO(allreduce << (optimizer_state ? ", with optimizer state" : ""));
  auto p = test::prepare(
      std::string(kSmall) + test::kTwoClusters,
      {"training.steps=60", "training.average_every=20", "training.averaging=overlapped",
       "devices.0.count=3", "training.allreduce=" + allreduce, "training.optimizer=adam",
       "training.lr=0.01",
       std::string("training.average_optimizer_state=") + (optimizer_state ? "true" : "false")});
  auto events = run_loopback(p.spec(), 30);
  std::map<int64_t, std::vector<double>> losses;
  int averagings = 0;
  for (const auto& e : events) {
    if (e.kind == EventKind::kEval) losses[e.step].push_back(e.loss);
    if (e.kind == EventKind::kAverage) ++averagings;
  }
  CHECK(averagings == 3 * 3);
  REQUIRE(losses.count(60) == 1);
  REQUIRE(losses[60].size() == 2);
  CHECK(losses[60][0] == losses[60][1]);  // the last averaging is bulk-synchronous
}

TEST_CASE(
    "averaging the optimizer state: ravnest in one-node clusters equals local Adam with averaged "
    "moments",
    "[algo][oracle][rings]") {
  const bool optimizer_state = GENERATE(false, true);
  const std::string allreduce = GENERATE("multi-ring", "single-ring");
  INFO((optimizer_state ? "moments averaged, " : "moments kept, ") << allreduce);
  auto p = test::prepare(
      std::string(kSmall) + R"(
[planner]
method = "manual"
[[planner.cluster]]
nodes = [0]
[[planner.cluster]]
nodes = [1]
[[planner.cluster]]
nodes = [2]
)",
      {"training.optimizer=adam", "training.lr=0.01", "training.steps=24",
       "training.average_every=4", "training.allreduce=" + allreduce,
       std::string("training.average_optimizer_state=") + (optimizer_state ? "true" : "false")});
  REQUIRE(p.plan.clusters.size() == 3);
  auto s = run(p);
  const double expected = local_sgd_test_loss(p, 3, 24, 4, optimizer_state);
  const double other = local_sgd_test_loss(p, 3, 24, 4, !optimizer_state);
  INFO("expected " << expected << ", the other choice gives " << other);
  CHECK(s["final"]["test_loss"].get<double>() == Approx(expected).epsilon(1e-4));
  // The choice matters: the two oracles part (so the check above tells them apart).
  CHECK(std::abs(expected - other) > 1e-3 * std::abs(expected));
  CHECK(s["averaging"]["optimizer_state"].get<bool>() == optimizer_state);
  CHECK(s["averaging"]["rounds"].get<int64_t>() == 6);
}
