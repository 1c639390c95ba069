#include "planner/planner.h"
#include "core/error.h"
namespace rv {
Plan plan_ravnest_ga(const Scenario& scenario, const ModelDesc&) {
  throw ScenarioError(scenario.source, "planner.method", "ravnest-ga: being written");
}
}  // namespace rv
