#include "core/problem/problem.h"

#include <cmath>
#include <random>

#include "core/error.h"

namespace rv {
namespace {

// Normal draws from a seeded 64-bit Mersenne twister by Box-Muller: the same numbers with every
// standard library (std::normal_distribution's algorithm is the library's choice).
class Normal {
 public:
  explicit Normal(uint64_t seed) : gen_(seed) {}
  double uniform() { return (static_cast<double>(gen_() >> 11) + 0.5) * 0x1.0p-53; }  // (0, 1)
  double operator()() {
    if (has_spare_) {
      has_spare_ = false;
      return spare_;
    }
    const double r = std::sqrt(-2 * std::log(uniform())), t = 2 * M_PI * uniform();
    spare_ = r * std::sin(t);
    has_spare_ = true;
    return r * std::cos(t);
  }

 private:
  std::mt19937_64 gen_;
  double spare_ = 0;
  bool has_spare_ = false;
};

double softplus(double s) { return s > 0 ? s + std::log1p(std::exp(-s)) : std::log1p(std::exp(s)); }
double sigmoid(double s) {
  return s >= 0 ? 1 / (1 + std::exp(-s)) : std::exp(s) / (1 + std::exp(s));
}

Eigen::MatrixXd gaussian(Normal& n, int64_t rows, int64_t cols) {
  Eigen::MatrixXd m(rows, cols);
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) m(i, j) = n();
  return m;
}

}  // namespace

double Problem::value(const Eigen::VectorXd& w) const {
  RV_CHECK(w.size() == spec.dim, "problem: a point of the wrong dimension");
  if (spec.kind == ProblemKind::kQuadratic) {
    const Eigen::VectorXd r = w - w_star;
    return 0.5 * r.dot(q * eigenvalues.asDiagonal() * q.transpose() * r) + tau2;
  }
  return logistic_value(a, b, uniform_weights(a.rows()), w);
}

Eigen::VectorXd Problem::gradient(const Eigen::VectorXd& w) const {
  RV_CHECK(w.size() == spec.dim, "problem: a point of the wrong dimension");
  if (spec.kind == ProblemKind::kQuadratic)
    return q * (eigenvalues.asDiagonal() * (q.transpose() * (w - w_star)));
  return logistic_gradient(a, b, uniform_weights(a.rows()), w);
}

Eigen::VectorXd uniform_weights(Eigen::Index n) {
  return Eigen::VectorXd::Constant(n, 1.0 / static_cast<double>(n));
}

double logistic_value(const Eigen::MatrixXd& x, const Eigen::VectorXd& y,
                      const Eigen::VectorXd& weight, const Eigen::VectorXd& w) {
  const Eigen::VectorXd s = x * w;
  double sum = 0;
  for (Eigen::Index j = 0; j < s.size(); ++j) sum += weight(j) * (softplus(s(j)) - y(j) * s(j));
  return sum;
}

Eigen::VectorXd logistic_gradient(const Eigen::MatrixXd& x, const Eigen::VectorXd& y,
                                  const Eigen::VectorXd& weight, const Eigen::VectorXd& w) {
  const Eigen::VectorXd s = x * w;
  Eigen::VectorXd r(s.size());
  for (Eigen::Index j = 0; j < s.size(); ++j) r(j) = weight(j) * (sigmoid(s(j)) - y(j));
  return x.transpose() * r;
}

Eigen::VectorXd logistic_minimum(const Eigen::MatrixXd& x, const Eigen::VectorXd& y,
                                 const Eigen::VectorXd& weight) {
  Eigen::VectorXd w = Eigen::VectorXd::Zero(x.cols());
  double f = logistic_value(x, y, weight, w);
  for (int it = 0; it < 200; ++it) {
    const Eigen::VectorXd g = logistic_gradient(x, y, weight, w);
    if (g.norm() < 1e-13) break;
    const Eigen::VectorXd s = x * w;
    Eigen::VectorXd curvature(s.size());
    for (Eigen::Index j = 0; j < s.size(); ++j)
      curvature(j) = weight(j) * sigmoid(s(j)) * (1 - sigmoid(s(j)));
    const Eigen::MatrixXd h = x.transpose() * curvature.asDiagonal() * x;
    const Eigen::VectorXd step = h.ldlt().solve(g);
    double t = 1;
    Eigen::VectorXd next = w - step;
    double fn = logistic_value(x, y, weight, next);
    while (fn > f && t > 1e-8) {
      t /= 2;
      next = w - t * step;
      fn = logistic_value(x, y, weight, next);
    }
    if (fn > f) break;
    w = next;
    f = fn;
  }
  return w;
}

