// Planner: pure functions from a device pool and a model profile to a Plan. No I/O.
//
// Methods (scenario key planner.method):
//   manual: one cluster of every node, in pool order; layers cut into contiguous stages whose
//           modeled memory is in proportion to each node's RAM, or as planner.stage_layers says.
// An infeasible pool (the model does not fit) is a ScenarioError that says what is missing.
#pragma once

#include "core/model.h"
#include "core/plan.h"
#include "core/scenario.h"

namespace rv {

Plan make_plan(const Scenario& scenario, const ModelDesc& model);

// The manual planner (exposed for tests).
Plan plan_manual(const Scenario& scenario, const ModelDesc& model);

}  // namespace rv
