#include "planner/planner.h"
#include "core/error.h"
namespace rv {
Plan plan_exhaustive(const Scenario& scenario, const ModelDesc&) {
  throw ScenarioError(scenario.source, "planner.method", "exhaustive: being written");
}
}  // namespace rv
