// Problems with known constants (core/problem/problem.h) and the additive block model that fits
// them (model.kind = "blocks"): the quadratic's exact gradient, f*, L and noise; the logistic's
// bounds; the block model's stochastic gradient against the problem's exact one.
#include <ATen/ATen.h>

#include <cmath>

#include "catch.h"
#include "core/data/dataset.h"
#include "core/error.h"
#include "core/model/stage.h"
#include "core/problem/objective.h"
#include "core/problem/problem.h"
#include "test_support.h"
#include "theory/estimate.h"

using namespace rv;

namespace {

ProblemSpec quadratic(int64_t dim) {
  ProblemSpec s;
  s.kind = ProblemKind::kQuadratic;
  s.dim = dim;
  s.eig_min = 0.05;
  s.eig_max = 2;
  s.sigma2 = 3;
  s.seed = 7;
  return s;
}

const char* kQuadraticScenario = R"(
name = "q"
seed = 5
[model]
kind = "blocks"
blocks = 3
[data]
kind = "quadratic"
features = 6
eig_min = 0.2
eig_max = 1.5
sigma2 = 2
batch_size = 4
[training]
steps = 10
[planner]
method = "manual"
[[devices]]
count = 1
)";

Eigen::VectorXd from_tensor(const at::Tensor& t) {
  const at::Tensor c = t.to(at::kDouble).contiguous();
  Eigen::VectorXd v(c.numel());
  for (int64_t i = 0; i < c.numel(); ++i) v(i) = c.data_ptr<double>()[i];
  return v;
}

}  // namespace

TEST_CASE(
    "the quadratic's Hessian has the chosen spectrum, and its gradient, f* and noise are exact",
    "[problem]") {
  const Problem p = make_problem(quadratic(8));
  // Geometric spectrum from eig_min to eig_max; L is the largest.
  CHECK(p.eigenvalues(0) == Approx(0.05).epsilon(1e-12));
  CHECK(p.eigenvalues(7) == Approx(2).epsilon(1e-12));
  CHECK(p.eigenvalues(3) / p.eigenvalues(2) == Approx(std::pow(40.0, 1.0 / 7)).epsilon(1e-12));
  CHECK(p.smoothness == 2);
  // The Hessian, column by column from the gradient (which is linear), is symmetric with those
  // eigenvalues.
  Eigen::MatrixXd h(8, 8);
  const Eigen::VectorXd g0 = p.gradient(Eigen::VectorXd::Zero(8));
  for (int i = 0; i < 8; ++i) h.col(i) = p.gradient(Eigen::VectorXd::Unit(8, i)) - g0;
  CHECK((h - h.transpose()).norm() < 1e-12);
  Eigen::SelfAdjointEigenSolver<Eigen::MatrixXd> eig(h);
  for (int i = 0; i < 8; ++i)
    CHECK(eig.eigenvalues()(i) == Approx(p.eigenvalues(i)).epsilon(1e-10));
  // The minimum: gradient 0 and f = f* = tau^2 at w*, and f - f* = (w - w*)^T H (w - w*) / 2.
  CHECK(p.gradient(p.w_star).norm() < 1e-12);
  CHECK(p.value(p.w_star) == Approx(p.f_star).epsilon(1e-12));
  CHECK(p.f_star == Approx(p.tau2));
  const Eigen::VectorXd w = Eigen::VectorXd::LinSpaced(8, -1, 2);
  CHECK(p.value(w) - p.f_star ==
        Approx(0.5 * (w - p.w_star).dot(h * (w - p.w_star))).epsilon(1e-10));
  // The quadratic as least squares: f(w) = (1/d)||A w - b||^2 + tau^2, A^T A (2/d) = H.
  CHECK(p.value(w) == Approx((p.a * w - p.b).squaredNorm() / 8 + p.tau2).epsilon(1e-12));
  CHECK(((2.0 / 8) * p.a.transpose() * p.a - h).norm() < 1e-10);
  // A sample's gradient noise -(2/d) A^T e, e ~ N(0, tau^2 I): E||n||^2 = (4/d^2) tau^2 tr(A A^T) =
  // sigma^2.
  CHECK((4.0 / 64) * p.tau2 * (p.a * p.a.transpose()).trace() == Approx(3).epsilon(1e-12));
  CHECK(p.delta() == Approx(0.5 * p.w_star.dot(h * p.w_star)).epsilon(1e-10));
  // Deterministic from the problem's seed.
  CHECK(make_problem(quadratic(8)).w_star == p.w_star);
  ProblemSpec other = quadratic(8);
  other.seed = 8;
  CHECK(make_problem(other).w_star != p.w_star);
}

