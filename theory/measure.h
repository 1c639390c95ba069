// A run on a problem with known constants (data.kind = "quadratic" | "logistic", model.kind =
// "blocks") measured against the convergence bound (bound.h, docs/theory.md), after the run:
// from params.csv (every stage's parameters after each of its updates) the clusters' average
// w̄_k after update k is rebuilt, block by block, and its exact gradient norm ||grad f(w̄_k)||²
// computed with the problem (core/problem/problem.h) in double precision. Nothing of this is
// done, or charged, during the run.
//
// The objective is the one the clusters' average descends, F = (1/C) sum_c f_c over their shards of
// the training set (core/problem/objective.h: data.partition's shards, each cluster weighed
// alike), and Theorem 2 of docs/theory.md is the bound wherever the shards' objectives differ
// (the logistic with more than one cluster), with the dissimilarity ζ² computed from the problem
// and the shards; Theorem 1 where they cannot (the quadratic, or one cluster).
//
// The bound's inputs come from the run itself: L, sigma², Δ = F(0) - F* from the objective; eta =
// training.lr; C the plan's clusters; H = training.average_every; N = batch_size x the training
// micro-batches per update (gpipe accumulates several); T the largest staleness any update
// recorded (the delay the proof's assumption 4 needs); K the updates every stage of every cluster
// made. The bound covers plain SGD (no momentum, no weight decay): a run outside that, or outside
// the step-size condition, is flagged, and its bound is drawn for comparison only.
//
// A run of any other model (a neural network, whose constants are unknown) is measured with
// estimates instead (estimate.h, the largest over checkpoints of a plain-SGD replay of the run: L
// as the Hessian's largest |eigenvalue|, sigma² from the spread of micro-batch gradients; Δ =
// f(w_0)), and its measured side is each update's applied stochastic gradient (metrics.csv
// grad_norm2, summed over a cluster's stages, averaged over the clusters) less the noise it carries
// on average (sigma² / N, sigma² at update k interpolated between the estimate's checkpoints): an
// estimate of ||grad f||² at the clusters' weights. Such a measure is labelled an estimate and
// never "applies".
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "theory/bound.h"
#include "theory/estimate.h"

namespace rv {

struct TheoryMeasure {
  std::string run;              // the run folder
  std::string problem;          // the data kind: "quadratic" | "logistic", or a network's data
  bool estimated = false;       // L, sigma² and Δ are estimates (a network's run)
  ConstantEstimates estimates;  // where estimated
  double noise_removed = 0;     // where estimated: the mean of sigma²(k) / N taken off the norms
  BoundInputs inputs;           // as the run had them (updates = K)
  double sigma2_sample = 0;     // a problem's per-sample noise bound; inputs.sigma2 is N times the
                                // variance of an update's gradient (sampling without replacement)
  Bound bound;                  // at K
  int64_t staleness_limit = 0;  // what the configuration allows: micro-batches in flight - 1
  double staleness_mean = 0;    // over the run's updates
  std::vector<double> grad_norm2;    // ||grad f(w̄_k)||², k = 0 .. K - 1 (estimated: see above)
  std::vector<double> running_mean;  // (1 / (k + 1)) sum_{j <= k} grad_norm2[j]
  std::vector<double> bound_at;      // the bound with K = k + 1
  double measured = 0;               // running_mean at K: the bound's left side
  double ratio = 0;                  // measured / bound
  bool plain_sgd = true;             // sgd without momentum or weight decay
  bool applies = false;              // plain_sgd and the condition holds
  Bound without_drift;               // the same theorem with H = 1 (κ = 0)
  Bound without_dissimilarity;       // the same theorem with ζ² = 0
  std::vector<std::string> notes;    // why the bound does not apply, where it does not
  // The detection rule (docs/theory.md): the largest recorded staleness beyond staleness_limit;
  // where the bound applies, the running mean above the bound at some K. Empty: none.
  std::vector<std::string> violations;
  bool violated() const { return !violations.empty(); }
};

// Measures the run in folder `run` (scenario.toml, plan.json, metrics.csv; params.csv for a
// problem). rv::InputError naming the file and what is missing (a timing-mode run, which computes
// no gradients, is refused with a message that says so). A run that breaks its bound or its
// configuration is measured all the same: see TheoryMeasure::violations.
TheoryMeasure measure_run(const std::string& run);

// theory.json (the inputs, the bound's terms, measured and ratio, the verdict) and theory.csv
// (k, grad_norm2, running_mean, bound).
nlohmann::json theory_json(const TheoryMeasure& m);
std::string theory_csv(const TheoryMeasure& m);
// One line: "measured M, bound B (M/B = r); ..." with the theorem, this project's condition and the
// paper's beside it, and why the bound does not apply or what the run violates.
std::string theory_line(const TheoryMeasure& m);

}  // namespace rv
