// The fuzzer at scale (fuzz/): scenario mutations and malformed peer frames, in this process, and
// their counts: cases per mutation class, accepted, rejected with a placed message, failures (with
// their first cases), and the slowest case's wall time (a case over 10 s counts as a hang). Run it
// under AddressSanitizer and UndefinedBehaviorSanitizer with scripts/fuzz-sanitized.sh: a crash or
// a sanitizer report then ends it with the report.
//
//   bench_fuzz [--scenarios 100000] [--frames 100000] [--seed 1] [--out FILE]
#include <fstream>
#include <iostream>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "fuzz/harness.h"

int main(int argc, char** argv) {
  CLI::App app{"bench_fuzz: scenario and frame fuzzing, counts as JSON"};
  int64_t scenarios = 100000, frames = 100000;
  uint64_t seed = 1;
  std::string out;
  app.add_option("--scenarios", scenarios, "scenario cases");
  app.add_option("--frames", frames, "frame cases");
  app.add_option("--seed", seed, "the cases' seed");
  app.add_option("--out", out, "also write the figures here");
  std::string messages;
  app.add_option("--messages", messages, "write every rejection's message to this file, one per line");
  CLI11_PARSE(app, argc, argv);

  constexpr double kHangSeconds = 10;
  const auto seeds = rv::fuzz::shipped_seeds(RV_SOURCE_DIR);
  const std::string source = rv::fuzz::case_source(RV_SOURCE_DIR);
  rv::fuzz::Counts c;
  std::vector<std::string> rejections;
  if (!messages.empty()) c.rejections = &rejections;
  rv::fuzz::ScenarioMutator sm(seeds, seed);
  int64_t hangs = 0;
  for (int64_t i = 0; i < scenarios; ++i) {
    const double before = c.slowest_case_s;
    rv::fuzz::run_scenario_case(sm.next(), source, c);
    if (c.slowest_case_s > before && c.slowest_case_s > kHangSeconds) ++hangs;
    if ((i + 1) % 10000 == 0) std::cerr << "scenario cases: " << i + 1 << ", failures " << c.failures << "\n";
  }
  rv::fuzz::FrameMutator fm(seed);
  for (int64_t i = 0; i < frames; ++i) rv::fuzz::run_frame_case(fm.next(), c);

  nlohmann::json j;
  j["scenario_cases"] = c.scenario_cases;
  j["accepted"] = c.accepted;
  j["planned"] = c.planned;
  j["rejected_placed"] = c.rejected;
  j["frame_cases"] = c.frame_cases;
  j["frame_decodes_accepted"] = c.frames_accepted;
  j["frame_decodes_rejected"] = c.frames_rejected;
  j["failures"] = c.failures;
  j["cases_by_kind"] = c.cases_by_kind;
  j["slowest_case_s"] = c.slowest_case_s;
  j["slowest_kind"] = c.slowest_kind;
  j["slowest_input"] = c.slowest_input;
  j["cases_over_10_s"] = hangs;
#if defined(__SANITIZE_ADDRESS__)
  j["sanitizers"] = "address,undefined";
#else
  j["sanitizers"] = "none";
#endif
  for (const auto& f : c.first_failures)
    j["first_failures"].push_back({{"kind", f.kind}, {"what", f.what}, {"input", f.input}});
  std::cout << j.dump(2) << "\n";
  if (!messages.empty()) {
    std::ofstream m(messages);
    for (const auto& r : rejections) m << r.substr(0, 300) << "\n";
  }
  if (!out.empty()) std::ofstream(out) << j.dump(2) << "\n";
  return c.failures == 0 && hangs == 0 ? 0 : 1;
}