TEST_CASE("logistic regression's L and sigma^2 bound what they bound, and f* is its minimum",
          "[problem]") {
  ProblemSpec s;
  s.kind = ProblemKind::kLogistic;
  s.dim = 5;
  s.eig_min = 0.3;
  s.eig_max = 2;
  s.samples = 600;
  s.test_samples = 100;
  s.seed = 3;
  const Problem p = make_problem(s);
  REQUIRE(p.a.rows() == 600);
  REQUIRE(p.test_x.rows() == 100);
  // Labels 0 or 1, both present.
  CHECK(p.b.minCoeff() == 0);
  CHECK(p.b.maxCoeff() == 1);
  // f* at a stationary point, below f anywhere else tried.
  const double f0 = p.value(Eigen::VectorXd::Zero(5));
  CHECK(f0 == Approx(std::log(2.0)).epsilon(1e-12));
  CHECK(p.f_star < f0);
  for (double t : {-1.0, 0.5, 2.0}) CHECK(p.value(t * p.w_star) >= p.f_star - 1e-12);
  // L bounds the Hessian X^T D X / n (D = sigmoid'(x^T w) <= 1/4) at a few points: by finite
  // differences of the gradient along the top direction, nothing exceeds L.
  for (double t : {0.0, 1.0, -2.0}) {
    const Eigen::VectorXd w = t * p.w_star;
    for (int i = 0; i < 5; ++i) {
      const Eigen::VectorXd e = Eigen::VectorXd::Unit(5, i);
      CHECK((p.gradient(w + 1e-5 * e) - p.gradient(w)).norm() / 1e-5 <= p.smoothness * (1 + 1e-6));
    }
  }
  // sigma^2 bounds the spread of the per-sample gradients around the full one.
  for (double t : {0.0, 1.0}) {
    const Eigen::VectorXd w = t * p.w_star;
    const Eigen::VectorXd g = p.gradient(w);
    double spread = 0;
    for (Eigen::Index j = 0; j < p.a.rows(); ++j) {
      const double s_j = p.a.row(j).dot(w);
      const double r = 1 / (1 + std::exp(-s_j)) - p.b(j);
      spread += (p.a.row(j).transpose() * r - g).squaredNorm();
    }
    CHECK(spread / static_cast<double>(p.a.rows()) <= p.sigma2);
  }
}

namespace {

// The logistic problem with a feature mean, its rows split in two by label (all 0s, then all 1s)
// or alternately (an iid-like split).
Problem featured_logistic(double mean) {
  ProblemSpec s;
  s.kind = ProblemKind::kLogistic;
  s.dim = 4;
  s.samples = 400;
  s.test_samples = 10;
  s.feature_mean = mean;
  s.seed = 11;
  return make_problem(s);
}

std::vector<std::vector<int64_t>> by_label(const Problem& p) {
  std::vector<std::vector<int64_t>> shards(2);
  for (Eigen::Index j = 0; j < p.a.rows(); ++j) shards[p.b(j) > 0.5 ? 1 : 0].push_back(j);
  return shards;
}

std::vector<std::vector<int64_t>> alternate(const Problem& p, int parts) {
  std::vector<std::vector<int64_t>> shards(static_cast<size_t>(parts));
  for (Eigen::Index j = 0; j < p.a.rows(); ++j) shards[static_cast<size_t>(j % parts)].push_back(j);
  return shards;
}

// (1/C) sum_c ||grad f_c(w) - grad F(w)||^2 at w, from the shards' own mean losses.
double spread_at(const Problem& p, const std::vector<std::vector<int64_t>>& shards,
                 const Objective& o, const Eigen::VectorXd& w) {
  double sum = 0;
  for (const auto& rows : shards) {
    Eigen::VectorXd weight = Eigen::VectorXd::Zero(p.a.rows());
    for (int64_t j : rows) weight(j) = 1.0 / static_cast<double>(rows.size());
    sum += (logistic_gradient(p.a, p.b, weight, w) - o.gradient(w)).squaredNorm();
  }
  return sum / static_cast<double>(shards.size());
}

}  // namespace

