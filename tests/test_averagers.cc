// Ring averaging on the loopback transport, both topologies (Ravnest's parallel multi-ring and the
// single-ring baseline): after one averaging, every cluster holds the exact mean of the clusters'
// states (to float rounding), for many shapes of clusters (a cluster of one node, clusters of
// different lengths cut at different layers), with one row (the state) or several (the state and
// optimizer slots).
#include <ATen/ATen.h>

#include <algorithm>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "algo/ring_averager.h"
#include "catch.h"
#include "exec/wall_env.h"
#include "loopback/loopback.h"
#include "test_support.h"

using namespace rv;

namespace {

// Runs body(env, transport, node) for nodes 0 .. n - 1, each on its own thread over one loopback
// hub; returns each node's error ("" if none). A node that fails fails the hub, so none waits on
// it.
// A loopback transport that takes up Transport::offer at the earliest moment possible: the sender
// writes a matching payload into the receiver's offered place as it sends, before the message is
// even queued. A ring that offered a place it still reads or writes then gets a wrong mean.
struct OfferBoard {
  struct Offer {
    int dst = -1, src = -1;
    MessageMatch match;
    at::Tensor into;
  };
  std::mutex mu;
  std::vector<Offer> offers;
  int64_t used = 0;  // payloads written into an offered place
};

class InPlaceTransport : public Transport {
 public:
  InPlaceTransport(LoopbackTransport& inner, OfferBoard& board) : inner_(inner), board_(board) {}
  int rank() const override { return inner_.rank(); }
  int size() const override { return inner_.size(); }
  Message recv() override { return inner_.recv(); }
  std::optional<Message> try_recv() override { return inner_.try_recv(); }
  void flush() override { inner_.flush(); }
  void send(int dst, Message m) override {
    {
      std::lock_guard<std::mutex> lock(board_.mu);
      auto& all = board_.offers;
      for (auto it = all.begin(); it != all.end(); ++it) {
        if (it->dst != dst || it->src != rank() || !it->match.matches(m) || m.payload.size() != 1 ||
            m.payload[0].numel() != it->into.numel())
          continue;
        it->into.view({-1}).copy_(m.payload[0].reshape({-1}));
        m.payload[0] = it->into.view(m.payload[0].sizes());
        all.erase(it);
        ++board_.used;
        break;
      }
    }
    inner_.send(dst, std::move(m));
  }
  void offer(int src, const MessageMatch& match, at::Tensor into) override {
    std::lock_guard<std::mutex> lock(board_.mu);
    board_.offers.push_back({rank(), src, match, std::move(into)});
  }
  void withdraw(int src, const MessageMatch& match) override {
    std::lock_guard<std::mutex> lock(board_.mu);
    auto& all = board_.offers;
    all.erase(std::remove_if(all.begin(), all.end(),
                             [&](const OfferBoard::Offer& o) {
                               return o.dst == rank() && o.src == src && o.match == match;
                             }),
              all.end());
  }

