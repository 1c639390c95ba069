// The parallel multi-ring all-reduce on the loopback transport: after one averaging, every
// cluster holds the exact mean of the clusters' states (to float rounding), for many shapes of
// clusters (a cluster of one node, clusters of different lengths cut at different layers).
#include "catch.h"

#include <thread>

#include <ATen/ATen.h>

#include "core/algo/ring_averager.h"
#include "real/loopback.h"
#include "real/real_env.h"
#include "test_support.h"

using namespace rv;

namespace {

// A CNN of 12 layers with BatchNorm (buffers are averaged too) over `clusters` (each a list of layer counts per
// stage, nodes numbered in order).
void check_mean(const std::vector<std::vector<int>>& clusters) {
  std::string toml = R"(
name = "rings"
[model]
kind = "cnn"
channels = [4, 8]
hidden = [16]
[data]
kind = "synthetic"
side = 8
[planner]
method = "manual"
)";
  int node = 0;
  for (const auto& c : clusters) {
    toml += "[[planner.cluster]]\nnodes = [";
    std::string layers;
    for (size_t s = 0; s < c.size(); ++s) {
      toml += (s ? ", " : "") + std::to_string(node++);
      layers += (s ? ", " : "") + std::to_string(c[s]);
    }
    toml += "]\nstage_layers = [" + layers + "]\n";
  }
  toml += "[[devices]]\ncount = " + std::to_string(node) + "\n";
  auto p = test::prepare(toml, {}, false);
  const ModelDesc& m = p.model;
  const int64_t total = m.state_offset(m.layer_count());
  const int C = static_cast<int>(clusters.size());
  // Cluster c's full state: distinct random values per cluster.
  std::vector<at::Tensor> full;
  for (int c = 0; c < C; ++c) full.push_back(at::randn({total}) * (c + 1) + c);
  at::Tensor mean = at::stack(full).mean(0);

  LoopbackHub hub(node, 20);
  std::vector<at::Tensor> result(node);
  std::vector<std::string> errors(node);
  std::vector<std::thread> threads;
  for (int n = 0; n < node; ++n) {
    threads.emplace_back([&, n] {
      try {
        LoopbackTransport t(hub, n);
        RealClock clock;
        RealCompute compute;
        EventLog log;
        NodeEnv env{t, clock, compute, log};
        NodeRole r = p.plan.role_of(n);
        const int64_t lo = m.state_offset(r.layer_begin), hi = m.state_offset(r.layer_end);
        RingAverager avg(env, p.plan, m, n, RingTopology::kMulti);
        result[n] = avg.average(full[r.cluster].slice(0, lo, hi).clone(), 1, 0, [&] { return t.recv(); }, [](Message) {
          throw Error("unexpected message during averaging");
        });
      } catch (const std::exception& e) {
        errors[n] = e.what();
        hub.fail(e.what());
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int n = 0; n < node; ++n) {
    INFO("node " << n << ": " << errors[n]);
    REQUIRE(errors[n].empty());
    NodeRole r = p.plan.role_of(n);
    const int64_t lo = m.state_offset(r.layer_begin), hi = m.state_offset(r.layer_end);
    CHECK(at::allclose(result[n], mean.slice(0, lo, hi), 1e-5, 1e-6));
  }
}

}  // namespace

TEST_CASE("multi-ring: two clusters cut at the same layers", "[rings]") { check_mean({{4, 4, 4}, {4, 4, 4}}); }
TEST_CASE("multi-ring: a cluster of one node and a pipeline", "[rings]") { check_mean({{12}, {5, 7}}); }
TEST_CASE("multi-ring: clusters of different lengths cut at different layers", "[rings]") {
  check_mean({{1, 2, 3, 6}, {6, 6}, {12}, {3, 3, 3, 3}});
}
TEST_CASE("multi-ring: many clusters of one node", "[rings]") {
  check_mean({{12}, {12}, {12}, {12}, {12}, {12}, {12}});
}
TEST_CASE("multi-ring: stages without parameters own no ring", "[rings]") {
  check_mean({{3, 1, 8}, {1, 1, 10}});
}
