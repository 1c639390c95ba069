#include "core/data/partition.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <algorithm>
#include <map>
#include <random>
#include <string>

#include "core/error.h"
#include "core/seed.h"

namespace rv {
namespace {

// A seeded permutation of [0, n) (the same on every node).
std::vector<int64_t> seeded_order(int64_t n, uint64_t seed) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  at::Tensor p = at::randperm(n, gen, at::kLong);
  return std::vector<int64_t>(p.data_ptr<int64_t>(), p.data_ptr<int64_t>() + n);
}

std::string too_small(const char* key, int64_t rows, int64_t batch) {
  return std::string(key) + ": a part would hold " + std::to_string(rows) +
         " training samples, fewer than a micro-batch (data.batch_size " + std::to_string(batch) +
         "): use more data.train_samples or fewer clusters";
}

std::vector<int64_t> by_class(const std::vector<int64_t>& labels, int64_t batch, int parts,
                              int part, uint64_t seed) {
  const auto n = static_cast<int64_t>(labels.size());
  if (n / parts < batch) throw InputError(too_small("data.partition", n / parts, batch));
  std::vector<int64_t> order = seeded_order(n, mix_seed(seed, 0xC1A55ULL));
  std::stable_sort(order.begin(), order.end(),
                   [&](int64_t a, int64_t b) { return labels[a] < labels[b]; });
  std::vector<int64_t> rows(order.begin() + n * part / parts,
                            order.begin() + n * (part + 1) / parts);
  std::sort(rows.begin(), rows.end());
  return rows;
}

// One Dirichlet draw's parts: for each class, its rows cut by shares drawn from `rng`.
std::vector<std::vector<int64_t>> dirichlet_draw(
    const std::map<int64_t, std::vector<int64_t>>& classes, double alpha, int parts,
    std::mt19937_64& rng) {
  std::vector<std::vector<int64_t>> out(static_cast<size_t>(parts));
  std::gamma_distribution<double> gamma(alpha, 1.0);
  for (const auto& [label, rows] : classes) {
    std::vector<double> w(static_cast<size_t>(parts));
    double sum = 0;
    for (double& x : w) sum += x = gamma(rng);
    const auto n = static_cast<double>(rows.size());
    size_t from = 0;
    double cumulative = 0;
    for (int j = 0; j < parts; ++j) {
      // All shares underflowing (tiny alpha) counts as the whole class to the first part.
      cumulative += sum > 0 ? w[static_cast<size_t>(j)] / sum : (j == 0 ? 1.0 : 0.0);
      const size_t to =
          j + 1 == parts ? rows.size()
                         : std::min(rows.size(), static_cast<size_t>(std::llround(cumulative * n)));
      for (size_t i = from; i < std::max(from, to); ++i)
        out[static_cast<size_t>(j)].push_back(rows[i]);
      from = std::max(from, to);
    }
  }
  return out;
}

std::vector<int64_t> dirichlet(const std::vector<int64_t>& labels, double alpha, int64_t batch,
                               int parts, int part, uint64_t seed) {
  std::map<int64_t, std::vector<int64_t>> classes;
  for (int64_t row : seeded_order(static_cast<int64_t>(labels.size()), mix_seed(seed, 0xD1C7ULL)))
    classes[labels[static_cast<size_t>(row)]].push_back(row);
  size_t smallest = 0;
  for (int draw = 0; draw < kMaxDirichletDraws; ++draw) {
    std::mt19937_64 rng(mix_seed(seed, 0xD1C7ULL + static_cast<uint64_t>(draw) + 1));
    std::vector<std::vector<int64_t>> all = dirichlet_draw(classes, alpha, parts, rng);
    smallest = all[0].size();
    for (const auto& p : all) smallest = std::min(smallest, p.size());
    if (static_cast<int64_t>(smallest) < batch) continue;
    std::vector<int64_t> rows = std::move(all[static_cast<size_t>(part)]);
    std::sort(rows.begin(), rows.end());
    return rows;
  }
  throw InputError(too_small("data.dirichlet_alpha", static_cast<int64_t>(smallest), batch) +
                   ", or a larger data.dirichlet_alpha (after " +
                   std::to_string(kMaxDirichletDraws) + " draws)");
}

}  // namespace

std::vector<int64_t> partition_by_labels(const std::vector<int64_t>& labels, const DataSpec& spec,
                                         int parts, int part, uint64_t seed) {
  RV_CHECK(parts >= 1 && part >= 0 && part < parts && !labels.empty(), "partition: bad arguments");
  switch (spec.partition) {
    case DataPartition::kIid:
      return shard(static_cast<int64_t>(labels.size()), parts, part, seed);
    case DataPartition::kByClass:
      return by_class(labels, spec.batch_size, parts, part, seed);
    case DataPartition::kDirichlet:
      return dirichlet(labels, spec.dirichlet_alpha, spec.batch_size, parts, part, seed);
  }
  throw Error("partition: unknown kind");
}

std::vector<int64_t> partition_rows(const Dataset& data, const DataSpec& spec, int parts, int part,
                                    uint64_t seed) {
  if (spec.partition == DataPartition::kIid) return shard(data.train_size(), parts, part, seed);
  if (data.shape.task != TaskKind::kClassification)
    throw InputError("data.partition: \"" + std::string(name_of(spec.partition)) +
                     "\" needs class labels, and the data has none");
  const at::Tensor y = data.train_y.contiguous().to(at::kLong);
  std::vector<int64_t> labels(y.data_ptr<int64_t>(), y.data_ptr<int64_t>() + y.numel());
  return partition_by_labels(labels, spec, parts, part, seed);
}

void check_data_partition(const Scenario& s) {
  if (s.data.partition == DataPartition::kIid) return;
  if (dataset_shape(s.data).task == TaskKind::kClassification) return;
  throw ScenarioError(s.where("data.partition"), "data.partition",
                      "\"" + std::string(name_of(s.data.partition)) +
                          "\" needs class labels: data.kind \"" + name_of(s.data.kind) +
                          "\" has none (it is not a classification task)");
}

}  // namespace rv
