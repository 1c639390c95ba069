#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <zlib.h>

#include <cmath>
#include <cstring>
#include <sstream>

#include "core/data/data_source.h"
#include "core/data/tokens.h"
#include "core/error.h"
#include "core/problem/problem.h"

namespace rv {
namespace {

const char* kFashionDir = "/usr/share/datasets/fashion-mnist";
const char* kDigitsFile = "/usr/lib/python3/dist-packages/sklearn/datasets/data/digits.csv.gz";
// Every Debian system has it (base-files): 35,000 characters of English.
const char* kTextFile = "/usr/share/common-licenses/GPL-3";

std::string read_gz(const std::string& path) {
  gzFile f = gzopen(path.c_str(), "rb");
  if (!f) throw InputError(path + ": cannot open (is the dataset installed?)");
  std::string out;
  char buf[1 << 16];
  int n;
  while ((n = gzread(f, buf, sizeof buf)) > 0) out.append(buf, static_cast<size_t>(n));
  int err = 0;
  const char* msg = gzerror(f, &err);
  std::string what = (n < 0 && msg) ? msg : "";
  gzclose(f);
  if (n < 0) throw InputError(path + ": damaged gzip data: " + what);
  return out;
}

uint32_t be32(const std::string& s, size_t off) {
  auto b = [&](size_t i) { return static_cast<uint32_t>(static_cast<unsigned char>(s[off + i])); };
  return (b(0) << 24) | (b(1) << 16) | (b(2) << 8) | b(3);
}

// IDX format: magic (0x0000 08 ndims), big-endian dims, then uint8 data.
at::Tensor read_idx(const std::string& path, int expect_dims) {
  std::string s = read_gz(path);
  if (s.size() < 4 || be32(s, 0) != (0x00000800u | static_cast<uint32_t>(expect_dims)))
    throw InputError(path + ": not an IDX file of " + std::to_string(expect_dims) + " dimensions");
  std::vector<int64_t> dims;
  size_t off = 4;
  int64_t total = 1;
  for (int i = 0; i < expect_dims; ++i) {
    if (s.size() < off + 4) throw InputError(path + ": truncated IDX header");
    dims.push_back(be32(s, off));
    total *= dims.back();
    off += 4;
  }
  if (s.size() != off + static_cast<size_t>(total))
    throw InputError(path + ": IDX data size does not match its header");
  at::Tensor t = at::empty(dims, at::kByte);
  std::memcpy(t.data_ptr<uint8_t>(), s.data() + off, static_cast<size_t>(total));
  return t;
}

// Fashion-MNIST (Debian's dataset-fashion-mnist): IDX files of 28x28 images in 10 classes.
class FashionMnist final : public DataSource {
 public:
  DatasetShape shape(const DataSpec&) const override { return {{1, 28, 28}, 10}; }
  const char* default_location() const override { return kFashionDir; }
  void load(const DataSpec& spec, [[maybe_unused]] uint64_t seed, Dataset& d) const override {
    const std::string dir = location(spec);
    d.train_x = read_idx(dir + "/train-images-idx3-ubyte.gz", 3).unsqueeze(1);
    d.train_y = read_idx(dir + "/train-labels-idx1-ubyte.gz", 1).to(at::kLong);
    d.test_x = read_idx(dir + "/t10k-images-idx3-ubyte.gz", 3).unsqueeze(1);
    d.test_y = read_idx(dir + "/t10k-labels-idx1-ubyte.gz", 1).to(at::kLong);
    if (d.train_x.size(0) != d.train_y.size(0) || d.test_x.size(0) != d.test_y.size(0))
      throw InputError(dir + ": image and label counts differ");
    d.scale = 1.0 / 255.0;
    d.mean = 0.2860;
    d.stddev = 0.3530;
  }
};

// The 8x8 digits of scikit-learn (Debian's python3-sklearn): a CSV of 1797 rows.
class Digits final : public DataSource {
 public:
  DatasetShape shape(const DataSpec&) const override { return {{1, 8, 8}, 10}; }
  const char* default_location() const override { return kDigitsFile; }
  void load(const DataSpec& spec, [[maybe_unused]] uint64_t seed, Dataset& d) const override {
    // 1797 rows of 64 pixel values (0..16) and a label; split 80/20 by a permutation of the seed.
    const std::string path = location(spec);
    std::istringstream in(read_gz(path));
    std::vector<float> pixels;
    std::vector<int64_t> labels;
    std::string line;
    int line_no = 0;
    while (std::getline(in, line)) {
      ++line_no;
      if (line.empty()) continue;
      std::stringstream ls(line);
      std::string cell;
      std::vector<double> row;
      while (std::getline(ls, cell, ',')) {
        try {
          row.push_back(std::stod(cell));
        } catch (const std::exception&) {
          throw InputError(path + ":" + std::to_string(line_no) + ": not a number: '" + cell + "'");
        }
      }
      if (row.size() != 65)
        throw InputError(path + ":" + std::to_string(line_no) + ": expected 65 values, got " +
                         std::to_string(row.size()));
      for (int i = 0; i < 64; ++i) pixels.push_back(static_cast<float>(row[i]));
      labels.push_back(static_cast<int64_t>(row[64]));
    }
    const int64_t n = static_cast<int64_t>(labels.size());
    if (n < 10) throw InputError(path + ": too few rows");
    at::Tensor x = at::from_blob(pixels.data(), {n, 1, 8, 8}, at::kFloat).clone();
    at::Tensor y = at::tensor(labels, at::kLong);
    auto gen = at::make_generator<at::CPUGeneratorImpl>(seed ^ 0xD161757ULL);
    at::Tensor perm = at::randperm(n, gen, at::kLong);
    const int64_t n_test = n / 5;
    d.test_x = x.index_select(0, perm.slice(0, 0, n_test));
    d.test_y = y.index_select(0, perm.slice(0, 0, n_test));
    d.train_x = x.index_select(0, perm.slice(0, n_test, n));
    d.train_y = y.index_select(0, perm.slice(0, n_test, n));
    d.scale = 1.0 / 16.0;
    d.mean = 0.3;
    d.stddev = 0.4;
  }
};

// Gaussian classes of 1 x side x side images, generated from the seed.
class Synthetic final : public DataSource {
 public:
  DatasetShape shape(const DataSpec& spec) const override {
    return {{1, spec.side, spec.side}, spec.classes};
  }
  void load(const DataSpec& spec, [[maybe_unused]] uint64_t seed, Dataset& d) const override {
    // Gaussian classes: centre c_k ~ N(0, 1) per class, sample = c_label + noise * N(0, 1).
    const int64_t n_train = spec.train_samples > 0 ? spec.train_samples : 8192;
    const int64_t n_test = spec.test_samples > 0 ? spec.test_samples : 2048;
    auto gen = at::make_generator<at::CPUGeneratorImpl>(seed ^ 0x5E7E71CULL);
    std::vector<int64_t> shape = d.shape.sample_shape;
    std::vector<int64_t> cshape = shape;
    cshape.insert(cshape.begin(), spec.classes);
    at::Tensor centres = at::randn(cshape, gen, at::kFloat);
    auto make = [&](int64_t n, at::Tensor& x, at::Tensor& y) {
      y = at::randint(spec.classes, {n}, gen, at::kLong);
      std::vector<int64_t> xs = shape;
      xs.insert(xs.begin(), n);
      x = centres.index_select(0, y) + spec.noise * at::randn(xs, gen, at::kFloat);
    };
    make(n_train, d.train_x, d.train_y);
    make(n_test, d.test_x, d.test_y);
  }
};

// Linear regression with known weights, generated from the seed.
class Regression final : public DataSource {
 public:
  DatasetShape shape(const DataSpec& spec) const override {
    return {{spec.features}, spec.targets, TaskKind::kRegression};
  }
  void load(const DataSpec& spec, [[maybe_unused]] uint64_t seed, Dataset& d) const override {
    // Linear regression with known weights: x ~ N(0, I), y = W x + b + noise * N(0, I), with
    // W ~ N(0, 1 / features) and b ~ N(0, 1) drawn from the seed.
    const int64_t n_train = spec.train_samples > 0 ? spec.train_samples : 8192;
    const int64_t n_test = spec.test_samples > 0 ? spec.test_samples : 2048;
    auto gen = at::make_generator<at::CPUGeneratorImpl>(seed ^ 0x7E6E55ULL);
    const at::Tensor w = at::randn({spec.targets, spec.features}, gen, at::kFloat) /
                         std::sqrt(static_cast<double>(spec.features));
    const at::Tensor b = at::randn({spec.targets}, gen, at::kFloat);
    auto make = [&](int64_t n, at::Tensor& x, at::Tensor& y) {
      x = at::randn({n, spec.features}, gen, at::kFloat);
      y = at::linear(x, w, b) + spec.noise * at::randn({n, spec.targets}, gen, at::kFloat);
    };
    make(n_train, d.train_x, d.train_y);
    make(n_test, d.test_x, d.test_y);
  }
};

// The quadratic problem (core/problem/problem.h): a sample is X, m rows of d features and the
// running sum's column, for the additive block model (model.kind = "blocks").
class Quadratic final : public DataSource {
 public:
  DatasetShape shape(const DataSpec& spec) const override {
    return {{spec.features, spec.features + 1}, spec.features, TaskKind::kRegression};
  }
  void load(const DataSpec& spec, [[maybe_unused]] uint64_t seed, Dataset& d) const override {
    // Every sample is X = [A | 0]; its targets b + e, e ~ N(0, tau^2 I) drawn from the run's seed
    // (the problem itself comes from data.problem_seed).
    const Problem p = make_problem(problem_spec(spec));
    const int64_t dim = spec.features;
    at::Tensor x = at::zeros({1, dim, dim + 1}, at::kFloat);
    at::Tensor b = at::empty({dim}, at::kFloat);
    float* xp = x.data_ptr<float>();  // through the pointer: one indexing op per element is slow
    float* bp = b.data_ptr<float>();
    for (int64_t r = 0; r < dim; ++r) {
      for (int64_t c = 0; c < dim; ++c) xp[r * (dim + 1) + c] = static_cast<float>(p.a(r, c));
      bp[r] = static_cast<float>(p.b(r));
    }
    auto gen = at::make_generator<at::CPUGeneratorImpl>(seed ^ 0x9AD2A71CULL);
    auto make = [&](int64_t n, at::Tensor& xs, at::Tensor& y) {
      xs = x.expand({n, dim, dim + 1});
      y = b.unsqueeze(0) + std::sqrt(p.tau2) * at::randn({n, dim}, gen, at::kFloat);
    };
    make(spec.train_samples > 0 ? spec.train_samples : 65536, d.train_x, d.train_y);
    make(spec.test_samples > 0 ? spec.test_samples : 2048, d.test_x, d.test_y);
  }
};

// The logistic problem (core/problem/problem.h): one row of d features and the running sum's
// column.
class Logistic final : public DataSource {
 public:
  DatasetShape shape(const DataSpec& spec) const override { return {{1, spec.features + 1}, 2}; }
  void load(const DataSpec& spec, [[maybe_unused]] uint64_t seed, Dataset& d) const override {
    // The problem's own samples: features, a zero running sum; labels 0 or 1.
    const Problem p = make_problem(problem_spec(spec));
    auto make = [&](const Eigen::MatrixXd& features, const Eigen::VectorXd& labels, at::Tensor& xs,
                    at::Tensor& y) {
      const int64_t n = features.rows(), dim = features.cols();
      xs = at::zeros({n, 1, dim + 1}, at::kFloat);
      y = at::empty({n}, at::kLong);
      float* xp = xs.data_ptr<float>();
      int64_t* yp = y.data_ptr<int64_t>();
      for (int64_t j = 0; j < n; ++j) {
        for (int64_t c = 0; c < dim; ++c)
          xp[j * (dim + 1) + c] = static_cast<float>(features(j, c));
        yp[j] = labels(j) > 0.5 ? 1 : 0;
      }
    };
    make(p.a, p.b, d.train_x, d.train_y);
    make(p.test_x, p.test_y, d.test_x, d.test_y);
  }
};

// Token sequences to sort (core/data/tokens.h): ids per sample, the digits the vocabulary.
class Sort final : public DataSource {
 public:
  DatasetShape shape(const DataSpec& spec) const override {
    return {{2 * spec.length - 1}, spec.digits, TaskKind::kNextToken};
  }
  void load(const DataSpec& spec, [[maybe_unused]] uint64_t seed, Dataset& d) const override {
    TokenSet t =
        make_sort(spec.length, spec.digits, spec.train_samples > 0 ? spec.train_samples : 8192,
                  spec.test_samples > 0 ? spec.test_samples : 1024, seed);
    d.train_x = t.train_x, d.train_y = t.train_y, d.test_x = t.test_x, d.test_y = t.test_y;
  }
};

// Characters of a text file (core/data/tokens.h), every Debian system's GPL-3 by default.
class Text final : public DataSource {
 public:
  DatasetShape shape(const DataSpec& spec) const override {
    return {{spec.seq_len},
            static_cast<int64_t>(read_text(location(spec)).symbols.size()),
            TaskKind::kNextToken};
  }
  const char* default_location() const override { return kTextFile; }
  void load(const DataSpec& spec, [[maybe_unused]] uint64_t seed, Dataset& d) const override {
    const std::string path = location(spec);
    TokenSet t = make_text(read_text(path), spec.seq_len, path);
    d.train_x = t.train_x, d.train_y = t.train_y, d.test_x = t.test_x, d.test_y = t.test_y;
  }
};

}  // namespace

std::string DataSource::location(const DataSpec& spec) const {
  if (!spec.path.empty()) return spec.path;
  return default_location();
}

const DataSource& data_source(DataKind kind) {
  static const FashionMnist fashion;
  static const Digits digits;
  static const Synthetic synthetic;
  static const Regression regression;
  static const Quadratic quadratic;
  static const Logistic logistic;
  static const Sort sort;
  static const Text text;
  switch (kind) {
    case DataKind::kFashionMnist:
      return fashion;
    case DataKind::kDigits:
      return digits;
    case DataKind::kSynthetic:
      return synthetic;
    case DataKind::kRegression:
      return regression;
    case DataKind::kQuadratic:
      return quadratic;
    case DataKind::kLogistic:
      return logistic;
    case DataKind::kSort:
      return sort;
    case DataKind::kText:
      return text;
  }
  RV_CHECK(false, "data_source: a data kind outside the enum");
}

}  // namespace rv
