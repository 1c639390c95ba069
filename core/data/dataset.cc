#include "core/data/dataset.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <zlib.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <sstream>

#include "core/data/data_source.h"
#include "core/error.h"
#include "core/memory/table_memory.h"
#include "core/problem/problem.h"

namespace rv {
namespace {
at::Tensor take_rows(const at::Tensor& t, int64_t n) {
  return (n > 0 && n < t.size(0)) ? t.slice(0, 0, n).contiguous() : t;
}

}  // namespace

DatasetShape dataset_shape(const DataSpec& spec) { return data_source(spec.kind).shape(spec); }

std::string dataset_location(const DataSpec& spec) { return data_source(spec.kind).location(spec); }

at::Tensor Dataset::inputs(const std::vector<int64_t>& rows, bool test) const {
  const at::Tensor& src = test ? test_x : train_x;
  at::Tensor idx = at::tensor(rows, at::kLong);
  if (src.scalar_type() == at::kLong) return src.index_select(0, idx);  // token ids
  at::Tensor x = src.index_select(0, idx).to(at::kFloat);
  if (scale != 1.0) x.mul_(scale);
  if (mean != 0.0 || stddev != 1.0) x.sub_(mean).div_(stddev);
  return x;
}

at::Tensor Dataset::targets(const std::vector<int64_t>& rows, bool test) const {
  return (test ? test_y : train_y).index_select(0, at::tensor(rows, at::kLong));
}

Dataset load_dataset(const DataSpec& spec, uint64_t seed) {
  Dataset d;
  d.name = name_of(spec.kind);
  d.shape = dataset_shape(spec);
  data_source(spec.kind).load(spec, seed, d);
  d.train_x = take_rows(d.train_x, spec.train_samples);
  d.train_y = take_rows(d.train_y, spec.train_samples);
  d.test_x = take_rows(d.test_x, spec.test_samples);
  d.test_y = take_rows(d.test_y, spec.test_samples);
  if (d.train_size() < 1 || d.test_size() < 1)
    throw InputError(d.name + ": empty train or test set");
  // Gathered a random row at a time (table_memory.h).
  d.train_x = on_huge_pages(d.train_x);
  d.test_x = on_huge_pages(d.test_x);
  return d;
}

ProblemSpec problem_spec(const DataSpec& spec) {
  ProblemSpec p;
  p.kind = spec.kind == DataKind::kLogistic ? ProblemKind::kLogistic : ProblemKind::kQuadratic;
  p.dim = spec.features;
  p.eig_min = spec.eig_min;
  p.eig_max = spec.eig_max;
  p.sigma2 = spec.sigma2;
  p.feature_mean = spec.feature_mean;
  p.samples = spec.train_samples > 0 ? spec.train_samples : 4096;
  p.test_samples = spec.test_samples > 0 ? spec.test_samples : 1024;
  p.seed = spec.problem_seed;
  return p;
}

bool is_problem(const DataSpec& spec) { return is_problem(spec.kind); }

Sampler::Sampler(int64_t n, int64_t batch, uint64_t seed)
    : n_(n),
      batch_(std::min(batch, n)),
      per_epoch_(std::max<int64_t>(1, n / std::min(batch, n))),
      seed_(seed) {
  RV_CHECK(n > 0 && batch > 0, "sampler needs samples and a positive batch size");
}

Sampler::Sampler(std::vector<int64_t> rows, int64_t batch, uint64_t seed)
    : Sampler(static_cast<int64_t>(rows.size()), batch, seed) {
  rows_ = std::move(rows);
}

std::vector<int64_t> shard(int64_t n, int parts, int part, uint64_t seed) {
  RV_CHECK(parts >= 1 && part >= 0 && part < parts && n >= parts, "shard: bad arguments");
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed ^ 0x5A4D5ULL);
  at::Tensor p = at::randperm(n, gen, at::kLong);
  const int64_t lo = n * part / parts, hi = n * (part + 1) / parts;
  std::vector<int64_t> rows(p.data_ptr<int64_t>() + lo, p.data_ptr<int64_t>() + hi);
  std::sort(rows.begin(), rows.end());
  return rows;
}

std::vector<int64_t> Sampler::indices(int64_t micro_batch) {
  const int64_t epoch = micro_batch / per_epoch_;
  const int64_t pos = micro_batch % per_epoch_;
  if (epoch != cached_epoch_) {
    auto gen =
        at::make_generator<at::CPUGeneratorImpl>(seed_ * 1000003ULL + static_cast<uint64_t>(epoch));
    at::Tensor p = at::randperm(n_, gen, at::kLong);
    perm_.assign(p.data_ptr<int64_t>(), p.data_ptr<int64_t>() + n_);
    cached_epoch_ = epoch;
  }
  std::vector<int64_t> out(perm_.begin() + pos * batch_, perm_.begin() + (pos + 1) * batch_);
  if (!rows_.empty())
    for (auto& i : out) i = rows_[i];
  return out;
}

}  // namespace rv
