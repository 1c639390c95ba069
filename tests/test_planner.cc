// The manual planner: contiguous stages covering the model, memory in proportion to RAM, explicit
// cuts honoured, infeasible pools refused with what is missing.
#include "catch.h"
#include "core/error.h"
#include "core/model/cost_model.h"
#include "planner/comm_graph.h"
#include "test_support.h"

using namespace rv;

namespace {

const char* kPool = R"(
name = "pool"
[model]
head = "linear"
kind = "mlp"
hidden = [512, 512, 512, 512, 512, 512]
[data]
kind = "synthetic"
side = 16
[[devices]]
name = "small"
count = 2
ram_gb = 4
[[devices]]
name = "big"
count = 2
ram_gb = 16
)";

}  // namespace

TEST_CASE("the manual planner covers the model with contiguous stages, one per node", "[planner]") {
  auto p = test::prepare(kPool, {}, false);
  REQUIRE(p.plan.clusters.size() == 1);
  const auto& st = p.plan.clusters[0].stages;
  REQUIRE(st.size() == 4);
  CHECK(st.front().layer_begin == 0);
  CHECK(st.back().layer_end == p.model.layer_count());
  for (size_t k = 0; k + 1 < st.size(); ++k) CHECK(st[k].layer_end == st[k + 1].layer_begin);
  for (size_t k = 0; k < st.size(); ++k) CHECK(st[k].node == static_cast<int>(k));
}

TEST_CASE("the manual planner puts memory on nodes in proportion to their RAM", "[planner]") {
  auto p = test::prepare(kPool, {}, false);
  const auto& st = p.plan.clusters[0].stages;
  // The big nodes (16 GiB) hold more than the small ones (4 GiB).
  CHECK(st[2].memory + st[3].memory > st[0].memory + st[1].memory);
  // The largest memory/RAM ratio is as small as the layer granularity allows: moving any boundary
  // by one layer does not lower it.
  auto ratio = [&](const std::vector<int>& cuts) {
    double worst = 0;
    for (size_t k = 0; k + 1 < cuts.size(); ++k) {
      if (cuts[k] >= cuts[k + 1]) return 1e300;
      Bytes m = stage_cost(p.model, cuts[k], cuts[k + 1], p.scenario.training,
                           p.scenario.data.batch_size, 4)
                    .memory;
      worst = std::max(worst,
                       static_cast<double>(m) / p.scenario.device_of(static_cast<int>(k)).ram_gb);
    }
    return worst;
  };
  std::vector<int> cuts{0};
  for (const auto& s : st) cuts.push_back(s.layer_end);
  const double best = ratio(cuts);
  for (size_t i = 1; i + 1 < cuts.size(); ++i)
    for (int d : {-1, 1}) {
      auto c = cuts;
      c[i] += d;
      CHECK(ratio(c) >= best * (1 - 1e-12));
    }
}

TEST_CASE("stage_layers fixes the cut, a wrong total is refused", "[planner]") {
  auto p = test::prepare(kPool, {"planner.stage_layers=[5, 5, 2, 2]"}, false);
  const auto& st = p.plan.clusters[0].stages;
  CHECK(st[0].layer_end == 5);
  CHECK(st[1].layer_end == 10);
  CHECK(st[3].layer_end == p.model.layer_count());
  CHECK_THROWS_AS(test::prepare(kPool, {"planner.stage_layers=[5, 5]"}, false), ScenarioError);
}

TEST_CASE("more nodes than layers leaves the extra nodes idle", "[planner]") {
  auto p = test::prepare(
      "name = \"tiny\"\n[model]\nhead = \"linear\"\nhidden = []\n[[devices]]\ncount = 5\n", {},
      false);
  CHECK(p.model.layer_count() == 2);
  CHECK(p.plan.clusters[0].stages.size() == 2);
  CHECK(p.plan.role_of(4).stage == -1);
}

TEST_CASE("the communication graph holds every pipeline and ring flow of a plan", "[planner]") {
  auto p = test::prepare(std::string(kPool) + R"(
[planner]
method = "manual"
[[planner.cluster]]
nodes = [0, 1]
[[planner.cluster]]
nodes = [2, 3]
stage_layers = [9, 5]
)",
                         {}, false);
  CostModel cost(p.scenario, p.model);
  CommGraph g = comm_graph(cost, p.plan.clusters, p.plan.rings);
  int activations = 0, gradients = 0, averaging = 0;
  boost::graph_traits<CommGraph>::edge_iterator e, end;
  for (std::tie(e, end) = boost::edges(g); e != end; ++e) {
    activations += g[*e].kind == FlowKind::kActivation;
    gradients += g[*e].kind == FlowKind::kGradient;
    averaging += g[*e].kind == FlowKind::kAveraging;
  }
  CHECK(activations == 2);
  CHECK(gradients == 2);
  CHECK(averaging == 2 * static_cast<int>(p.plan.rings.size()));
  // Over one averaging every node sends and receives half of the state it holds (C = 2).
  LinkLoad load = link_load(g, FlowKind::kAveraging);
  const double total = 4.0 * p.model.state_offset(p.model.layer_count());
  CHECK(load.out[0] + load.out[1] == Approx(total / 2));
  CHECK(load.in[2] + load.in[3] == Approx(total / 2));
}
