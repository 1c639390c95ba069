// The fuzzer's cases as a test (fuzz/): scenario mutations (structure-aware, byte-level, near the
// input limits) and malformed peer frames, in this process. Every case must be accepted, or
// rejected with a message that says where (file or --set, and a line or key) and as bad input;
// a crash fails the test. bench/bench_fuzz runs 10^5 of each, under the sanitizers with
// scripts/fuzz-sanitized.sh.
#include <iostream>

#include "catch.h"
#include "fuzz/harness.h"

using namespace rv;

namespace {

void report(const fuzz::Counts& c) {
  for (const auto& f : c.first_failures)
    UNSCOPED_INFO("[" << f.kind << "] " << f.what << "\n--- case ---\n" << f.input.substr(0, 1500));
}

}  // namespace

TEST_CASE("2,000 mutated scenarios are accepted or refused with a placed message") {
  const fuzz::Counts c = fuzz::run_cases(RV_SOURCE_DIR, 2000, 0, 20261125);
  report(c);
  CHECK(c.failures == 0);
  CHECK(c.hangs == 0);
  CHECK(c.scenario_cases == 2000);
  CHECK(c.accepted + c.rejected == 2000);
  // The mutations reach past the parser: some cases are accepted and planned, and each class ran.
  CHECK(c.planned > 100);
  CHECK(c.rejected > 500);
  for (const char* kind : {"structure", "structure+set", "bytes", "limits"}) {
    INFO(kind);
    CHECK(c.cases_by_kind.count(kind) == 1);
  }
  std::cout << "scenario cases: " << c.scenario_cases << ", accepted " << c.accepted << " (planned "
            << c.planned << "), refused " << c.rejected << ", slowest " << c.slowest_case_cpu_s
            << " s of CPU\n";
}

TEST_CASE("5,000 malformed frames are decoded or refused naming the peer") {
  const fuzz::Counts c = fuzz::run_cases(RV_SOURCE_DIR, 0, 5000, 7);
  report(c);
  CHECK(c.failures == 0);
  CHECK(c.frame_cases == 5000);
  CHECK(c.frames_accepted + c.frames_rejected ==
        10000);  // each decoded twice (as sent, in a receiver's room)
  CHECK(c.frames_rejected > 2000);
  CHECK(c.frames_accepted > 500);  // edits of unused words leave valid headers
}
