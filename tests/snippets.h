// Scenario fragments shared by the tests (plain text: no dependencies).
#pragma once

namespace rv::test {

// Appended to a scenario of 3 or more nodes: two clusters, a 2-stage pipeline (nodes 0, 1) and a
// single node (node 2).
constexpr const char* kTwoClusters = R"(
[planner]
method = "manual"
[[planner.cluster]]
nodes = [0, 1]
[[planner.cluster]]
nodes = [2]
)";

}  // namespace rv::test
