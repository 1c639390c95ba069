#include "core/problem/objective.h"

#include <cmath>
#include <string>

#include "core/error.h"

namespace rv {
namespace {

double largest_eigenvalue(const Eigen::MatrixXd& symmetric) {
  Eigen::SelfAdjointEigenSolver<Eigen::MatrixXd> e(symmetric, Eigen::EigenvaluesOnly);
  return e.eigenvalues().maxCoeff();
}

// zeta^2 of objective.h for the logistic: the smaller of its two bounds. beta: row j's beta_cj in
// column c.
double logistic_dissimilarity(const Problem& p, const Eigen::MatrixXd& beta) {
  const Eigen::MatrixXd& x = p.a;
  const Eigen::Index n = x.rows(), d = x.cols(), clusters = beta.cols();
  const Eigen::VectorXd r0 = 0.5 * Eigen::VectorXd::Ones(n) - p.b;
  double centre2 = 0, spread = 0, simple2 = 0;  // ||Z^T r0||^2, lambda_max(Z^T Z), bound two
  const Eigen::VectorXd row_norm = x.rowwise().norm();
  for (Eigen::Index c = 0; c < clusters; ++c) {
    centre2 += (x.transpose() * beta.col(c).cwiseProduct(r0)).squaredNorm();
    const double s = beta.col(c).cwiseAbs().dot(row_norm);
    simple2 += s * s;
  }
  if (clusters * d <= kExactDissimilarityDim) {
    Eigen::MatrixXd z(n, clusters * d);
    for (Eigen::Index c = 0; c < clusters; ++c)
      z.middleCols(c * d, d) = beta.col(c).asDiagonal() * x;
    spread = largest_eigenvalue(z.transpose() * z);
  } else {
    for (Eigen::Index c = 0; c < clusters; ++c)
      spread += largest_eigenvalue(x.transpose() * beta.col(c).cwiseAbs2().asDiagonal() * x);
  }
  const double zeta =
      (std::sqrt(centre2) + std::sqrt(static_cast<double>(n) * std::max(0.0, spread)) / 2) /
      std::sqrt(static_cast<double>(clusters));
  return std::min(zeta * zeta, simple2 / static_cast<double>(clusters));
}

}  // namespace

double Objective::value(const Eigen::VectorXd& w) const {
  if (problem->spec.kind == ProblemKind::kQuadratic) return problem->value(w);
  return logistic_value(problem->a, problem->b, weight, w);
}

Eigen::VectorXd Objective::gradient(const Eigen::VectorXd& w) const {
  if (problem->spec.kind == ProblemKind::kQuadratic) return problem->gradient(w);
  return logistic_gradient(problem->a, problem->b, weight, w);
}

double Objective::micro_batch_noise(int64_t batch) const {
  RV_CHECK(batch >= 1, "objective: a micro-batch needs a sample");
  if (problem->spec.kind == ProblemKind::kQuadratic || shard_rows.empty())
    return sigma2 / static_cast<double>(batch);
  double worst = 0;
  for (size_t c = 0; c < shard_rows.size(); ++c) {
    const int64_t n = shard_rows[c], taken = std::min(batch, n);
    if (n <= 1 || taken >= n) continue;  // the whole shard: no noise
    worst = std::max(worst, shard_sigma2[c] * static_cast<double>(n - taken) /
                                (static_cast<double>(taken) * static_cast<double>(n - 1)));
  }
  return worst;
}

double Objective::delta() const { return value(Eigen::VectorXd::Zero(problem->spec.dim)) - f_star; }

Objective make_objective(const Problem& p, const std::vector<std::vector<int64_t>>& shards) {
  Objective o;
  o.problem = &p;
  o.clusters = std::max<int>(1, static_cast<int>(shards.size()));
  o.smoothness = p.smoothness;
  o.sigma2 = p.sigma2;
  o.f_star = p.f_star;
  if (p.spec.kind == ProblemKind::kQuadratic) return o;  // every cluster descends f itself

  const Eigen::Index n = p.a.rows();
  if (shards.size() <= 1) {
    o.weight = uniform_weights(n);
    o.shard_rows = {static_cast<int64_t>(n)};
    o.shard_sigma2 = {p.sigma2};
    return o;
  }
  const Eigen::Index clusters = o.clusters;
  o.weight = Eigen::VectorXd::Zero(n);
  Eigen::MatrixXd beta = Eigen::MatrixXd::Zero(n, clusters);
  std::vector<int64_t> owner(static_cast<size_t>(n), -1);
  o.smoothness = 0;
  o.sigma2 = 0;
  for (Eigen::Index c = 0; c < clusters; ++c) {
    const std::vector<int64_t>& rows = shards[static_cast<size_t>(c)];
    if (rows.empty()) throw InputError("objective: shard " + std::to_string(c) + " is empty");
    const double nc = static_cast<double>(rows.size());
    Eigen::MatrixXd xc(static_cast<Eigen::Index>(rows.size()), p.a.cols());
    for (size_t i = 0; i < rows.size(); ++i) {
      const int64_t j = rows[i];
      if (j < 0 || j >= n || owner[static_cast<size_t>(j)] >= 0)
        throw InputError("objective: shard " + std::to_string(c) + " names row " +
                         std::to_string(j) + ", out of range or in another shard");
      owner[static_cast<size_t>(j)] = c;
      xc.row(static_cast<Eigen::Index>(i)) = p.a.row(j);
      o.weight(j) = 1 / (static_cast<double>(clusters) * nc);
      beta(j, c) = 1 / nc;
    }
    o.smoothness = std::max(o.smoothness, largest_eigenvalue(xc.transpose() * xc / nc) / 4);
    o.shard_rows.push_back(static_cast<int64_t>(rows.size()));
    o.shard_sigma2.push_back(xc.rowwise().squaredNorm().mean());
    o.sigma2 = std::max(o.sigma2, o.shard_sigma2.back());
  }
  // beta_cj = [j in c] / n_c - weight_j: the second part is row j's weight in F.
  beta.colwise() -= o.weight;
  o.dissimilarity = logistic_dissimilarity(p, beta);
  o.same_objective = false;
  o.f_star = logistic_value(p.a, p.b, o.weight, logistic_minimum(p.a, p.b, o.weight));
  return o;
}

}  // namespace rv