TEST_CASE("the clusters' objective: F weighs each shard alike, and its constants bound theirs",
          "[problem][objective]") {
  const Problem p = featured_logistic(1.0);
  const auto shards = by_label(p);
  REQUIRE(shards[0].size() != shards[1].size());  // unequal: F is not the training mean
  const Objective o = make_objective(p, shards);
  CHECK_FALSE(o.same_objective);
  CHECK(o.clusters == 2);
  CHECK(o.weight.sum() == Approx(1.0).epsilon(1e-12));
  CHECK(o.weight(shards[0][0]) == Approx(0.5 / static_cast<double>(shards[0].size())));
  const Eigen::VectorXd w0 = Eigen::VectorXd::Zero(4);
  CHECK(o.value(w0) == Approx(std::log(2.0)).epsilon(1e-12));
  // F* is F's minimum: its gradient vanishes there, and F is larger at points around it.
  CHECK(o.f_star < o.value(w0));
  CHECK(o.delta() == Approx(o.value(w0) - o.f_star));
  // ζ² bounds the shards' gradient spread everywhere: far out, where sigmoid saturates, too.
  Eigen::VectorXd w(4);
  for (int i = 0; i < 200; ++i) {
    const double scale = i < 100 ? 1.0 : 30.0;
    for (int k = 0; k < 4; ++k) w(k) = scale * std::sin(1.7 * i + 2.3 * k);
    CHECK(spread_at(p, shards, o, w) <= o.dissimilarity);
    CHECK(o.value(w) >= o.f_star - 1e-12);
  }
  // L and sigma^2 bound every shard's: finite differences along the axes, the spread of a
  // shard's per-sample gradients.
  for (const auto& rows : shards) {
    Eigen::VectorXd weight = Eigen::VectorXd::Zero(p.a.rows());
    for (int64_t j : rows) weight(j) = 1.0 / static_cast<double>(rows.size());
    for (int k = 0; k < 4; ++k) {
      const Eigen::VectorXd e = Eigen::VectorXd::Unit(4, k);
      CHECK(
          (logistic_gradient(p.a, p.b, weight, e * 1e-5) - logistic_gradient(p.a, p.b, weight, w0))
                  .norm() /
              1e-5 <=
          o.smoothness * (1 + 1e-6));
    }
    double second = 0;
    for (int64_t j : rows) second += p.a.row(j).squaredNorm();
    CHECK(second / static_cast<double>(rows.size()) <= o.sigma2 * (1 + 1e-12));
  }
  // A split that does not follow the labels differs much less: the centre part of the bound is
  // what a split by class adds.
  const Objective mixed = make_objective(p, alternate(p, 2));
  CHECK(mixed.dissimilarity < o.dissimilarity);
  // Bad shards are refused, naming the shard.
  CHECK_THROWS_WITH(make_objective(p, {shards[0], {}}), Catch::Contains("shard 1 is empty"));
  CHECK_THROWS_WITH(make_objective(p, {shards[0], shards[0]}), Catch::Contains("in another shard"));
}

TEST_CASE("a split by label makes no difference where the classes are mirror images",
          "[problem][objective]") {
  // Centred features: (x, y) and (-x, 1 - y) have the same law, so the two classes' objectives
  // agree in the population; with a feature mean they do not. At the minimiser of F the shards'
  // gradients then differ by sampling alone, or by much more.
  auto spread_at_minimum = [](double mean) {
    const Problem p = featured_logistic(mean);
    const auto shards = by_label(p);
    const Objective o = make_objective(p, shards);
    return spread_at(p, shards, o, logistic_minimum(p.a, p.b, o.weight));
  };
  CHECK(spread_at_minimum(1.5) > 5 * spread_at_minimum(0.0));
}

TEST_CASE("the quadratic and one cluster: F is f, and micro-batch noise is what sampling leaves",
          "[problem][objective]") {
  const Problem q = make_problem(quadratic(6));
  const Objective oq = make_objective(q, {{0, 1}, {2, 3}});  // shards change nothing
  CHECK(oq.same_objective);
  CHECK(oq.dissimilarity == 0);
  CHECK(oq.smoothness == q.smoothness);
  CHECK(oq.micro_batch_noise(4) == Approx(q.sigma2 / 4));
  const Problem p = featured_logistic(1.0);
  const Objective one = make_objective(p, {});
  CHECK(one.same_objective);
  CHECK(one.value(p.w_star) == Approx(p.value(p.w_star)).epsilon(1e-12));
  // Without replacement from n rows: (sigma^2 / N) (n - N) / (n - 1); the whole shard: no noise.
  CHECK(one.micro_batch_noise(10) == Approx(p.sigma2 / 10 * 390.0 / 399.0).epsilon(1e-12));
  CHECK(one.micro_batch_noise(400) == 0);
  CHECK(one.micro_batch_noise(1000) == 0);
  const Objective two = make_objective(p, alternate(p, 2));
  CHECK(two.micro_batch_noise(200) == 0);
  CHECK(two.micro_batch_noise(100) > 0);
}

