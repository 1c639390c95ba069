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

// Three PCs of one kind on the digits with a small CNN: the CLI's and dedloc's real runs.
constexpr const char* kSmallDigitsCnn = R"(name = "small"
seed = 5
[model]
head = "linear"
kind = "cnn"
channels = [8, 16]
hidden = [32]
[data]
kind = "digits"
batch_size = 32
[training]
optimizer = "adam"
lr = 0.003
steps = 200
eval_every = 100
[real]
timeout_s = 20
[[devices]]
count = 3
up_mbps = 20
down_mbps = 50
latency_ms = 10
)";

// Four synthetic nodes with a pipeline's settings spelled out (micro_batches 6, max_in_flight 3,
// average_every 7, no weight stashing): what the registry's rules and the cost model are
// checked on.
constexpr const char* kRegistryPipeline = R"(name = "reg"
[model]
head = "linear"
hidden = [32]
[data]
kind = "synthetic"
[training]
micro_batches = 6
max_in_flight = 3
average_every = 7
weight_stashing = false
[[devices]]
count = 4
)";

}  // namespace rv::test
