// Tasks: the data kind decides the task, the task decides the loss and the scores, and a new task
// (regression here) trains through the unchanged pipelines.
#include <ATen/ATen.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "catch.h"
#include "core/data/dataset.h"
#include "core/data/task.h"
#include "core/output/run_output.h"
#include "loopback/loopback.h"
#include "test_support.h"

using namespace rv;

TEST_CASE("the classification task's loss and gradient are softmax cross-entropy", "[task]") {
  const Task& t = task_for(TaskKind::kClassification);
  at::Tensor out = at::tensor({2.0f, 0.0f, -1.0f, 0.5f, 0.5f, 3.0f}).view({2, 3});
  at::Tensor y = at::tensor({0L, 2L});
  LossResult r = t.loss_and_grad(out, y);
  // By hand: mean of -log softmax at the targets; gradient (softmax - onehot) / batch.
  at::Tensor p = at::softmax(out, 1);
  const double expect = -(std::log(p[0][0].item<double>()) + std::log(p[1][2].item<double>())) / 2;
  CHECK(r.loss == Approx(expect).epsilon(1e-6));
  at::Tensor onehot = at::zeros({2, 3});
  onehot[0][0] = 1;
  onehot[1][2] = 1;
  CHECK(at::allclose(r.grad_input, (p - onehot) / 2, 1e-5, 1e-6));
  const Score s = t.score(out, y);
  CHECK(s.loss_sum == Approx(2 * expect).epsilon(1e-6));
  CHECK(s.correct == 2);
  CHECK(t.has_accuracy());
}

TEST_CASE("the regression task's loss is the mean squared error over samples and targets",
          "[task]") {
  const Task& t = task_for(TaskKind::kRegression);
  at::Tensor out = at::tensor({1.0f, 2.0f, 3.0f, 4.0f}).view({2, 2});
  at::Tensor y = at::tensor({0.0f, 2.0f, 3.0f, 2.0f}).view({2, 2});
  LossResult r = t.loss_and_grad(out, y);
  CHECK(r.loss == Approx((1.0 + 0 + 0 + 4.0) / 4));
  CHECK(at::allclose(r.grad_input, 2 * (out - y) / 4));
  const Score s = t.score(out, y);
  CHECK(s.loss_sum == Approx((1.0 + 0) / 2 + (0 + 4.0) / 2));  // per sample: mean over targets
  CHECK_FALSE(t.has_accuracy());
}

TEST_CASE("the regression data kind gives float inputs and targets from known weights",
          "[task][data]") {
  DataSpec spec;
  spec.kind = DataKind::kRegression;
  spec.features = 6;
  spec.targets = 2;
  spec.noise = 0.0;
  spec.train_samples = 256;
  spec.test_samples = 64;
  const DatasetShape shape = dataset_shape(spec);
  CHECK(shape.task == TaskKind::kRegression);
  CHECK(shape.sample_shape == std::vector<int64_t>{6});
  CHECK(shape.outputs == 2);
  Dataset d = load_dataset(spec, 3);
  CHECK(d.train_x.sizes() == at::IntArrayRef({256, 6}));
  CHECK(d.train_y.sizes() == at::IntArrayRef({256, 2}));
  CHECK(d.targets({0, 1}, true).scalar_type() == at::kFloat);
  // Noise-free targets are an exact affine function of the inputs: least squares recovers it.
  at::Tensor x1 = at::cat({d.train_x, at::ones({256, 1})}, 1);
  at::Tensor sol = std::get<0>(at::linalg_lstsq(x1, d.train_y));
  CHECK((at::matmul(x1, sol) - d.train_y).abs().max().item<double>() < 1e-3);
  // The same seed gives the same data.
  CHECK(at::equal(d.test_y, load_dataset(spec, 3).test_y));
}

TEST_CASE("a regression model trains through the ravnest pipeline unchanged", "[task][loopback]") {
  auto p = test::prepare(R"(
name = "regression"
seed = 5
[model]
kind = "mlp"
hidden = [32]
head = "linear"
[data]
kind = "regression"
features = 8
targets = 2
noise = 0.05
batch_size = 32
train_samples = 2048
test_samples = 512
[training]
algorithm = "ravnest"
lr = 0.05
steps = 400
eval_every = 100
[planner]
method = "manual"
[[devices]]
count = 2
)");
  REQUIRE(p.plan.clusters.at(0).stages.size() == 2);
  const std::vector<Event> events = run_loopback(p.spec(), 60);
  auto summary = summarize(p.scenario, p.plan, events, RunInfo{"loopback", "cpu", 0});
  INFO(summary.dump(2));
  std::vector<Event> evals;
  for (const Event& e : events)
    if (e.kind == EventKind::kEval) evals.push_back(e);
  REQUIRE(evals.size() == 4);  // after 100, 200, 300 and 400 updates
  CHECK(std::isnan(evals.back().accuracy));
  // The targets' variance is about |W|^2 / features + |b|^2 (about 2 per target); the noise
  // floor is 0.0025. After 100 updates the model is partly fit; after 400 it is close.
  CHECK(evals.back().loss < 0.5 * evals.front().loss);
  CHECK(evals.back().loss < 0.3);
  CHECK(summary["final"]["test_accuracy"].is_null());
}
