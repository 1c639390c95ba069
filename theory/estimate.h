// Empirical estimates of the convergence bound's constants (bound.h) for a model whose constants
// are unknown: a neural network. The constants of assumptions 1 and 3 hold along the whole path,
// and a network's curvature and gradient noise change along it (both usually grow early in
// training), so they are measured at checkpoints of a replay: plain SGD from the run's starting
// point w_0 (the model's seeded initial weights, the same in every cluster: StageModule initialises
// a layer from the seed and its index only) at the run's step size, on micro-batches of the run's
// size, for as many updates as the run made; at each checkpoint, on a fixed set of training
// micro-batches:
//
//   smoothness  |lambda| of the Hessian's eigenvalue of largest magnitude, by power iteration on
//               Hessian-vector products (the largest ||H v|| of a unit v it met) (central
//               differences of the gradient over the first hessian_micro_batches, the same dropout
//               masks on both sides): local curvature.
//   sigma2      a sample's gradient variance: batch x the mean squared distance of the micro-batch
//               gradients from their mean (unbiased over the micro-batches).
// The estimates are the largest over the checkpoints (the replay has no staleness and no
// averaging, so its path is the run's only approximately), and
//   gap         f(w_0) - f* with f* = 0, the least value of the loss (cross-entropy and squared
//               error are never negative): an upper bound on the true gap.
//
// Estimates, not constants: a bound drawn with them is a shape to compare a run with, never a
// guarantee (docs/theory.md). On a problem with known constants they can be checked: the
// quadratic's Hessian is constant, so `smoothness` is its L, and its gradient noise is sigma^2.
#pragma once

#include <cstdint>
#include <vector>

#include "core/data/dataset.h"
#include "core/model/model.h"
#include "core/scenario/scenario.h"

namespace rv {

struct EstimatePoint {
  int64_t update = 0;     // of the replay
  double smoothness = 0;  // at that point
  double sigma2 = 0;
  double loss = 0;         // mean over the micro-batches
  int64_t iterations = 0;  // power iterations made
  bool converged = false;  // the eigenvalue changed by under 1% in the last iteration (after 10)
};

struct ConstantEstimates {
  double smoothness = 0;      // L estimate (the largest over the points), 1 / (parameter unit)²
  double sigma2 = 0;          // one sample's gradient variance (the largest over the points)
  double gap = 0;             // f(w_0) (f* taken as 0)
  double loss0 = 0;           // the mean loss at w_0 over the micro-batches (== gap)
  int64_t batch = 0;          // samples per micro-batch (data.batch_size)
  int64_t micro_batches = 0;  // for sigma2 and the loss
  int64_t hessian_micro_batches = 0;  // for the Hessian-vector products
  int64_t replay_updates = 0;         // the replay's length
  bool converged = false;             // the power iteration at w_0 settled
  std::vector<EstimatePoint> points;  // the checkpoints, w_0 first; fewer if the replay diverged
};

struct EstimateOptions {
  int64_t micro_batches = 64;          // >= 2
  int64_t hessian_micro_batches = 16;  // >= 1, at most micro_batches (the first ones)
  int64_t max_iterations = 40;         // >= 1 (at least 10 are made where it allows)
  int64_t updates = 0;                 // the replay's length (the run's updates); 0: w_0 only
  int64_t checkpoints = 5;             // >= 1, evenly spaced over [0, updates]
  uint64_t seed = 0;  // the micro-batches and the start vector (mixed with the run's)
};

// rv::InputError for options out of range.
ConstantEstimates estimate_constants(const Scenario& s, const ModelDesc& model, const Dataset& data,
                                     const EstimateOptions& options = {});

}  // namespace rv
