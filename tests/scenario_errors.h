// Scenario snippets and error capture shared by the scenario tests (no LibTorch).
#pragma once

#include <string>
#include <vector>

#include "catch.h"
#include "core/error.h"
#include "core/scenario/scenario.h"

namespace rv::test {

// The smallest valid scenario: every other key defaulted.
constexpr const char* kMinimal = "name = \"mini\"\n[[devices]]\ncount = 2\n";

// Parses `text` and returns the ScenarioError message (fails the test if none is thrown).
inline std::string error_of(const std::string& text,
                            const std::vector<std::string>& overrides = {}) {
  try {
    parse_scenario(text, "bad.toml", overrides);
  } catch (const ScenarioError& e) {
    return e.what();
  }
  FAIL("no ScenarioError for:\n" << text);
  return "";
}

}  // namespace rv::test
