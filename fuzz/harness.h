// Runs fuzz cases (mutator.h) in this process against the code that reads them, and counts what
// happened. A scenario case is parsed with its overrides, checked against the algorithm registry,
// its model built and, for pools of at most kMaxPlanNodes nodes, planned (the GA planners within
// kPlanEvaluations): what `ravnest plan` does before it prints. A frame case is decoded as a
// received header, both as the words that arrived and inside the room a receiver posts (the first
// words zeroed, as GlooTransport does).
//
// The contract checked: a case is accepted, or rejected with rv::ScenarioError naming the file (or
// --set) and a line or a key, or, for a frame, with rv::InputError naming the peer. Anything else
// (another exception, an error that would exit 1, a message that says not where) is a failure,
// kept with its case. A crash or a sanitizer report ends the process: run it under the sanitizers
// (scripts/fuzz-sanitized.sh) to catch those.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "fuzz/mutator.h"

namespace rv::fuzz {

constexpr int kMaxPlanNodes = 64;
constexpr double kHangCpuSeconds = 10;
// The GA planners' budget of scored individuals for a case that does not set
// planner.evaluations (the default is up to 20,000): the search reads no input after its first
// generations, and its later ones would be nine tenths of a case's time.
constexpr int64_t kPlanEvaluations = 500;

struct Failure {
  std::string kind;   // mutation class
  std::string what;   // why it counts as a failure, and the message
  std::string input;  // the case (a scenario's text cut to 2,000 bytes, or the frame's first words)
};

struct Counts {
  int64_t scenario_cases = 0, accepted = 0, planned = 0, rejected = 0;
  int64_t frame_cases = 0, frames_accepted = 0, frames_rejected = 0;
  int64_t failures = 0;
  std::vector<Failure> first_failures;           // the first 20
  std::map<std::string, int64_t> cases_by_kind;  // mutation class -> cases
  // A case's time is the CPU time of its thread: what the case itself spent, whatever else the
  // machine runs (a case waits on nothing; a hang is a loop). A case over kHangCpuSeconds counts
  // in `hangs`.
  double slowest_case_cpu_s = 0;  // of the slowest case
  int64_t hangs = 0;
  std::string slowest_kind;
  std::string slowest_input;                       // its case, as Failure::input
  std::vector<std::string>* rejections = nullptr;  // if set, every rejection's message is added

  void fail(Failure f);
};

// The shipped scenarios (source_dir/scenarios/*.toml) as seeds.
std::vector<std::string> shipped_seeds(const std::string& source_dir);
// The file name scenario cases are parsed as: in the seeds' folder, so that their relative paths
// (compute profiles) resolve as the seeds' own do. Nothing is written there.
std::string case_source(const std::string& source_dir);

// `source`: case_source().
void run_scenario_case(const ScenarioCase& c, const std::string& source, Counts& counts);
void run_frame_case(const FrameCase& c, Counts& counts);

// `scenarios` scenario cases from the shipped seeds and `frames` frame cases from `seed`.
Counts run_cases(const std::string& source_dir, int64_t scenarios, int64_t frames, uint64_t seed);

}  // namespace rv::fuzz