Problem make_problem(const ProblemSpec& spec) {
  if (!(spec.eig_min > 0 && spec.eig_min <= spec.eig_max))
    throw InputError("the problem's spectrum needs 0 < eig_min <= eig_max");
  RV_CHECK(spec.dim >= 1, "problem: dimension below 1");
  Problem p;
  p.spec = spec;
  const int64_t d = spec.dim;
  Normal normal(spec.seed * 0x9E3779B97F4A7C15ULL + 0x5EED);
  p.eigenvalues.resize(d);
  for (int64_t i = 0; i < d; ++i)
    p.eigenvalues(i) =
        d == 1 ? spec.eig_max
               : spec.eig_min * std::pow(spec.eig_max / spec.eig_min,
                                         static_cast<double>(i) / static_cast<double>(d - 1));
  p.q = Eigen::HouseholderQR<Eigen::MatrixXd>(gaussian(normal, d, d)).householderQ();
  const Eigen::VectorXd u = gaussian(normal, d, 1);
  if (spec.kind == ProblemKind::kQuadratic) {
    p.rows = d;
    p.w_star = u;
    p.a = std::sqrt(static_cast<double>(d) / 2) * p.eigenvalues.cwiseSqrt().asDiagonal() *
          p.q.transpose();
    p.b = p.a * p.w_star;
    p.sigma2 = spec.sigma2;
    p.tau2 = spec.sigma2 * static_cast<double>(d) / (2 * p.eigenvalues.sum());
    p.smoothness = spec.eig_max;
    p.f_star = p.tau2;
    p.f_star_exact = true;
    return p;
  }
  // Logistic: the generator scaled so that x^T w* has standard deviation 2.
  const Eigen::MatrixXd cov = p.q * p.eigenvalues.asDiagonal() * p.q.transpose();
  p.w_star = 2 * u / std::sqrt(u.dot(cov * u));
  const Eigen::MatrixXd root =
      p.q * p.eigenvalues.cwiseSqrt().asDiagonal();  // x = Q Lambda^(1/2) z
  // The features' mean: a direction of its own generator, so that the rest is drawn as without it.
  Normal direction(spec.seed * 0x9E3779B97F4A7C15ULL + 0x3EA7);
  Eigen::VectorXd mu = gaussian(direction, d, 1);
  mu *= spec.feature_mean / mu.norm();
  auto draw = [&](int64_t n, Eigen::MatrixXd& x, Eigen::VectorXd& y) {
    x = (gaussian(normal, n, d) * root.transpose()).rowwise() + mu.transpose();
    y.resize(n);
    for (int64_t j = 0; j < n; ++j)
      y(j) = normal.uniform() < sigmoid(x.row(j).dot(p.w_star)) ? 1.0 : 0.0;
  };
  RV_CHECK(spec.samples >= 1 && spec.test_samples >= 1, "problem: no samples");
  draw(spec.samples, p.a, p.b);
  draw(spec.test_samples, p.test_x, p.test_y);
  const double n = static_cast<double>(spec.samples);
  Eigen::SelfAdjointEigenSolver<Eigen::MatrixXd> gram(p.a.transpose() * p.a / n,
                                                      Eigen::EigenvaluesOnly);
  p.smoothness = gram.eigenvalues().maxCoeff() / 4;
  p.sigma2 = p.a.rowwise().squaredNorm().mean();
  p.f_star = p.value(logistic_minimum(p.a, p.b, uniform_weights(p.a.rows())));
  p.f_star_exact = false;
  return p;
}

}  // namespace rv