 private:
  LoopbackTransport& inner_;
  OfferBoard& board_;
};

std::vector<std::string> on_loopback(
    int n, const std::function<void(NodeEnv&, LoopbackTransport&, int)>& body,
    OfferBoard* board = nullptr) {
  LoopbackHub hub(n, 20);
  std::vector<std::string> errors(static_cast<size_t>(n));
  std::vector<std::thread> threads;
  for (int node = 0; node < n; ++node) {
    threads.emplace_back([&, node] {
      try {
        LoopbackTransport t(hub, node);
        std::optional<InPlaceTransport> in_place;
        if (board) in_place.emplace(t, *board);
        WallClock clock;
        WallCompute compute;
        EventLog log;
        NodeEnv env{board ? static_cast<Transport&>(*in_place) : t, clock, compute, log};
        body(env, t, node);
      } catch (const std::exception& e) {
        errors[static_cast<size_t>(node)] = e.what();
        hub.fail(e.what());
      }
    });
  }
  for (auto& t : threads) t.join();
  return errors;
}

// A CNN of 12 layers with BatchNorm (buffers are averaged too) over `clusters` (each a list of
// layer counts per stage, nodes numbered in order), the rings' segments in pieces of at most
// `piece_bytes` (0: whole), over `board`'s in-place transport if given. Returns the number of
// messages the nodes received.
int64_t check_mean(const std::vector<std::vector<int>>& clusters,
                   RingTopology topology = RingTopology::kMulti, int64_t rows = 1,
                   int64_t piece_bytes = 0, OfferBoard* board = nullptr) {
  std::string toml = R"(
name = "rings"
[model]
head = "linear"
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
  for (int c = 0; c < C; ++c) full.push_back(at::randn({rows, total}) * (c + 1) + c);
  at::Tensor mean = at::stack(full).mean(0);

  std::vector<at::Tensor> result(node);
  std::vector<int64_t> received(static_cast<size_t>(node), 0);
  const std::vector<std::string> errors = on_loopback(
      node,
      [&](NodeEnv& env, LoopbackTransport& t, int n) {
        NodeRole r = p.plan.role_of(n);
        const int64_t lo = m.state_offset(r.layer_begin), hi = m.state_offset(r.layer_end);
        RingAverager avg(env, p.plan, m, n, topology, piece_bytes);
        auto recv = [&] {
          ++received[static_cast<size_t>(n)];
          return t.recv();
        };
        at::Tensor mine = full[r.cluster].slice(1, lo, hi).clone();
        if (rows == 1) mine = mine.squeeze(0);
        // Two averagings in a row: the second averages the first's means again (a no-op on the
        // values) and checks that rounds do not mix. The first gets a state its caller still
        // holds, which must come back unchanged; the second is handed over (the averager may
        // work in its memory).
        auto fail = [](Message) { throw Error("unexpected message during averaging"); };
        const at::Tensor before = mine.clone();
        at::Tensor held = mine;
        mine = avg.average(held, rows, 0, recv, fail);
        if (!at::equal(held, before))
          throw Error("the averager wrote into a state its caller holds");
        held = at::Tensor();
        mine = avg.average(std::move(mine), rows, 1, recv, fail);
        result[n] = rows == 1 ? mine.unsqueeze(0) : mine;
      },
      board);
  for (int n = 0; n < node; ++n) {
    INFO("node " << n << ": " << errors[n]);
    REQUIRE(errors[n].empty());
    NodeRole r = p.plan.role_of(n);
    const int64_t lo = m.state_offset(r.layer_begin), hi = m.state_offset(r.layer_end);
    REQUIRE(result[n].sizes() == mean.slice(1, lo, hi).sizes());
    CHECK(at::allclose(result[n], mean.slice(1, lo, hi), 1e-5, 1e-5));
  }
  int64_t total_received = 0;
  for (int64_t k : received) total_received += k;
  return total_received;
}

}  // namespace

TEST_CASE("multi-ring: two clusters cut at the same layers", "[rings]") {
  check_mean({{4, 4, 4}, {4, 4, 4}});
}
TEST_CASE("multi-ring: a cluster of one node and a pipeline", "[rings]") {
  check_mean({{12}, {5, 7}});
}
TEST_CASE("multi-ring: clusters of different lengths cut at different layers", "[rings]") {
  check_mean({{1, 2, 3, 6}, {6, 6}, {12}, {3, 3, 3, 3}});
}
TEST_CASE("multi-ring: many clusters of one node", "[rings]") {
  check_mean({{12}, {12}, {12}, {12}, {12}, {12}, {12}});
}
TEST_CASE("multi-ring: stages without parameters own no ring", "[rings]") {
  check_mean({{3, 1, 8}, {1, 1, 10}});
}

