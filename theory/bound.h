// The convergence bounds of asynchronous block-structured SGD with C clusters averaged every H
// updates, derived in docs/theory.md: one function per formula there, with no slack added.
//
// Theorem 1, every cluster descends the same objective (same_objective; the quadratic):
//   condition  L eta + L² eta² (a T² + 4 κ²) <= 1
//   bound      (1/K) sum_k E||grad F(w̄_k)||²  <=  2 Δ / (eta K)  +  L eta sigma² / (C N)
//                                                 +  L² eta² (a T² + 4 κ) sigma² / N
// Theorem 2, the clusters' objectives f_c differ by at most ζ² (the dissimilarity: (1/C) sum_c
// ||grad f_c - grad F||² <= ζ² everywhere, F = (1/C) sum_c f_c), for C > 1:
//   ρ = 2 L² eta² (a T² + 4 κ²)
//   condition  ρ < 1 and L eta + a L² eta² T² / (1 - ρ) <= 1
//   bound      2 Δ / (eta K) + L eta sigma² / (C N)
//              + L² eta² [(a T² + 4 κ) sigma² / N + (2 a T² + 8 κ²) ζ²] / (1 - ρ)
// with a = 1, κ = 0 for one cluster (where the two theorems are the same); a = 2, κ = H - 1 for
// more.
//
// The bound's terms, as Bound names them: optimisation 2 Δ / (eta K); noise L eta sigma² / (C N);
// staleness the a T² sigma² part; drift the 4 κ sigma² part; dissimilarity the ζ² part (each with
// Theorem 2's 1 / (1 - ρ)).
//
// The paper's condition (Ravnest, arXiv 2401.01728, Theorem 1) is 2 eta L T² / (C N_m) <= 1 beside
// constants A1-A3 that it gives in no computable form; N_m is taken here as N, the samples of one
// cluster's update (the summary the project has does not define it).
//
// Units: Δ (F(w_0) - F*) in the loss's units, L in 1/(parameter unit)², sigma² the variance of one
// sample's stochastic gradient, ζ² a squared gradient norm, eta per update; the bound is a squared
// gradient norm. Pure functions, no I/O, torch-free.
#pragma once

#include <cstdint>
#include <string>

namespace rv {

struct BoundInputs {
  double gap = 0;              // Δ = F(w̄_0) - F*, >= 0
  double smoothness = 0;       // L > 0
  double sigma2 = 0;           // variance of one sample's stochastic gradient, >= 0
  int64_t batch = 1;           // N: samples per micro-batch, >= 1
  int64_t staleness = 0;       // T: the most updates a block's gradient lags, >= 0
  int64_t clusters = 1;        // C >= 1
  int64_t average_every = 1;   // H >= 1: updates between averagings (irrelevant for one cluster)
  double lr = 0;               // eta > 0
  int64_t updates = 1;         // K >= 1
  double dissimilarity = 0;    // ζ² >= 0 (Theorem 2)
  bool same_objective = true;  // every cluster descends F itself: Theorem 1 (ζ² is then ignored)
};

struct Bound {
  int theorem = 1;          // 1 or 2 (docs/theory.md)
  double optimisation = 0;  // 2 Δ / (eta K)
  double noise = 0;         // L eta sigma² / (C N)
  double staleness = 0;  // L² eta² a T² sigma² / N                    (/ (1 - ρ): Theorem 2)
  double drift = 0;      // L² eta² 4 κ sigma² / N                     (/ (1 - ρ): Theorem 2)
  double dissimilarity = 0;    // L² eta² (2 a T² + 8 κ²) ζ² / (1 - ρ)      (0: Theorem 1)
  double value = 0;            // their sum: the bound on the average squared gradient norm
                               // (infinite, as the delay terms, where Theorem 2's ρ >= 1)
  double condition = 0;        // the condition's left side: the bound holds where <= 1 (infinite
                               // where Theorem 2's ρ >= 1)
  bool holds = false;          // the condition holds
  double paper_condition = 0;  // 2 eta L T² / (C N): the paper's, <= 1 in its Theorem 1
};

// rv::InputError naming the first input out of range.
Bound convergence_bound(const BoundInputs& in);

// The step size that minimises the optimisation and noise terms, sqrt(2 Δ C N / (L sigma² K)),
// or, where that breaks the condition, the largest step that meets it. in.lr is ignored.
double best_lr(BoundInputs in);

// The largest step that meets the condition for these L, T, C, H and theorem (in closed form for
// Theorem 1; for Theorem 2 by bisection, to a relative 1e-12). in.lr is ignored.
double largest_lr(const BoundInputs& in);

// Theorem 1: the staleness up to which the delay terms (staleness and drift) stay at or below the
// other two at best_lr (the linear speedup regime of docs/theory.md): the largest T with a T² + 4
// κ <= sqrt(2 sigma² K / (L Δ C³ N)); -1 if even T = 0 is beyond it.
int64_t linear_speedup_staleness(const BoundInputs& in);

}  // namespace rv