TEST_CASE("a problem's spec is checked", "[problem]") {
  ProblemSpec s = quadratic(4);
  s.eig_min = 3;
  CHECK_THROWS_AS(make_problem(s), InputError);
  // The scenario refuses a block model without a problem, a problem without the block model,
  // and more blocks than columns.
  CHECK_THROWS_AS(test::prepare(kQuadraticScenario, {"data.kind=\"digits\""}), InputError);
  CHECK_THROWS_AS(test::prepare(kQuadraticScenario, {"model.kind=\"mlp\""}), InputError);
  CHECK_THROWS_AS(test::prepare(kQuadraticScenario, {"model.blocks=7"}), InputError);
}

TEST_CASE(
    "the block model's micro-batch gradient is the quadratic's exact gradient plus noise of "
    "variance sigma^2 / N",
    "[problem][model]") {
  test::Prepared t = test::prepare(kQuadraticScenario);
  const ModelDesc& m = t.model;
  REQUIRE(m.layer_count() == 4);  // 3 blocks and the readout
  CHECK(m.record_params);
  CHECK(m.total_params() == 6);
  const Problem p = make_problem(problem_spec(t.scenario.data));
  // A point w: the three blocks' parameters set to it.
  Stage stage(m, 0, m.layer_count(), t.scenario.training, 1);
  const Eigen::VectorXd w = Eigen::VectorXd::LinSpaced(6, 0.5, -0.7);
  at::Tensor flat = at::empty({6}, at::kFloat);
  for (int i = 0; i < 6; ++i) flat[i] = static_cast<float>(w(i));
  stage.module().set_flat_state(flat);
  const Eigen::VectorXd exact = p.gradient(w);
  // Micro-batches of N = 4 samples: the mean gradient over many is the exact one, the mean squared
  // deviation sigma^2 / N = 0.5 (each estimate within its sampling error: 2000 draws).
  Sampler sampler(t.data.train_size(), 4, 11);
  const int draws = 2000;
  Eigen::VectorXd mean = Eigen::VectorXd::Zero(6);
  double deviation = 0;
  for (int mb = 0; mb < draws; ++mb) {
    const std::vector<int64_t> rows = sampler.indices(mb);
    const at::Tensor y = stage.forward(mb, t.data.inputs(rows, false));
    const LossResult r = t.data.task().loss_and_grad(y, t.data.targets(rows, false));
    stage.backward(mb, r.grad_input);
    // The micro-batch's gradient, in the flat layout (the blocks hold no buffers), then the point
    // restored for the next draw.
    at::Tensor grad;
    stage.exchange_gradients([&](const at::Tensor& g) {
      grad = g.clone();
      return g;
    });
    stage.update();
    stage.module().set_flat_state(flat);
    const Eigen::VectorXd g = from_tensor(grad);
    mean += g / draws;
    deviation += (g - exact).squaredNorm() / draws;
  }
  CHECK((mean - exact).norm() < 4 * std::sqrt(0.5 / draws));
  CHECK(deviation == Approx(0.5).epsilon(0.1));
}

TEST_CASE("the estimates made for a network recover the quadratic's L, sigma^2 and f(w_0)",
          "[problem][theory]") {
  // The quadratic's Hessian is constant and its gradient noise independent of w, so the estimator
  // (theory/estimate.h) has exact answers here: L = eig_max, sigma^2, f(0) = Δ + f*.
  test::Prepared t = test::prepare(kQuadraticScenario);
  const Problem p = make_problem(problem_spec(t.scenario.data));
  // Along a replay of 40 SGD updates, at 3 checkpoints: the same everywhere on this problem.
  EstimateOptions o;
  o.micro_batches = 256;
  o.updates = 40;
  o.checkpoints = 3;
  const ConstantEstimates e = estimate_constants(t.scenario, t.model, t.data, o);
  CHECK(e.batch == 4);
  CHECK(e.converged);
  REQUIRE(e.points.size() == 3);
  CHECK(e.points[1].update == 20);
  CHECK(e.points[2].update == 40);
  CHECK(e.points[2].loss < e.points[0].loss);  // the replay descends
  for (const EstimatePoint& q : e.points) CHECK(q.smoothness == Approx(p.smoothness).epsilon(0.02));
  CHECK(e.smoothness == Approx(p.smoothness).epsilon(0.02));
  // sigma^2 from 256 micro-batches: about 4% sampling error each, their largest checked at 20%.
  CHECK(e.sigma2 == Approx(p.sigma2).epsilon(0.2));
  CHECK(e.gap == Approx(p.delta() + p.f_star).epsilon(0.1));
  o.micro_batches = 1;
  CHECK_THROWS_AS(estimate_constants(t.scenario, t.model, t.data, o), InputError);
}
