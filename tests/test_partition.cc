// data.partition (core/data/partition.h): every partition's parts are disjoint, hold every row
// and are the same for every caller; iid is the old shard; by-class gives each part few classes;
// dirichlet's concentration moves the parts' class mixes from one class to the whole set's; a
// part smaller than a batch, or labels the data lacks, are refused at their key; and a run's
// losses change with the partition.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "catch.h"
#include "cli_support.h"
#include "core/data/partition.h"
#include "core/error.h"
#include "core/output/event_schema.h"
#include "snippets.h"

using namespace rv;
namespace fs = std::filesystem;

namespace {

// 10 classes of 200 rows, interleaved (row r has class r mod 10).
std::vector<int64_t> interleaved(int64_t rows = 2000) {
  std::vector<int64_t> labels;
  for (int64_t r = 0; r < rows; ++r) labels.push_back(r % 10);
  return labels;
}

DataSpec spec_of(DataPartition p, double alpha = 0.5, int64_t batch = 16) {
  DataSpec s;
  s.partition = p;
  s.dirichlet_alpha = alpha;
  s.batch_size = batch;
  return s;
}

std::vector<std::vector<int64_t>> parts_of(const std::vector<int64_t>& labels, const DataSpec& s,
                                           int parts, uint64_t seed = 7) {
  std::vector<std::vector<int64_t>> out;
  for (int p = 0; p < parts; ++p) out.push_back(partition_by_labels(labels, s, parts, p, seed));
  return out;
}

// Each class's share of the part's rows.
std::map<int64_t, double> mix(const std::vector<int64_t>& labels,
                              const std::vector<int64_t>& rows) {
  std::map<int64_t, double> m;
  for (int64_t r : rows)
    m[labels[static_cast<size_t>(r)]] += 1.0 / static_cast<double>(rows.size());
  return m;
}

}  // namespace

TEST_CASE("every partition's parts are disjoint, hold every row and are drawn alike",
          "[data][partition]") {
  const std::vector<int64_t> labels = interleaved();
  for (DataPartition p :
       {DataPartition::kIid, DataPartition::kByClass, DataPartition::kDirichlet}) {
    INFO(name_of(p));
    const auto parts = parts_of(labels, spec_of(p), 4);
    std::vector<int64_t> all;
    for (const auto& part : parts) {
      CHECK(std::is_sorted(part.begin(), part.end()));
      all.insert(all.end(), part.begin(), part.end());
    }
    std::sort(all.begin(), all.end());
    REQUIRE(all.size() == labels.size());
    for (size_t i = 0; i < all.size(); ++i) CHECK(all[i] == static_cast<int64_t>(i));
    CHECK(parts_of(labels, spec_of(p), 4) == parts);  // every node computes the same
  }
  // iid is the shard every run used before the key existed.
  for (int p = 0; p < 3; ++p)
    CHECK(partition_by_labels(labels, spec_of(DataPartition::kIid), 3, p, 7) ==
          shard(2000, 3, p, 7));
}

TEST_CASE("by-class gives each part a few classes, iid all of them", "[data][partition]") {
  const std::vector<int64_t> labels = interleaved();
  for (const auto& part : parts_of(labels, spec_of(DataPartition::kByClass), 5)) {
    const auto m = mix(labels, part);
    CHECK(m.size() == 2);  // 10 classes over 5 equal parts: two whole classes each
    for (const auto& [label, share] : m) CHECK(share == Approx(0.5));
  }
  for (const auto& part : parts_of(labels, spec_of(DataPartition::kIid), 5))
    CHECK(mix(labels, part).size() == 10);
}

TEST_CASE("dirichlet's concentration: small, a part is mostly one class, and large, the whole mix",
          "[data][partition]") {
  const std::vector<int64_t> labels = interleaved(20000);
  auto largest_share = [&](double alpha) {
    double mean = 0;
    const auto parts = parts_of(labels, spec_of(DataPartition::kDirichlet, alpha), 4);
    for (const auto& part : parts) {
      double most = 0;
      for (const auto& [label, share] : mix(labels, part)) most = std::max(most, share);
      mean += most / static_cast<double>(parts.size());
    }
    return mean;
  };
  // The whole set's mix is 0.1 per class; a part of two or three whole classes, 0.3 to 0.5.
  const double skewed = largest_share(0.05), even = largest_share(1000);
  INFO("mean largest class share: alpha 0.05 " << skewed << ", alpha 1000 " << even);
  CHECK(skewed > 0.3);
  CHECK(even < 0.12);
}

TEST_CASE("a part smaller than a batch, or labels the data lacks, are refused at the key",
          "[data][partition]") {
  const std::vector<int64_t> labels = interleaved(100);
  try {
    parts_of(labels, spec_of(DataPartition::kByClass, 0.5, 64), 4);
    FAIL("no error");
  } catch (const InputError& e) {
    CHECK(std::string(e.what()).find("data.partition: a part would hold 25 training samples") !=
          std::string::npos);
  }
  try {
    parts_of(labels, spec_of(DataPartition::kDirichlet, 0.5, 30), 4);  // 4 x 30 > 100
    FAIL("no error");
  } catch (const InputError& e) {
    CHECK(std::string(e.what()).find("data.dirichlet_alpha: a part would hold") !=
          std::string::npos);
  }
  Scenario s = parse_scenario(
      "name = \"p\"\n[data]\nkind = \"regression\"\npartition = \"by-class\"\n[[devices]]\n"
      "count = 2\n",
      "p.toml");
  try {
    check_data_partition(s);
    FAIL("no error");
  } catch (const ScenarioError& e) {
    CHECK(std::string(e.what()) ==
          "p.toml:4: key 'data.partition': \"by-class\" needs class labels: data.kind "
          "\"regression\" has none (it is not a classification task)");
  }
  s.data.partition = DataPartition::kIid;
  check_data_partition(s);  // iid needs no labels
}

TEST_CASE("a run's clusters train on the partition's parts: its losses move with it",
          "[data][partition][sim]") {
  const fs::path d = test::fresh_dir("rv-partition", "runs");
  std::ofstream(d / "s.toml") << "name = \"part\"\n"
                              << test::kDigitsMlp << R"([training]
steps = 40
average_every = 10
[[devices]]
count = 4
tflops = 0.05
[[planner.cluster]]
nodes = [0, 1]
[[planner.cluster]]
nodes = [2, 3]
)";
  auto losses = [&](const std::string& partition, const std::string& dir) {
    const test::Result r = test::ravnest({"sim", "s.toml", "--run-dir", dir, "--progress", "off",
                                          "--set", "data.partition=\"" + partition + "\""},
                                         d);
    INFO(r.err);
    REQUIRE(r.status == 0);
    std::istringstream rows(test::slurp(d / dir / "metrics.csv"));
    std::vector<double> out;
    for (const Event& e : parse_events_csv(rows, dir))
      if (e.kind == EventKind::kLoss) out.push_back(e.loss);
    return out;
  };
  const std::vector<double> iid = losses("iid", "a"), by_class = losses("by-class", "b");
  REQUIRE(iid.size() == by_class.size());
  CHECK(iid != by_class);
  // Asked again, a partition gives the same run.
  CHECK(losses("by-class", "c") == by_class);
  fs::remove_all(d);
}
