// The one NodeEnv assembly: the scenario's wrappers are applied to the executor's parts once, for
// the node they concern, and every event reaches the node's sink and the observer.
#include "catch.h"
#include "core/error.h"
#include "exec/env_assembly.h"
#include "exec/wall_env.h"
#include "loopback/loopback.h"

using namespace rv;

namespace {

Scenario with_faults(const std::string& faults) {
  return parse_scenario("name = \"env\"\n[[devices]]\ncount = 2\n[faults]\n" + faults, "env.toml");
}

Message numbered(int64_t id) {
  Message m;
  m.kind = MsgKind::kForward;
  m.id = id;
  m.bytes = kHeaderBytes;
  return m;
}

// Ids that node 1 received from node 0 after node 0 sent 0..n-1 through its stack.
std::vector<int64_t> delivered(const Scenario& s, int n,
                               const FaultSpec* override_faults = nullptr) {
  LoopbackHub hub(2, 1.0);
  LoopbackTransport t0(hub, 0);
  WallClock clock;
  WallCompute compute;
  EventLog log;
  NodeEnvStack stack(s, 0, EnvParts{t0, clock, compute, log}, override_faults);
  for (int i = 0; i < n; ++i) stack.env().transport.send(1, numbered(i));
  std::vector<int64_t> ids;
  while (auto m = hub.try_take(1)) ids.push_back(m->id);
  return ids;
}

}  // namespace

TEST_CASE("the scenario's faults wrap the transport of the faulty node only", "[env]") {
  const Scenario s = with_faults("node = 0\ndrop_every = 3\n");
  CHECK(delivered(s, 7) == std::vector<int64_t>{0, 1, 3, 4, 6});
  const Scenario other = with_faults("node = 1\ndrop_every = 3\n");
  CHECK(delivered(other, 4) == std::vector<int64_t>{0, 1, 2, 3});
  const Scenario crash = with_faults("node = 0\ncrash_after_sends = 2\n");
  CHECK_THROWS_AS(delivered(crash, 3), Error);
}

TEST_CASE("a test's fault override replaces the scenario's for that node", "[env]") {
  const Scenario s = with_faults("node = 0\ndrop_every = 2\n");
  FaultSpec none;
  CHECK(delivered(s, 4, &none) == std::vector<int64_t>{0, 1, 2, 3});
}

TEST_CASE("every event reaches the node's sink and the observer, under its lock", "[env]") {
  const Scenario s = with_faults("node = -1\n");
  LoopbackHub hub(1, 1.0);
  LoopbackTransport t(hub, 0);
  WallClock clock;
  WallCompute compute;
  EventLog own, observer;
  std::mutex mu;
  NodeEnvStack stack(s, 0, EnvParts{t, clock, compute, own, nullptr, &observer, &mu});
  Event e;
  e.kind = EventKind::kUpdate;
  e.step = 7;
  stack.env().metrics.record(e);
  REQUIRE(own.events().size() == 1);
  REQUIRE(observer.events().size() == 1);
  CHECK(observer.events()[0].step == 7);
  CHECK(stack.env().collectives == nullptr);
  CHECK(&stack.env().clock == &clock);
  CHECK(&stack.env().compute == &compute);
}

TEST_CASE(
    "the executor's direct channel reaches a node only where nothing wraps any node's transport",
    "[env]") {
  struct NoChannel : DirectChannel {  // never used: only where the assembly hands it is checked
    std::unique_ptr<CollectiveWork> send(int, int64_t, at::Tensor) override {
      throw Error("not here");
    }
    std::unique_ptr<CollectiveWork> recv(int, int64_t, at::Tensor) override {
      throw Error("not here");
    }
  } channel;
  struct HeldAtSender : NetworkEmulator {
    void submit(Transport& inner, int, int dst, Message msg) override {
      inner.send(dst, std::move(msg));
    }
    void drain(int) override {}
  } network;
  LoopbackHub hub(2, 1.0);
  LoopbackTransport t(hub, 0);
  WallClock clock;
  WallCompute compute;
  EventLog log;
  auto direct_of = [&](const Scenario& s, NetworkEmulator* net, const FaultSpec* override_faults) {
    EnvParts parts{t, clock, compute, log};
    parts.network = net;
    parts.direct = &channel;
    NodeEnvStack stack(s, 0, parts, override_faults);
    return stack.env().direct;
  };
  CHECK(direct_of(with_faults("node = -1\n"), nullptr, nullptr) == &channel);
  // A fault on another node: its ring partners must not use the channel either.
  CHECK(direct_of(with_faults("node = 1\ndelay_ms = 5\n"), nullptr, nullptr) == nullptr);
  CHECK(direct_of(with_faults("node = 0\ndrop_every = 2\n"), nullptr, nullptr) == nullptr);
  CHECK(direct_of(with_faults("node = -1\n"), &network, nullptr) == nullptr);
  FaultSpec crash;
  crash.crash_after_sends = 3;
  CHECK(direct_of(with_faults("node = -1\n"), nullptr, &crash) == nullptr);
  FaultSpec none;
  CHECK(direct_of(with_faults("node = -1\n"), nullptr, &none) == &channel);
}
