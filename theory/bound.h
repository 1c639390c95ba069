// The convergence bound of asynchronous block-structured SGD with C clusters averaged every H
// updates, derived in docs/theory.md: one function per formula there, with no slack added.
//
//   condition  L eta + L² eta² (a T² + 4 κ²) <= 1
//   bound      (1/K) sum_k E||grad f(w̄_k)||²  <=  2 Δ / (eta K)  +  L eta sigma² / (C N)
//                                                 +  L² eta² (a T² + 4 κ) sigma² / N
//   with a = 1, κ = 0 for one cluster; a = 2, κ = H - 1 for more.
//
// Units: Δ (f(w_0) - f*) in the loss's units, L in 1/(parameter unit)², sigma² the variance of one
// sample's stochastic gradient, eta per update; the bound is a squared gradient norm. Pure
// functions, no I/O, torch-free.
#pragma once

#include <cstdint>
#include <string>

namespace rv {

struct BoundInputs {
  double gap = 0;             // Δ = f(w̄_0) - f*, >= 0
  double smoothness = 0;      // L > 0
  double sigma2 = 0;          // variance of one sample's stochastic gradient, >= 0
  int64_t batch = 1;          // N: samples per micro-batch, >= 1
  int64_t staleness = 0;      // T: the most updates a block's gradient lags, >= 0
  int64_t clusters = 1;       // C >= 1
  int64_t average_every = 1;  // H >= 1: updates between averagings (irrelevant for one cluster)
  double lr = 0;              // eta > 0
  int64_t updates = 1;        // K >= 1
};

struct Bound {
  double optimisation = 0;  // 2 Δ / (eta K)
  double noise = 0;         // L eta sigma² / (C N)
  double delay = 0;         // L² eta² (a T² + 4 κ) sigma² / N
  double value = 0;         // their sum: the bound on the average squared gradient norm
  double condition = 0;     // L eta + L² eta² (a T² + 4 κ²): the bound holds where <= 1
  bool holds = false;       // condition <= 1
};

// rv::InputError naming the first input out of range.
Bound convergence_bound(const BoundInputs& in);

// The step size that minimises the optimisation and noise terms, sqrt(2 Δ C N / (L sigma² K)),
// or, where that breaks the condition, the largest step that meets it. in.lr is ignored.
double best_lr(BoundInputs in);

// The largest step that meets the condition for these L, T, C and H.
double largest_lr(const BoundInputs& in);

// The staleness up to which the delay term stays at or below the other two at best_lr (the linear
// speedup regime of docs/theory.md): the largest T with a T² + 4 κ <= sqrt(2 sigma² K / (L Δ C³
// N)); -1 if even T = 0 is beyond it.
int64_t linear_speedup_staleness(const BoundInputs& in);

}  // namespace rv
