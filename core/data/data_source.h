// Data kinds as units (data.kind; the enum DataKind in core/scenario/scenario.h): each kind is one
// class in core/data/data_sources.cc that knows, in one place, the shape of its samples (from the
// keys alone, without loading: the planner and the simulator's timing mode need no files), where
// its files are, and how it loads or generates its train and test sets. load_dataset
// (dataset.h) does what every kind shares around it (the first rows kept, huge pages).
//
// Adding a kind: its enum value and word (scenario.h), one class in data_sources.cc and its case
// in data_source().
//
// Thread-safety: the units are immutable; every method is safe from any thread.
#pragma once

#include <cstdint>
#include <string>

#include "core/data/dataset.h"

namespace rv {

class DataSource {
 public:
  virtual ~DataSource() = default;
  // The shape of one sample, the model's outputs per sample and the task. Throws rv::InputError
  // when the keys cannot make one (a text file that does not read).
  virtual DatasetShape shape(const DataSpec& spec) const = 0;
  // Where the kind's files are by default; "" for a kind generated from the seed.
  virtual const char* default_location() const { return ""; }
  // Fills d's train and test tensors and its normalisation (d.shape is set). Throws
  // rv::InputError naming a missing or damaged file.
  virtual void load(const DataSpec& spec, uint64_t seed, Dataset& d) const = 0;
  // data.path, or the default location.
  std::string location(const DataSpec& spec) const;
};

// The unit of a kind.
const DataSource& data_source(DataKind kind);

}  // namespace rv
