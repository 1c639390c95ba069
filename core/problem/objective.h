// The objective a run descends on a problem with known constants (problem.h) when its C clusters
// train on shards of the training set (data.partition, core/data/partition.h) and their average
// weighs every cluster alike (each makes the same updates on micro-batches of the same size):
//
//   F(w) = (1/C) sum_c f_c(w),   f_c the mean loss over shard c,
//
// the training set's mean loss where the shards are equal in size, and a reweighting of it where
// they are not (a row of shard c weighs 1 / (C n_c)). With it, every constant of the bound for
// clusters whose objectives differ (docs/theory.md, Theorem 2), computed from the problem and the
// shards, never from a run:
//
//   smoothness     L for every f_c (hence for F): max_c lambda_max(X_c^T X_c / n_c) / 4
//   sigma2         a sample's gradient noise around its shard's gradient: at most
//                  max_c (1/n_c) sum_{j in c} ||x_j||^2 (|sigmoid - y| <= 1)
//   dissimilarity  zeta^2 >= sup_w (1/C) sum_c ||grad f_c(w) - grad F(w)||^2, below
//   f_star         inf F, by Newton's method
//
// The quadratic: every sample's X is A and its noise is fresh, so every cluster descends the
// population's f whatever its shard: F = f, zeta^2 = 0, same_objective (Theorem 1 applies).
//
// zeta^2 for the logistic. grad f_c(w) - grad F(w) = X^T B_c r(w) with B_c = diag(beta_c),
// beta_cj = [j in c] / n_c - 1 / (C n_c(j)) (c(j) the shard of row j), and r_j(w) = sigmoid(x_j^T
// w) - y_j, which lies in [-y_j, 1 - y_j] for every w. With Z = [B_1 X | ... | B_C X] (n x C d) the
// sum over c is ||Z^T r||^2; writing r = r0 + s with r0_j = 1/2 - y_j (the interval's centre) and
// |s_j| <= 1/2, so ||s|| <= sqrt(n) / 2:
//
//   zeta <= (||Z^T r0|| + sqrt(n lambda_max(Z^T Z)) / 2) / sqrt(C),
//
// lambda_max exact (a C d x C d eigenproblem) where C d <= kExactDissimilarityDim, else bounded
// by sum_c lambda_max(X^T B_c^2 X). A second bound, ||X^T B_c r|| <= sum_j |beta_cj| ||x_j||,
// holds too; the smaller is used. Both hold for every w, and neither looks at a run.
#pragma once

#include <Eigen/Dense>
#include <cstdint>
#include <vector>

#include "core/problem/problem.h"

namespace rv {

constexpr int64_t kExactDissimilarityDim = 1024;

struct Objective {
  const Problem* problem = nullptr;  // not owned; outlives the objective
  int clusters = 1;                  // C
  Eigen::VectorXd weight;            // logistic: each training row's weight in F (sum 1)
  double smoothness = 0;             // L
  double sigma2 = 0;                 // a sample's gradient noise (a bound)
  double dissimilarity = 0;          // zeta^2 (a bound; 0 for one cluster or the quadratic)
  double f_star = 0;                 // inf F
  bool same_objective = true;        // every cluster's objective is F (zeta = 0 exactly)

  std::vector<int64_t> shard_rows;   // logistic: n_c, each shard's rows (one entry: every row)
  std::vector<double> shard_sigma2;  // logistic: (1/n_c) sum_{j in c} ||x_j||^2, each shard's

  // The variance of a micro-batch's gradient of `batch` samples, for the bound's sigma^2 / N. The
  // quadratic's noise is fresh in every sample: sigma2 / batch. A logistic shard is sampled without
  // replacement (core/data/dataset.h Sampler, a permutation per epoch cut into micro-batches, at
  // most n_c samples each): at most max_c sigma_c^2 (n_c - N_c) / (N_c (n_c - 1)) with N_c =
  // min(batch, n_c), the finite-population correction; 0 where every micro-batch is its whole
  // shard (the gradient is exact).
  double micro_batch_noise(int64_t batch) const;

  double value(const Eigen::VectorXd& w) const;              // F(w)
  Eigen::VectorXd gradient(const Eigen::VectorXd& w) const;  // grad F(w), exact
  double delta() const;                                      // F(w_0) - F*, w_0 = 0
};

// The objective of `problem` over `shards` (one per cluster, rows of the training set; one shard
// of every row, or none, for a single cluster). rv::InputError for an empty shard or a row out of
// range.
Objective make_objective(const Problem& problem, const std::vector<std::vector<int64_t>>& shards);

}  // namespace rv
