// Datasets: synthetic classes (generated from the seed), Fashion-MNIST (Debian's
// dataset-fashion-mnist, IDX files), the 8x8 digits (Debian's python3-sklearn, digits.csv.gz) and
// synthetic linear regression, with a fixed train/test split, and Sampler, which maps a
// micro-batch id to sample indices, reshuffling every epoch from the seed. Every node can compute
// any batch itself, so targets never travel. The data kind decides the task (task.h).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <vector>

#include "core/data/task.h"
#include "core/scenario/scenario.h"

namespace rv {

struct DatasetShape {
  std::vector<int64_t> sample_shape;  // {1, 28, 28}
  int64_t outputs = 0;                // the model's outputs per sample: classes, regression targets
  TaskKind task = TaskKind::kClassification;
};

// Shape of the scenario's data, without loading it.
DatasetShape dataset_shape(const DataSpec& spec);

// Where the dataset's files are (for messages and checks); empty for synthetic.
std::string dataset_location(const DataSpec& spec);

struct Dataset {
  std::string name;
  DatasetShape shape;
  at::Tensor train_x, test_x;  // N x sample_shape: uint8 (images), float32, or int64 (token ids)
  at::Tensor train_y, test_y;  // targets as the task takes them (int64 labels, float32 values)
  double scale = 1.0;          // x * scale, then (x - mean) / stddev gives the network's input
  double mean = 0.0, stddev = 1.0;

  int64_t train_size() const { return train_y.size(0); }
  int64_t test_size() const { return test_y.size(0); }
  const Task& task() const { return task_for(shape.task); }
  // The network's inputs for the given rows of train (or test) data: normalised float32, or the
  // int64 token ids as they are.
  at::Tensor inputs(const std::vector<int64_t>& rows, bool test) const;
  at::Tensor targets(const std::vector<int64_t>& rows, bool test) const;
};

// Loads (or generates) the scenario's dataset. Throws rv::InputError naming the missing or damaged
// file. train_samples/test_samples > 0 keep only the first rows.
Dataset load_dataset(const DataSpec& spec, uint64_t seed);

// Problems with known constants (core/problem/problem.h) as data kinds: whether the data is one,
// and its problem's spec (the problem's samples are the training set, data.train_samples of them,
// 4096 by default; the quadratic's noisy targets are data.train_samples, 65536 by default).
bool is_problem(const DataSpec& spec);
struct ProblemSpec;
ProblemSpec problem_spec(const DataSpec& spec);

// Micro-batch id -> sample indices. Epoch e is a permutation of [0, n) drawn from (seed, e);
// micro-batch m covers positions [(m mod E) * b, (m mod E) * b + b) of epoch m / E, E = n / b.
class Sampler {
 public:
  Sampler(int64_t n, int64_t batch, uint64_t seed);
  // Over the given rows only (a shard): indices() returns rows from `rows`.
  Sampler(std::vector<int64_t> rows, int64_t batch, uint64_t seed);
  std::vector<int64_t> indices(int64_t micro_batch);
  int64_t batches_per_epoch() const { return per_epoch_; }

 private:
  int64_t n_, batch_, per_epoch_;
  uint64_t seed_;
  int64_t cached_epoch_ = -1;
  std::vector<int64_t> perm_;
  std::vector<int64_t> rows_;  // empty: all of [0, n)
};

// Shard `part` of `parts` of [0, n): a seeded permutation cut into near-equal, disjoint parts.
std::vector<int64_t> shard(int64_t n, int parts, int part, uint64_t seed);

}  // namespace rv
