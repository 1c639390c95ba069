// The network emulator holds each message until the star model delivers it, on an injected clock
// (deterministic), and hands it to the sender's transport in order.
#include <thread>

#include "catch.h"
#include "core/error.h"
#include "emu/emulated_network.h"
#include "emu_support.h"
#include "exec/wall_env.h"
#include "loopback/loopback.h"
#include "test_support.h"

using namespace rv;

namespace {

using test::ManualClock;
using test::sized;

std::vector<int64_t> ids_at(LoopbackHub& hub, int node) {
  std::vector<int64_t> ids;
  while (auto m = hub.try_take(node)) ids.push_back(m->id);
  return ids;
}

const double kMb = kMbpsToBytesPerSecond;

}  // namespace

TEST_CASE("a message reaches its receiver when the model delivers it, not before", "[emu]") {
  // Node 0: 8 Mbit/s up, 20 ms; node 1: 4 Mbit/s down, 10 ms.
  const std::vector<NodeLinks> links = {{8 * kMb, 8 * kMb, 0.020}, {8 * kMb, 4 * kMb, 0.010}};
  ManualClock clock;
  EmulatedNetwork net(links, clock);
  LoopbackHub hub(2, 1.0);
  LoopbackTransport t0(hub, 0);
  ShapedTransport shaped(t0, net);
  shaped.send(1, sized(7, 500'000));
  const Seconds due = 0.030 + 500'000 / (4 * kMb);
  CHECK(net.pump() == Approx(0.030));  // the bytes start after the route's latency
  clock.set(due - 1e-6);
  CHECK(net.pump() == Approx(due).epsilon(1e-12));
  CHECK(ids_at(hub, 1).empty());
  clock.set(due);
  CHECK(net.pump() == kNever);
  CHECK(ids_at(hub, 1) == std::vector<int64_t>{7});
}

TEST_CASE("messages of one pair go one after the other, other pairs share the links", "[emu]") {
  const std::vector<NodeLinks> links = {
      {10 * kMb, 10 * kMb, 0.005}, {10 * kMb, 10 * kMb, 0.005}, {10 * kMb, 10 * kMb, 0.005}};
  ManualClock clock;
  EmulatedNetwork net(links, clock);
  LoopbackHub hub(3, 1.0);
  LoopbackTransport t0(hub, 0), t1(hub, 1);
  ShapedTransport s0(t0, net), s1(t1, net);
  s0.send(2, sized(1, 1'000'000));
  s0.send(2, sized(2, 1'000));
  s1.send(2, sized(3, 500'000));
  // Node 2's downlink is shared by two connections: messages 1 and 3 at half its rate each until 3
  // is through; then 1 alone; then 2, which waited behind 1 on its pair's connection.
  const double b = 10 * kMb;
  const Seconds at3 = 0.010 + 1'000'000 / b, at1 = 0.010 + 1'500'000 / b,
                at2 = 0.010 + 1'501'000 / b;
  clock.set(0.020);
  net.pump();
  CHECK(ids_at(hub, 2).empty());
  for (const auto& [t, id] :
       std::vector<std::pair<Seconds, int64_t>>{{at3, 3}, {at1, 1}, {at2, 2}}) {
    clock.set(t - 1e-6);
    net.pump();
    CHECK(ids_at(hub, 2).empty());
    clock.set(t);
    net.pump();
    CHECK(ids_at(hub, 2) == std::vector<int64_t>{id});
  }
}

// A transport whose sends fail, as one to a dead peer does.
class DeadPeer : public Transport {
 public:
  int rank() const override { return 0; }
  int size() const override { return 2; }
  void send(int, Message) override { throw PeerError("peer 1 is gone"); }
  Message recv() override { throw PeerError("peer 1 is gone"); }
  std::optional<Message> try_recv() override { return std::nullopt; }
  void flush() override {}
};

TEST_CASE("a bad route is refused at once, a failed hand-over reaches the sender", "[emu]") {
  const std::vector<NodeLinks> links = {{kMb, kMb, 0}, {kMb, kMb, 0}};
  ManualClock clock;
  EmulatedNetwork net(links, clock);
  DeadPeer dead;
  ShapedTransport shaped(dead, net);
  CHECK_THROWS_AS(shaped.send(5, sized(1, 100)), Error);
  shaped.send(1, sized(2, 100));
  clock.set(1.0);
  net.pump();  // the hand-over fails on the pumping side
  CHECK_THROWS_AS(shaped.flush(), PeerError);
  CHECK_THROWS_AS(shaped.send(1, sized(3, 100)), PeerError);
}

TEST_CASE("started on the wall clock, the emulator hands everything over by itself", "[emu]") {
  const std::vector<NodeLinks> links = {{800 * kMb, 800 * kMb, 0.001},
                                        {800 * kMb, 800 * kMb, 0.001}};
  WallClock clock;
  EmulatedNetwork net(links, clock);
  net.start();
  LoopbackHub hub(2, 10.0);
  LoopbackTransport t0(hub, 0), t1(hub, 1);
  ShapedTransport s0(t0, net);
  for (int i = 0; i < 20; ++i) s0.send(1, sized(i, 10'000));
  s0.flush();  // returns once all 20 are handed over
  std::vector<int64_t> got;
  for (int i = 0; i < 20; ++i) got.push_back(t1.recv().id);
  std::vector<int64_t> want(20);
  for (int i = 0; i < 20; ++i) want[i] = i;
  CHECK(got == want);
}

// Emulation changes when messages arrive, not what they carry: a synchronous algorithm's maths
// (no timing enters it) gives the same losses with and without it.
TEST_CASE("the loopback executor with real.emulate_network: same losses, the network's time",
          "[emu][loopback]") {
  const std::string toml = R"(name = "emu"
seed = 3
[model]
head = "linear"
hidden = [16]
[data]
kind = "synthetic"
train_samples = 512
test_samples = 128
batch_size = 16
[training]
algorithm = "gpipe"
steps = 6
micro_batches = 2
[planner]
method = "manual"
[[devices]]
count = 2
up_mbps = 50
down_mbps = 50
latency_ms = 2
)";
  auto losses = [&](const std::string& emulate) {
    auto p = test::prepare(toml, {"real.emulate_network=" + emulate});
    std::vector<double> out;
    for (const Event& e : run_loopback(p.spec(), 30))
      if (e.kind == EventKind::kLoss) out.push_back(e.loss);
    return out;
  };
  const std::vector<double> plain = losses("false"), emulated = losses("true");
  REQUIRE(plain.size() == 12);
  CHECK(emulated == plain);
}
