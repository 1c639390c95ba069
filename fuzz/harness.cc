#include "fuzz/harness.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "algo/registry.h"
#include "core/error.h"
#include "core/model/model.h"
#include "core/scenario/scenario.h"
#include "exec/wall_env.h"
#include "planner/planner.h"
#include "real/wire_format.h"

namespace rv::fuzz {
namespace {

// "file:line", "file (--set)" or "--set": where a scenario message must point.
bool placed(const ScenarioError& e, const std::string& source) {
  const std::string& w = e.where();
  const bool file = w.rfind(source, 0) == 0 || w.rfind("--set", 0) == 0;
  const bool line_or_set = w.find(':') != std::string::npos || w.find("--set") != std::string::npos;
  return file && (line_or_set || !e.key().empty());
}

// The CPU time `f` takes on this thread.
template <class F>
double timed(F&& f) {
  const WallClock clock;
  const double t0 = clock.thread_cpu_now();
  f();
  return clock.thread_cpu_now() - t0;
}

std::string input_of(const ScenarioCase& c) {
  std::string input = c.text.substr(0, 2000);
  for (const auto& o : c.overrides) input += "\n--set " + o.substr(0, 300);
  return input;
}

}  // namespace

void Counts::fail(Failure f) {
  ++failures;
  if (first_failures.size() < 20) first_failures.push_back(std::move(f));
}

std::vector<std::string> shipped_seeds(const std::string& source_dir) {
  std::vector<std::string> seeds;
  for (const auto& e :
       std::filesystem::directory_iterator(std::filesystem::path(source_dir) / "scenarios")) {
    if (e.path().extension() != ".toml") continue;
    std::ifstream in(e.path());
    std::stringstream ss;
    ss << in.rdbuf();
    seeds.push_back(ss.str());
  }
  return seeds;
}

std::string case_source(const std::string& source_dir) {
  return (std::filesystem::path(source_dir) / "scenarios" / "fuzz-case.toml").string();
}

void run_scenario_case(const ScenarioCase& c, const std::string& source, Counts& counts) {
  ++counts.scenario_cases;
  ++counts.cases_by_kind[c.kind];
  auto failed = [&](const std::string& what) { counts.fail({c.kind, what, input_of(c)}); };
  const double s = timed([&] {
    try {
      Scenario sc = parse_scenario(c.text, source, c.overrides);
      allreduce_of(sc);
      resolve_algorithm_keys(sc);
      const ModelDesc model = build_model(sc);
      if (sc.planner.evaluations == 0) sc.planner.evaluations = kPlanEvaluations;
      if (sc.node_count() <= kMaxPlanNodes) {
        make_plan(sc, model);
        ++counts.planned;
      }
      ++counts.accepted;
    } catch (const ScenarioError& e) {
      if (placed(e, source)) {
        ++counts.rejected;
        if (counts.rejections) counts.rejections->push_back(e.what());
      } else
        failed(std::string("a message that says not where: ") + e.what());
    } catch (const InputError& e) {
      failed(std::string("rv::InputError without file, line and key: ") + e.what());
    } catch (const Error& e) {
      failed(std::string("bad input taken for a runtime failure (exit 1): ") + e.what());
    } catch (const std::exception& e) {
      failed(std::string("an exception outside rv::Error: ") + e.what());
    }
  });
  if (s > kHangCpuSeconds) ++counts.hangs;
  if (s > counts.slowest_case_cpu_s) {
    counts.slowest_case_cpu_s = s;
    counts.slowest_kind = c.kind;
    counts.slowest_input = input_of(c);
  }
}

void run_frame_case(const FrameCase& c, Counts& counts) {
  ++counts.frame_cases;
  ++counts.cases_by_kind[c.kind];
  // As it arrived, and in a receiver's room (wire::kHeaderWords, fields zeroed, the rest stale).
  std::vector<int64_t> room(static_cast<size_t>(wire::kHeaderWords), 0x7777);
  std::fill(room.begin(), room.begin() + wire::kWInlineData, 0);
  std::copy(c.words.begin(),
            c.words.begin() + static_cast<std::ptrdiff_t>(std::min(c.words.size(), room.size())),
            room.begin());
  for (int pass = 0; pass < 2; ++pass) {
    const int64_t* w = pass == 0 ? c.words.data() : room.data();
    const size_t n = pass == 0 ? c.words.size() : room.size();
    try {
      wire::decode_header(w, n, 3);
      ++counts.frames_accepted;
    } catch (const InputError& e) {
      if (std::string(e.what()).find("from peer 3") != std::string::npos)
        ++counts.frames_rejected;
      else
        counts.fail(
            {c.kind, std::string("a frame refused without naming the peer: ") + e.what(), ""});
    } catch (const std::exception& e) {
      counts.fail(
          {c.kind,
           std::string("a frame refused with an exception outside rv::InputError: ") + e.what(),
           ""});
    }
  }
}

Counts run_cases(const std::string& source_dir, int64_t scenarios, int64_t frames, uint64_t seed) {
  Counts counts;
  ScenarioMutator sm(shipped_seeds(source_dir), seed);
  const std::string source = case_source(source_dir);
  for (int64_t i = 0; i < scenarios; ++i) run_scenario_case(sm.next(), source, counts);
  FrameMutator fm(seed);
  for (int64_t i = 0; i < frames; ++i) run_frame_case(fm.next(), counts);
  return counts;
}

}  // namespace rv::fuzz
