// Faults injected into a run for negative controls: tests that show a check fails where the
// system is broken (docs/theory.md, "Negative controls"). Read from the environment variable
// RAVNEST_FAULT, never from a scenario: no scenario can ask for them, and a real run's node
// processes inherit them from the launcher. A comma-separated list of:
//
//   allreduce-own   every blocking averaging (Averager::average) hands each node back its own
//                   values: a silently broken all-reduce that still moves every byte
//   in-flight+N     pipelines admit N micro-batches more than the configuration allows (N >= 1),
//                   so updates apply gradients of older weights than it permits; the records of
//                   each update's staleness stay true
//
// Unset or empty: no fault.
#pragma once

#include <cstdint>
#include <string>

namespace rv {

constexpr const char* kFaultVariable = "RAVNEST_FAULT";

struct InjectedFault {
  bool allreduce_own = false;
  int64_t extra_in_flight = 0;
};

// The faults `text` names. rv::InputError naming RAVNEST_FAULT and the item it does not know.
InjectedFault parse_fault(const std::string& text);

// This process's faults, read from RAVNEST_FAULT once (rv::InputError as parse_fault's, at the
// first call).
const InjectedFault& injected_fault();

}  // namespace rv
