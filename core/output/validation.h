// ravnest validate's comparison of two runs of one scenario, a simulation and a real run: the
// figures of their summary.json side by side, the error of each, and one verdict. Two kinds of
// agreement are compared so, and named apart:
//  - executor agreement: the real run emulated (each span stretched to the model's compute time,
//    each message held by the network model, both dilated): the two executors agree, which says
//    nothing of the model's accuracy;
//  - model against hardware (cli/validate_hardware.h): the real run takes nothing from the model
//    (this host's compute, real TCP with the links' latency), and the simulation only this host's
//    calibration.
//
// The error of a positive figure is exp(|ln(sim / real)|) - 1: 0.1 means one run is 10% above the
// other, whichever it is, and a run twice as fast as the other is 1.0 off, as is one half as fast.
// Busy fractions and test accuracy, bounded quantities, are compared by their difference too.
//
// Targets (the issue that asked for validation, and papers/validation/): steady samples/s within
// 10% (25% at worst over a set of runs), every node's busy fraction within 0.1, final test
// accuracy within 2 points.
#pragma once

#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace rv {

constexpr double kTargetSamplesError = 0.10;
constexpr double kTargetBusyDifference = 0.10;
constexpr double kTargetAccuracyPoints = 2.0;
// Model against hardware: the host's speed within this of itself over the run (the calibration
// after the real run against the one before, on the run's own spans), or the run is flagged.
constexpr double kComputeTolerance = 0.10;
// A real compute span counts as late when it ran this much past its modeled time (and 1 ms, a
// scheduler's granularity): the host did not keep up there, and the dilation was too small. A run
// kept up when at most this share of its spans were late.
constexpr double kLateTolerance = 0.05;
constexpr double kLateSlack = 1e-3;  // seconds
inline bool is_late(double took_s, double modeled_s) {
  return took_s > modeled_s * (1 + kLateTolerance) + kLateSlack;
}

// exp(|ln(sim / real)|) - 1; 0 when both are 0; NaN when either is NaN, negative, or only one is 0.
double ratio_error(double sim, double real);

enum class Agreement { kExecutors, kHardware };
const char* agreement_name(Agreement a);  // "executors", "hardware"

// What the command knows beyond the two summaries.
struct ValidationContext {
  Agreement agreement = Agreement::kExecutors;
  double dilation = 1;
  nlohmann::json host;  // the dilation's inputs (cores, share, each node's host and modeled ms)
  // Executor agreement: the real run's compute spans that were late (kLateTolerance).
  double late_fraction = 0;
  // Model against hardware: the median real / modeled time of the real run's compute spans under
  // the calibration (1: they took what the model charges them). Reported, not judged: it holds the
  // model's own error on these spans (short spans after waits, ranks sharing cores) as well as
  // the host's drift.
  double compute_ratio = 1;
  // Model against hardware: the median, over the real run's compute spans, of their modeled time
  // under a calibration taken after the run over that under the one before (1: the host computed
  // at one speed throughout as far as two calibrations can tell), judged against
  // kComputeTolerance. NaN: not measured.
  double host_drift = std::numeric_limits<double>::quiet_NaN();
  bool same_plan = true;  // both runs' plan.json agree
  std::vector<std::string>
      notes;  // what the reader should know (e.g. a model the emulator approximates)
};

// validate.json: both summaries' figures side by side with their errors, per node too, and the
// verdict. `sim` and `real` are the two runs' summary.json.
nlohmann::json compare_runs(const nlohmann::json& sim, const nlohmann::json& real,
                            const ValidationContext& ctx);

// validate.md's section for one agreement (compare_runs' object): tables, verdict first. A
// "hardware" object with "measured": false gives its reason.
std::string validation_markdown(const nlohmann::json& v);

}  // namespace rv