TEST_CASE("single ring: two clusters cut at the same layers", "[rings]") {
  check_mean({{4, 4, 4}, {4, 4, 4}}, RingTopology::kSingle);
}
TEST_CASE("single ring: clusters of different lengths, one of one node", "[rings]") {
  check_mean({{1, 2, 3, 6}, {6, 6}, {12}, {3, 3, 3, 3}}, RingTopology::kSingle);
}
TEST_CASE("single ring: first stages without parameters still lead their cluster", "[rings]") {
  check_mean({{1, 1, 10}, {3, 1, 8}, {2, 10}}, RingTopology::kSingle);
}
TEST_CASE("multi-ring and single ring average several rows (state and optimizer slots)",
          "[rings]") {
  check_mean({{1, 2, 3, 6}, {6, 6}, {12}}, RingTopology::kMulti, 3);
  check_mean({{1, 2, 3, 6}, {6, 6}, {12}}, RingTopology::kSingle, 2);
}

TEST_CASE("multi-ring and single ring in pieces: each lane at its own pace, the same mean",
          "[rings]") {
  const std::vector<std::vector<int>> shapes{{1, 2, 3, 6}, {6, 6}, {12}, {3, 3, 3, 3}};
  const int64_t whole = check_mean(shapes);
  // Pieces of 128, 32 and 1 byte (at most one piece per element of a segment).
  int64_t before = whole;
  for (int64_t piece : {128, 32, 1}) {
    INFO("pieces of " << piece << " bytes");
    const int64_t n = check_mean(shapes, RingTopology::kMulti, 1, piece);
    CHECK(n > before);  // smaller pieces, more messages
    before = n;
  }
  CHECK(check_mean(shapes, RingTopology::kMulti, 3, 200) >
        check_mean(shapes, RingTopology::kMulti, 3));
  CHECK(check_mean(shapes, RingTopology::kSingle, 2, 100) >
        check_mean(shapes, RingTopology::kSingle, 2));
}

TEST_CASE("multi-ring and single ring: all-gather segments received in place give the same mean",
          "[rings]") {
  const std::vector<std::vector<int>> shapes{{1, 2, 3, 6}, {6, 6}, {12}, {3, 3, 3, 3}};
  for (const RingTopology topology : {RingTopology::kMulti, RingTopology::kSingle}) {
    for (const int64_t piece : {int64_t{0}, int64_t{32}}) {
      INFO("topology " << static_cast<int>(topology) << ", pieces of " << piece << " bytes");
      OfferBoard board;
      check_mean(shapes, topology, 1, piece, &board);
      CHECK(board.used > 0);
      CHECK(board.offers.empty());  // each offer used or taken back
    }
  }
  OfferBoard rows;  // several rows are not contiguous in a segment: nothing offered
  check_mean(shapes, RingTopology::kMulti, 3, 0, &rows);
  CHECK(rows.used == 0);
}

// Handed over with std::move, a one-row state is averaged in its own memory (no copy of the
// state; its slices go to the peers as they are).
TEST_CASE("multi-ring: a state handed over is averaged in place", "[rings]") {
  auto p = test::prepare(R"(
name = "in-place"
[model]
head = "linear"
kind = "mlp"
hidden = [32]
[data]
kind = "synthetic"
side = 4
[planner]
method = "manual"
[[planner.cluster]]
nodes = [0]
[[planner.cluster]]
nodes = [1]
[[devices]]
count = 2
)",
                         {}, false);
  const int64_t total = p.model.state_offset(p.model.layer_count());
  std::vector<const void*> before(2), after(2);
  std::vector<float> first(2);
  const std::vector<std::string> errors =
      on_loopback(2, [&](NodeEnv& env, LoopbackTransport& t, int n) {
        RingAverager avg(env, p.plan, p.model, n, RingTopology::kMulti);
        at::Tensor state = at::full({total}, static_cast<float>(2 * n));
        before[n] = state.data_ptr();
        at::Tensor mean = avg.average(
            std::move(state), 1, 0, [&] { return t.recv(); }, [](Message) {});
        after[n] = mean.data_ptr();
        first[n] = mean[0].item<float>();
      });
  for (int n = 0; n < 2; ++n) {
    INFO("node " << n << ": " << errors[n]);
    REQUIRE(errors[n].empty());
    CHECK(after[n] == before[n]);
    CHECK(first[n] == 1.0f);
  }
}
