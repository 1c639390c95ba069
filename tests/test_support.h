// Helpers shared by the tests: small scenarios and a one-call way to prepare a run.
#pragma once

#include <string>
#include <vector>

#include "algo/algorithm.h"
#include "core/data/dataset.h"
#include "core/model/model.h"
#include "core/plan.h"
#include "core/scenario/scenario.h"
#include "planner/planner.h"

namespace rv::test {

// Everything a run needs, owned in one place (RunSpec points into it).
struct Prepared {
  Scenario scenario;
  ModelDesc model;
  Plan plan;
  Dataset data;
  RunSpec spec() const {
    return RunSpec{&scenario, &plan, &model,
                   scenario.sim.mode == SimMode::kNumeric ? &data : nullptr};
  }
};

inline Prepared prepare(const std::string& toml, const std::vector<std::string>& overrides = {},
                        bool load_data = true) {
  Prepared p;
  p.scenario = parse_scenario(toml, "test.toml", overrides);
  p.model = build_model(p.scenario);
  p.plan = make_plan(p.scenario, p.model);
  if (load_data && p.scenario.sim.mode == SimMode::kNumeric)
    p.data = load_dataset(p.scenario.data, p.scenario.seed);
  return p;
}

inline std::string source_path(const std::string& rel) {
  return std::string(RV_SOURCE_DIR) + "/" + rel;
}

}  // namespace rv::test
