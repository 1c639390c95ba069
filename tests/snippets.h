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

// The model and data most small tests train: an MLP of two hidden layers of 64 units on the 8x8
// digits, micro-batches of 32, seed 3 (follows a scenario's name line).
constexpr const char* kDigitsMlp = R"(seed = 3
[model]
head = "linear"
kind = "mlp"
hidden = [64, 64]
[data]
kind = "digits"
batch_size = 32
)";

}  // namespace rv::test
