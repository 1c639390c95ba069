// The steady state of a run: the one window the project measures steady throughput over
// (summary.json's steady_samples_per_s, time_per_step_s and steady_window; ravnest validate; the
// report's measured-against-predicted rows), and the time in it that went to evaluations.
//
// Each cluster has its own window, which spans its whole periods and leaves out only its warm-up:
//   averaging rounds  a run with two or more cross-cluster averaging rounds (kAverage spans, by
//                     round): from the end of the cluster's first round to the end of its last,
//                     each round's end being the latest end of the cluster's spans in it;
//                     (A run that averaged once has no steady state: it has no whole period,
//                     and its steps would leave the averaging out.)
//   optimizer steps   otherwise, two or more optimizer steps (kUpdate, by the version they
//                     made): from the end of step 1 on every node of the cluster that made it (the
//                     pipeline has filled: its first stage has had its first micro-batch back) to
//                     the end of its last step. A synchronous pipeline's step is its flush, an
//                     asynchronous one's a micro-batch.
// A cluster's training micro-batches count where their last stage's backward ended in its
// (begin, end]. Clusters' windows differ where their rings end rounds at different times (each
// ring waits only for its own members): one window for all would cut some clusters' periods in
// two. A cluster's next period cannot finish a micro-batch before every stage of it has ended its
// round, so each window holds whole periods. The run's rate is the sum of its clusters' rates.
//
// Evaluations pause training. Each evaluation of a cluster runs from the first start of its
// evaluation forwards (kForward with micro_batch < 0) after that cluster's previous kEval to its
// kEval; a cluster's `evaluation` is the length of these intervals' union inside its window. The
// training rate counts the micro-batches completed outside them over the window less their time
// (what a pipeline finishes during an evaluation was mostly done before it); the rate with
// evaluations, every micro-batch over the whole window. Against the same pipeline without
// evaluations in tests/test_steady_state.cc.
#pragma once

#include <cstdint>
#include <vector>

#include "core/output/metrics.h"
#include "core/plan.h"
#include "core/units.h"

namespace rv {

struct SteadyState {
  enum class Basis { kNone, kAveragingRounds, kOptimizerSteps };
  // One cluster's window and what happened in it.
  struct Window {
    int cluster = -1;
    Seconds begin = 0, end = 0;
    int64_t periods = 0;                 // whole rounds or steps in (begin, end]
    int64_t micro_batches = 0;           // training micro-batches completed in (begin, end]
    int64_t training_micro_batches = 0;  // ... of which outside every evaluation
    Seconds evaluation = 0;              // of (begin, end], spent evaluating
    int64_t evaluations = 0;             // evaluations that ended in (begin, end]
    int64_t evaluation_batches = 0;      // evaluation micro-batches per evaluation (the most)

    Seconds length() const { return end - begin; }
    Seconds training() const { return length() - evaluation; }
  };

  Basis basis = Basis::kNone;    // kNone: too short a run (no cluster has two rounds or steps)
  std::vector<Window> clusters;  // each cluster with two or more period ends, by cluster
  // Over the clusters' windows: the earliest begin and the latest end; the most periods; the
  // micro-batches summed; the mean time spent evaluating; the most evaluations and batches.
  Seconds begin = 0, end = 0;
  int64_t periods = 0;
  int64_t micro_batches = 0;
  int64_t training_micro_batches = 0;
  Seconds evaluation = 0;
  int64_t evaluations = 0;
  int64_t evaluation_batches = 0;

  bool empty() const { return basis == Basis::kNone || micro_batches == 0 || end <= begin; }
  // Samples per second of training alone, and with the evaluations' pauses, summed over the
  // clusters' windows; 0 when empty.
  double training_rate(int64_t batch) const;
  double rate_with_evaluations(int64_t batch) const;
  // The window of `cluster`, or nullptr where it has none.
  const Window* of(int cluster) const;
};

// Whether `e` finishes a training micro-batch of `plan`: its last stage's backward, by the
// event's own cluster and stage (under churn a spare may hold the stage).
bool finishes_micro_batch(const Plan& plan, const Event& e);

// The basis's name in summary.json: "averaging rounds", "optimizer steps", "none".
const char* basis_name(SteadyState::Basis b);

// The steady state of `events`, a run of `plan` (its clusters' last stages).
SteadyState steady_state(const Plan& plan, const std::vector<Event>& events);

}  // namespace rv
