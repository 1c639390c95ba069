// Problems with known constants (data.kind = "quadratic" | "logistic"), for measuring runs against
// the convergence bound (docs/theory.md, theory/bound.h): everything the bound needs (the
// smoothness L, f*, the gradient noise sigma^2, f(w_0) - f*) is computed here, exactly or as a
// proven upper bound, and so is the exact full gradient at any point. Computed with Eigen in double
// precision, deterministic from the problem's seed. Torch-free: the dataset (core/data) turns a
// problem into samples, the model kind "blocks" (core/model) into an additive block model, and the
// theory (theory/measure.h) evaluates logged parameters with it.
//
// Both are fitted by the additive block model: a sample is a matrix X of m rows and d feature
// columns, the model's prediction is X w (m values), and w = (w_1, ..., w_S) in blocks of columns,
// so stage i adds X[:, block i] w_i to a running sum it passes on.
//
//   quadratic  f(w) = E (1/d) ||A w - b - e||^2 with A = sqrt(d/2) Lambda^(1/2) Q^T (d x d, m = d:
//              every sample has the same X = A), b = A w*, and noise e ~ N(0, tau^2 I_d) fresh in
//              every sample's targets. Hessian H = Q Lambda Q^T (eigenvalues geometric from
//              eig_min to eig_max), so L = eig_max exactly; f* = tau^2 at w*; grad f(w) = H (w -
//              w*). A sample's gradient is grad f + n with n = -(2/d) A^T e, E||n||^2 = 2 tau^2
//              tr(Lambda) / d =: sigma^2 (chosen; tau^2 follows), independent of w: the bound's
//              assumption exactly. The loss is the regression task's mean squared error.
//   logistic   n samples x_j = mu + Q Lambda^(1/2) z_j (z ~ N(0, I), m = 1; mu of length
//              feature_mean in a seeded direction, 0 by default), labels y_j ~ Bernoulli(
//              sigmoid(x_j^T w*)) with x^T w* of standard deviation 2 around its mean; f(w) = (1/n)
//              sum_j log(1 + exp(x_j^T w)) - y_j x_j^T w over the training set (the classification
//              task on the logits (0, x^T w)). L <= lambda_max(X^T X / n) / 4 (the bound used); f*
//              by Newton's method; a sample's gradient differs from grad f by at most sigma^2 =
//              (1/n) sum_j ||x_j||^2 in mean square (|sigmoid - y| <= 1).
// w_0 = 0 for both (the block layers start at zero).
#pragma once

#include <Eigen/Dense>
#include <cstdint>
#include <string>

namespace rv {

// The problem's family: data.kind quadratic or logistic.
enum class ProblemKind { kQuadratic, kLogistic };

struct ProblemSpec {
  ProblemKind kind = ProblemKind::kQuadratic;
  int64_t dim = 32;         // d, the parameters
  double eig_min = 0.1;     // the spectrum of the Hessian (quadratic) or the features' covariance
  double eig_max = 1.0;     // (logistic), geometric in between
  double sigma2 = 1.0;      // quadratic: a sample's gradient noise, E||n||^2
  double feature_mean = 0;  // logistic: ||mu||, the features' mean (a seeded direction)
  int64_t samples = 4096;   // logistic: training samples
  int64_t test_samples = 1024;
  uint64_t seed = 1;  // the problem (Q, w*, the samples); not the run's noise
};

struct Problem {
  ProblemSpec spec;
  int64_t rows = 1;             // m: rows per sample (the running sum's length)
  Eigen::VectorXd eigenvalues;  // Lambda, ascending
  Eigen::MatrixXd q;            // Q, orthogonal d x d
  Eigen::VectorXd w_star;       // the minimiser (quadratic) or the labels' generator (logistic)
  Eigen::MatrixXd a;            // quadratic: A (d x d); logistic: the training features X (n x d)
  Eigen::VectorXd b;            // quadratic: A w*; logistic: the training labels y (0 or 1)
  Eigen::MatrixXd test_x;       // logistic: test features
  Eigen::VectorXd test_y;       //           and labels
  double tau2 = 0;              // quadratic: the targets' noise variance
  double smoothness = 0;        // L (exact for the quadratic, an upper bound for the logistic)
  double sigma2 = 0;            // a sample's gradient noise (exact, or an upper bound)
  double f_star = 0;            // inf f
  bool f_star_exact = true;     // false: to Newton's tolerance

  double value(const Eigen::VectorXd& w) const;              // f(w)
  Eigen::VectorXd gradient(const Eigen::VectorXd& w) const;  // grad f(w), exact
  double delta() const { return value(Eigen::VectorXd::Zero(spec.dim)) - f_star; }  // f(w_0) - f*
};

// The problem of a spec. rv::InputError for a spectrum out of order.
Problem make_problem(const ProblemSpec& spec);

// The logistic loss over the rows of x (labels y, 0 or 1), row j weighted by weight(j) (weights
// >= 0 that sum to 1): sum_j weight_j (log(1 + exp(x_j^T w)) - y_j x_j^T w), its exact gradient,
// and its minimiser by damped Newton steps (to a gradient norm of 1e-13, or where no step
// descends).
Eigen::VectorXd uniform_weights(Eigen::Index n);  // 1 / n each
double logistic_value(const Eigen::MatrixXd& x, const Eigen::VectorXd& y,
                      const Eigen::VectorXd& weight, const Eigen::VectorXd& w);
Eigen::VectorXd logistic_gradient(const Eigen::MatrixXd& x, const Eigen::VectorXd& y,
                                  const Eigen::VectorXd& weight, const Eigen::VectorXd& w);
Eigen::VectorXd logistic_minimum(const Eigen::MatrixXd& x, const Eigen::VectorXd& y,
                                 const Eigen::VectorXd& weight);

}  // namespace rv
