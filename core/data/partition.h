// How a training set is split between the clusters (data.partition): every cluster (and every
// replica of a whole-model algorithm) trains on its own part, drawn by every node alike from the
// scenario's seed, so that no sample list travels.
//
//   iid        a seeded permutation of the rows cut in near-equal parts (shard(), dataset.h)
//   by-class   the rows sorted by class (ties in a seeded order), cut in near-equal parts: with
//              fewer parts than classes each part holds about classes / parts of them
//   dirichlet  for each class, shares of the parts drawn from Dirichlet(alpha) (independent Gamma
//              draws, normalised), and the class's rows (in a seeded order) cut by those shares;
//              drawn again (at most kMaxDirichletDraws times) until every part has a batch
//
// The parts are disjoint and together hold every row. by-class and dirichlet need class labels
// (a classification task); check_data_partition says so at the key.
#pragma once

#include <cstdint>
#include <vector>

#include "core/data/dataset.h"
#include "core/scenario/scenario.h"

namespace rv {

constexpr int kMaxDirichletDraws = 100;

// The rows of part `part` of `parts` of `data`'s training set, sorted, as `spec` (data.partition,
// data.dirichlet_alpha) splits it from `seed`. Throws rv::InputError naming data.partition or
// data.dirichlet_alpha when the data has no class labels, or a part would hold fewer than
// spec.batch_size rows.
std::vector<int64_t> partition_rows(const Dataset& data, const DataSpec& spec, int parts, int part,
                                    uint64_t seed);

// The same from the training labels alone (int64, one per row), for a classification set.
std::vector<int64_t> partition_by_labels(const std::vector<int64_t>& labels, const DataSpec& spec,
                                         int parts, int part, uint64_t seed);

// A scenario whose data.partition needs class labels and whose data has none (its task is not
// classification): rv::ScenarioError at data.partition.
void check_data_partition(const Scenario& s);

}  // namespace rv
