// Datasets from Debian's packages, the synthetic set, and the sampler.
#include <ATen/ATen.h>

#include <algorithm>
#include <cstdint>
#include <set>

#include "catch.h"
#include "core/data/dataset.h"
#include "core/scenario/scenario.h"

using namespace rv;

TEST_CASE("Fashion-MNIST loads from dataset-fashion-mnist", "[data]") {
  DataSpec spec;
  spec.kind = DataKind::kFashionMnist;
  Dataset d = load_dataset(spec, 1);
  CHECK(d.train_size() == 60000);
  CHECK(d.test_size() == 10000);
  CHECK(d.train_x.sizes() == at::IntArrayRef({60000, 1, 28, 28}));
  CHECK(d.train_y.max().item<int64_t>() == 9);
  // Its 47 MB of images are gathered a row at a time: on 2 MiB-aligned memory (table_memory.h).
  CHECK(reinterpret_cast<uintptr_t>(d.train_x.data_ptr()) % (uintptr_t{2} << 20) == 0);
  at::Tensor x = d.inputs({0, 1, 2}, false);
  CHECK(x.scalar_type() == at::kFloat);
  CHECK(x.sizes() == at::IntArrayRef({3, 1, 28, 28}));
  // Normalised: the whole set has mean about 0 and std about 1.
  at::Tensor all = d.inputs(
      [] {
        std::vector<int64_t> r;
        for (int i = 0; i < 2000; ++i) r.push_back(i);
        return r;
      }(),
      false);
  CHECK(std::abs(all.mean().item<double>()) < 0.05);
  CHECK(std::abs(all.std().item<double>() - 1.0) < 0.05);
}

TEST_CASE("the 8x8 digits load from python3-sklearn with an 80/20 split", "[data]") {
  DataSpec spec;
  spec.kind = DataKind::kDigits;
  Dataset d = load_dataset(spec, 1);
  CHECK(d.train_size() + d.test_size() == 1797);
  CHECK(d.test_size() == 1797 / 5);
  CHECK(d.shape.sample_shape == std::vector<int64_t>{1, 8, 8});
  // The split depends on the seed, deterministically.
  Dataset e = load_dataset(spec, 1), f = load_dataset(spec, 2);
  CHECK(at::equal(d.test_y, e.test_y));
  CHECK_FALSE(at::equal(d.test_y, f.test_y));
}

TEST_CASE("synthetic data is generated from the seed and is learnable", "[data]") {
  DataSpec spec;
  spec.train_samples = 512;
  spec.test_samples = 128;
  Dataset a = load_dataset(spec, 5), b = load_dataset(spec, 5), c = load_dataset(spec, 6);
  CHECK(a.train_size() == 512);
  CHECK(at::equal(a.train_x, b.train_x));
  CHECK_FALSE(at::equal(a.train_x, c.train_x));
  CHECK(a.train_y.max().item<int64_t>() < spec.classes);
}

TEST_CASE("the sampler visits every sample once per epoch and reshuffles", "[data]") {
  Sampler s(100, 10, 3);
  CHECK(s.batches_per_epoch() == 10);
  std::set<int64_t> seen;
  for (int m = 0; m < 10; ++m)
    for (auto i : s.indices(m)) seen.insert(i);
  CHECK(seen.size() == 100);
  CHECK(s.indices(0) != s.indices(10));  // the next epoch is another permutation
  Sampler t(100, 10, 3);
  CHECK(t.indices(13) == s.indices(13));
}
