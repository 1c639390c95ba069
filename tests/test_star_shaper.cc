// The emulator's network model on virtual time (an injected clock): analytic cases, and a trace of
// messages that gets the delivery times the simulator (SimGrid's links) gives the same messages.
#include <algorithm>
#include <cmath>
#include <map>
#include <random>

#include "catch.h"
#include "emu/emulated_network.h"
#include "emu/star_shaper.h"
#include "sim/sim_network.h"
#include "sim/sim_runner.h"
#include "test_support.h"

using namespace rv;

namespace {

struct Send {
  Seconds at;
  int src, dst;
  Bytes bytes;
};

// Runs `sends` (in time order) through the model on virtual time; returns each message's delivery
// time, by index in `sends`.
std::vector<Seconds> emulate(const NetworkLinks& links, const std::vector<Send>& sends,
                             int64_t* held = nullptr) {
  StarNetwork net(links);
  std::vector<Seconds> out(sends.size(), -1);
  for (size_t k = 0; k <= sends.size(); ++k) {
    const Seconds until = k < sends.size() ? sends[k].at : kNever;
    for (const Delivery& d : net.advance(until)) out[d.token] = d.at;
    if (k < sends.size()) net.send(sends[k].src, sends[k].dst, sends[k].bytes, k, sends[k].at);
  }
  if (held != nullptr) *held = net.held_messages();
  return out;
}

NodeLinks mbps(double up, double down, double latency_ms) {
  return {up * kMbpsToBytesPerSecond, down * kMbpsToBytesPerSecond, latency_ms * kMsToSeconds};
}

}  // namespace

TEST_CASE("one message takes both latencies plus its bytes over the slower link", "[emu]") {
  const std::vector<NodeLinks> links = {mbps(20, 100, 30), mbps(50, 8, 15)};
  const auto t = emulate(links, {{0.5, 0, 1, 1'000'000}});
  CHECK(t[0] == Approx(0.5 + 0.030 + 0.015 + 1e6 / (8 * kMbpsToBytesPerSecond)).epsilon(1e-12));
  const auto back = emulate(links, {{0.0, 1, 0, 1'000'000}});
  CHECK(back[0] == Approx(0.045 + 1e6 / (50 * kMbpsToBytesPerSecond)).epsilon(1e-12));
}

TEST_CASE("a flow runs at most TCP's window over its round trip", "[emu]") {
  // 1 Gbit/s both ways, 25 ms one way each: a round trip of 100 ms, where a 2.79 MB window allows
  // 27.9 MB/s of the links' 125.
  NetworkLinks links({mbps(1000, 1000, 25), mbps(1000, 1000, 25)});
  links.window = kTcpWindowBytes;
  const double cap = kTcpWindowBytes / 0.1;
  CHECK(links.rate_cap(0, 1) == Approx(cap).epsilon(1e-12));
  CHECK(links.route_bandwidth(0, 1) == Approx(cap).epsilon(1e-12));
  const auto t = emulate(links, {{0, 0, 1, 10'000'000}});
  CHECK(t[0] == Approx(0.05 + 1e7 / cap).epsilon(1e-12));
  // Without a window the links' rate; without a latency, no cap either.
  links.window = 0;
  CHECK(emulate(links, {{0, 0, 1, 10'000'000}})[0] ==
        Approx(0.05 + 1e7 / (1000 * kMbpsToBytesPerSecond)).epsilon(1e-12));
  NetworkLinks near({mbps(1000, 1000, 0), mbps(1000, 1000, 0)});
  near.window = kTcpWindowBytes;
  CHECK(std::isinf(near.rate_cap(0, 1)));
  // The `tcp` model carries the window; `ideal` does not.
  const std::string two =
      "[[devices]]\ncount = 2\nup_mbps = 1000\ndown_mbps = 1000\n"
      "latency_ms = 25\n";
  CHECK(links_of(parse_scenario("name = \"w\"\n" + two, "w.toml")).window == kTcpWindowBytes);
  CHECK(links_of(parse_scenario("name = \"w\"\n[network]\nmodel = \"ideal\"\n" + two, "w.toml"))
            .window == 0);
}

// The warm floor (core/network/tcp_pacing.h), by hand: a connection of RTT 100 ms (one way 50 ms)
// at 10 MB/s carrying 100 kB messages (10 ms of bytes at the path's rate).
TEST_CASE("the warm floor: slow start, then BBR's gain over the largest sample, never falling",
          "[emu]") {
  const Seconds rtt = 0.1, one_way = 0.05;
  const double rate = 1e7, bytes = 1e5, g = kBbrHighGain, iw = kInitialWindowBytes;
  StartupPacing p(rtt, one_way, rate);
  // A fresh connection's first busy period is slow start: rounds of 14,480, 28,960 and 57,920
  // bytes; 100 kB leaves in the third round, at 4 x 14,480 bytes per round trip.
  CHECK(p.rate() == Approx(iw / rtt).epsilon(1e-12));
  const Seconds first = p.hand_over(0, bytes);
  CHECK(first == Approx(0.2 + (bytes - 3 * iw) / (4 * iw / rtt) + one_way).epsilon(1e-12));
  p.arrived(first);
  // Its sample: the larger of 100 kB over RTT + 0.298 s and its last full round's rate (2 x 14,480
  // bytes per round trip); the pace is the gain times that.
  const double pace = g * 2 * iw / rtt;
  CHECK(p.rate() == Approx(pace).epsilon(1e-12));
  // The next message, handed over at 1 s: 83.5 kB in its first round trip, the rest at g x that.
  const Seconds second = p.hand_over(1.0, bytes);
  CHECK(second == Approx(1.1 + (bytes - pace * rtt) / (g * pace) + one_way).epsilon(1e-12));
  p.arrived(second);
  CHECK(p.rate() == Approx(g * pace).epsilon(1e-12));
  // Two handed over together share the busy period: the second leaves behind the first.
  const Seconds a = p.hand_over(2.0, bytes), b = p.hand_over(2.0, bytes);
  CHECK(a == Approx(2.0 + bytes / p.rate() + one_way).epsilon(1e-12));
  CHECK(b - a == Approx(bytes / p.rate()).epsilon(1e-12));
  p.arrived(a);
  p.arrived(b);
  // STARTUP's pacing rate never falls: small messages' samples do not lower it.
  const double before = p.rate();
  for (Seconds t = 3; t < 10; t += 1) p.arrived(p.hand_over(t, 1e3));
  CHECK(p.rate() == Approx(before).epsilon(1e-12));
  // From below, a lone message repeated far apart settles at RTT / (gain - 1) to leave (a
  // connection whose first message was 1 kB: its pace starts low).
  StartupPacing q(rtt, one_way, rate);
  q.arrived(q.hand_over(0, 1e3));
  Seconds t = 1;
  double rising = 0;
  for (int i = 0; i < 50; ++i, t += 1) {
    q.arrived(q.hand_over(t, bytes));
    CHECK(q.rate() >= rising);
    rising = q.rate();
  }
  const Seconds leave = q.hand_over(t, bytes) - t - one_way;
  CHECK(leave == Approx(rtt / (g - 1)).epsilon(1e-3));
}

TEST_CASE("within a busy period the warm floor's pace grows by BBR's gain each round trip",
          "[emu]") {
  // A 1 kB message sets the pace (its sample: 1 kB over RTT + 6.9 ms, about 9 kB/s; the pace
  // 2.885 x that); then a 1 MB message. STARTUP paces round k of its busy period at pace x g^k.
  const Seconds rtt = 0.1, one_way = 0.05;
  const double g = kBbrHighGain;
  StartupPacing p(rtt, one_way, 1e7);
  p.arrived(p.hand_over(0, 1e3));  // slow start's first round: 1 kB leaves in 6.9 ms
  const double pace = p.rate();
  CHECK(pace == Approx(g * 1e3 / (rtt + 1e3 * rtt / kInitialWindowBytes)).epsilon(1e-12));
  const Seconds floor = p.hand_over(1.0, 1e6);
  // Rounds 0-5 (1.0 to 1.6 s) carry 0.1 s x pace x (g^6 - 1) / (g - 1); the rest leaves in round 6.
  const double six = rtt * pace * (std::pow(g, 6) - 1) / (g - 1);
  REQUIRE(six < 1e6);
  REQUIRE(six + rtt * pace * std::pow(g, 6) > 1e6);
  CHECK(floor == Approx(1.6 + (1e6 - six) / (pace * std::pow(g, 6)) + one_way).epsilon(1e-9));
  // The control: at the small message's pace throughout, 1 MB would take 35 s to leave.
  CHECK(1e6 / pace > 30);
  CHECK(floor - 1.0 < 0.8);
}

TEST_CASE("the warm floor ends once a busy period fills the path, and is off without a round trip",
          "[emu]") {
  StartupPacing p(0.1, 0.05, 1e7);
  p.hand_over(0, 1e5);
  p.arrived(0.06);
  CHECK(std::isfinite(p.hand_over(1, 1e5)));
  p.arrived(1.1);
  // 5 MB at 10 MB/s: 0.5 s, five round trips at the path's rate.
  p.hand_over(2, 5e6);
  p.arrived(2.55);
  CHECK(p.filled());
  CHECK(std::isinf(p.rate()));
  CHECK(std::isinf(-p.hand_over(3, 1e5)));
  StartupPacing none(0, 0, 1e7);
  none.hand_over(0, 1e5);
  none.arrived(0.01);
  CHECK(std::isinf(-none.hand_over(1, 1e5)));
  // Only the tcp model paces.
  const std::string two = "[[devices]]\ncount = 2\nup_mbps = 10\ndown_mbps = 10\nlatency_ms = 25\n";
  CHECK(links_of(parse_scenario("name = \"p\"\n" + two, "p.toml")).paced);
  CHECK_FALSE(
      links_of(parse_scenario("name = \"p\"\n[network]\nmodel = \"ideal\"\n" + two, "p.toml"))
          .paced);
}

// The emulator holds a message that its floor keeps: a 2-node star, RTT 100 ms, 10 MB/s.
TEST_CASE("the emulator delivers no sooner than the warm floor, and in order", "[emu]") {
  NetworkLinks links({mbps(80, 80, 25), mbps(80, 80, 25)});
  links.paced = true;
  StarNetwork net(links);
  // The same connection's floors, by the pacing model alone (its figures are worked by hand in
  // "the warm floor: slow start, ..." above).
  StartupPacing ref = links.pacing(0, 1);
  net.send(0, 1, 100'000, 1, 0);
  std::vector<Delivery> d = net.advance(1);
  REQUIRE(d.size() == 1);
  // Fresh: slow start's three round trips, well after the flow model's 60 ms.
  const Seconds fresh = ref.hand_over(0, 100'000);
  CHECK(d[0].at == Approx(fresh).epsilon(1e-9));
  CHECK(d[0].at > 0.06 + 0.2);
  ref.arrived(d[0].at);
  net.send(0, 1, 100'000, 2, 1);
  net.send(0, 1, 100'000, 3, 1);
  d = net.advance(2);
  REQUIRE(d.size() == 2);
  CHECK(d[0].token == 2);
  CHECK(d[1].token == 3);
  const Seconds a = ref.hand_over(1, 100'000), b = ref.hand_over(1, 100'000);
  CHECK(d[0].at == Approx(a).epsilon(1e-9));
  CHECK(d[1].at == Approx(b).epsilon(1e-9));
  CHECK(net.held_messages() == 3);
}

TEST_CASE("messages of one pair go one after the other on one connection, the latency paid once",
          "[emu]") {
  const std::vector<NodeLinks> links = {mbps(10, 10, 5), mbps(10, 10, 5)};
  const double b = 10 * kMbpsToBytesPerSecond;
  // Two equal messages sent together: the first is through after its own bytes, the second right
  // behind it; a small one sent a little later follows the second's last byte.
  const auto t = emulate(links, {{0, 0, 1, 500'000}, {0, 0, 1, 500'000}, {0.001, 0, 1, 100}});
  CHECK(t[0] == Approx(0.010 + 500'000 / b).epsilon(1e-12));
  CHECK(t[1] == Approx(0.010 + 1'000'000 / b).epsilon(1e-12));
  CHECK(t[2] == Approx(0.010 + 1'000'100 / b).epsilon(1e-12));
  // Alone, the small message takes its latency and its bytes.
  const auto alone = emulate(links, {{0.001, 0, 1, 100}});
  CHECK(alone[0] == Approx(0.011 + 100 / b).epsilon(1e-12));
  // Sent after the stream has gone idle, a message pays the latency again.
  const auto later = emulate(links, {{0, 0, 1, 100'000}, {1.0, 0, 1, 100'000}});
  CHECK(later[0] == Approx(0.010 + 100'000 / b).epsilon(1e-12));
  CHECK(later[1] == Approx(1.010 + 100'000 / b).epsilon(1e-12));
  // Sent while the one before is in flight but after its own latency would pass the earlier one's
  // end: it starts when its latency has passed.
  const auto gap = emulate(links, {{0, 0, 1, 1'000}, {0.005, 0, 1, 1'000}});
  CHECK(gap[0] == Approx(0.010 + 1'000 / b).epsilon(1e-12));
  CHECK(gap[1] == Approx(0.015 + 1'000 / b).epsilon(1e-12));
}

TEST_CASE("two connections from one node share its uplink, a queued message does not take a share",
          "[emu]") {
  // Node 0 sends two messages to node 1 and one to node 2 at once, over its 10 Mbit/s uplink: the
  // two connections get 5 Mbit/s each; 1's second message waits for its first.
  const std::vector<NodeLinks> links = {mbps(10, 100, 0), mbps(100, 100, 0), mbps(100, 100, 0)};
  const double b = 10 * kMbpsToBytesPerSecond;
  const auto t = emulate(links, {{0, 0, 1, 100'000}, {0, 0, 1, 100'000}, {0, 0, 2, 200'000}});
  CHECK(t[0] == Approx(200'000 / b).epsilon(1e-9));  // 100 kB at b / 2
  CHECK(t[1] == Approx(400'000 / b).epsilon(1e-9));  // then shares with 2's until both end
  CHECK(t[2] == Approx(400'000 / b).epsilon(1e-9));
}

TEST_CASE("senders into one downlink share it equally", "[emu]") {
  // Three fast senders, one slow receiver: each gets a third of its downlink.
  const std::vector<NodeLinks> links = {mbps(100, 100, 0), mbps(100, 100, 0), mbps(100, 100, 0),
                                        mbps(100, 12, 0)};
  const double d = 12 * kMbpsToBytesPerSecond, bytes = 3'000'000;
  const auto t = emulate(links, {{0, 0, 3, 3'000'000}, {0, 1, 3, 3'000'000}, {0, 2, 3, 3'000'000}});
  for (int i = 0; i < 3; ++i) CHECK(t[i] == Approx(3 * bytes / d).epsilon(1e-9));
}

TEST_CASE("a flow held back by a slow receiver leaves the rest of the uplink to the others",
          "[emu]") {
  // Uplink 100 Mbit/s; one receiver takes 10, the other 200: max-min gives them 10 and 90.
  const std::vector<NodeLinks> links = {mbps(100, 100, 0), mbps(100, 10, 0), mbps(100, 200, 0)};
  const double mb = kMbpsToBytesPerSecond;
  const auto t = emulate(links, {{0, 0, 1, 1'250'000}, {0, 0, 2, 9'000'000}});
  CHECK(t[0] == Approx(1'250'000 / (10 * mb)).epsilon(1e-9));
  CHECK(t[1] == Approx(9'000'000 / (90 * mb)).epsilon(1e-9));
}

// Regions (core/network/links.h): node 0 and 1 in region a, node 2 and 3 in region b, a link each
// way between a and b of 10 Mbit/s and 40 ms.
static NetworkLinks two_regions() {
  NetworkLinks links(
      {mbps(100, 100, 5), mbps(100, 100, 5), mbps(100, 100, 10), mbps(100, 100, 10)});
  links.region = {0, 0, 1, 1};
  links.regions = 2;
  links.region_names = {"a", "b"};
  links.between.assign(4, RegionLink{});
  links.between[1] = links.between[2] = {10 * kMbpsToBytesPerSecond, 0.040};
  return links;
}

TEST_CASE(
    "a message between regions takes the three links' latency plus its bytes over the slowest",
    "[emu]") {
  const NetworkLinks links = two_regions();
  const Bytes bytes = 1'000'000;
  const std::vector<Seconds> t = emulate(links, {{0, 0, 2, bytes}, {0, 1, 0, bytes}});
  CHECK(t[0] == Approx(0.005 + 0.040 + 0.010 + bytes / (10 * kMbpsToBytesPerSecond)).epsilon(1e-9));
  // Within a region: the two nodes' own links only.
  CHECK(t[1] == Approx(0.010 + bytes / (100 * kMbpsToBytesPerSecond)).epsilon(1e-9));
}

TEST_CASE("flows between two regions share the link between them, each direction its own",
          "[emu]") {
  const NetworkLinks links = two_regions();
  const Bytes bytes = 1'000'000;
  // 0 -> 2 and 1 -> 3 share a -> b (5 Mbit/s each); 2 -> 0 has b -> a to itself.
  const std::vector<Seconds> t =
      emulate(links, {{0, 0, 2, bytes}, {0, 1, 3, bytes}, {0, 2, 0, bytes}});
  const Seconds latency = 0.005 + 0.040 + 0.010;
  CHECK(t[0] == Approx(latency + bytes / (5 * kMbpsToBytesPerSecond)).epsilon(1e-9));
  CHECK(t[1] == Approx(latency + bytes / (5 * kMbpsToBytesPerSecond)).epsilon(1e-9));
  CHECK(t[2] == Approx(latency + bytes / (10 * kMbpsToBytesPerSecond)).epsilon(1e-9));
}

// The same trace through the simulator (SimGrid's links, sim/sim_network.h). Senders only send and
// receivers only receive, so a receiver is always waiting and records each message's arrival when
// it happens. Each pair carries two messages, at random times: some queue behind their pair's
// previous one, and many connections share links.
namespace {

// `network` is the scenario's [network] table; the emulator's links come from links_of(), as a real
// run's do.
// With `regions`, the nodes are spread over three regions joined by links slower than most nodes'
// own, so that messages between regions share them.
// `kernel_transfers`: the simulated network's limit on its kernel's transfers under way, beyond
// which carrier actors take the messages (sim/sim_network.h); both ways must give the same times.
void check_trace(const std::string& network, bool regions = false,
                 int kernel_transfers = SimNetwork::kKernelTransfers) {
  // One simulation per process (SimGrid): one trace, with every kind of contention.
  const unsigned seed = 11;
  const int senders = 6, receivers = 4, n = senders + receivers;
  std::string toml = "name = \"trace\"\n[network]\n" + network + "\n";
  std::mt19937 rng(seed);
  for (int i = 0; i < n; ++i) {
    // Mbit/s and ms; node 1 and receiver 7 have no latency at all.
    const double up = 1 + rng() % 200, down = 1 + rng() % 200,
                 lat = (i == 1 || i == 7) ? 0 : rng() % 60;
    toml += "[[devices]]\nup_mbps = " + std::to_string(up) +
            "\ndown_mbps = " + std::to_string(down) + "\nlatency_ms = " + std::to_string(lat) +
            "\n";
    if (regions) toml += "region = \"r" + std::to_string(i % 3) + "\"\n";
  }
  if (regions)
    toml +=
        "[[network.link]]\na = \"r0\"\nb = \"r1\"\nlatency_ms = 35\nmbps = 60\n"
        "[[network.link]]\na = \"r1\"\nb = \"r2\"\nlatency_ms = 0\nmbps = 150\n"
        "[[network.link]]\na = \"r0\"\nb = \"r2\"\nlatency_ms = 80\nmbps = 25\n";
  const Scenario s = parse_scenario(toml, "trace.toml");
  const NetworkLinks links = links_of(s);
  std::vector<Send> sends;
  // Under tcp, more rounds: a connection's floor holds from its second busy period on.
  const bool paced = links.paced;
  for (int round = 0; round < (paced ? 4 : 2); ++round)
    for (int a = 0; a < senders; ++a)
      for (int b = senders; b < n; ++b)
        // Under tcp, rounds 2 and 3 at 6 and 9 s, so that busy periods end between.
        sends.push_back({(paced && round >= 2 ? 3.0 * round : 0) + 0.2 + 0.05 * (rng() % 20), a, b,
                         static_cast<Bytes>(20'000 + 40'000 * (rng() % 25))});
  std::stable_sort(sends.begin(), sends.end(),
                   [](const Send& a, const Send& b) { return a.at < b.at; });
  int64_t held = 0;
  const std::vector<Seconds> emulated = emulate(links, sends, &held);

  std::vector<int> nodes(n);
  for (int i = 0; i < n; ++i) nodes[i] = i;
  std::vector<Seconds> simulated(sends.size(), -1);
  SimNetwork::limit_kernel_transfers(kernel_transfers);
  simulate(s, nodes, false, [&](NodeEnv& env, int node) {
    if (node < senders) {
      for (size_t k = 0; k < sends.size(); ++k) {
        if (sends[k].src != node) continue;
        env.clock.sleep_for(std::max(0.0, sends[k].at - env.clock.now()));
        Message m;
        m.kind = MsgKind::kForward;
        m.id = static_cast<int64_t>(k);
        m.bytes = sends[k].bytes;
        env.transport.send(sends[k].dst, std::move(m));
      }
      env.transport.flush();
      return;
    }
    const auto expected =
        std::count_if(sends.begin(), sends.end(), [&](const Send& x) { return x.dst == node; });
    for (int64_t got = 0; got < expected; ++got) {
      Message m = env.transport.recv();
      simulated[static_cast<size_t>(m.id)] = env.clock.now();
    }
  });
  double worst = 0;
  int queued = 0;
  std::map<std::pair<int, int>, Seconds> last;
  for (size_t k = 0; k < sends.size(); ++k) {
    REQUIRE(simulated[k] > 0);
    INFO("message " << k << ": " << sends[k].src << " -> " << sends[k].dst << ", " << sends[k].bytes
                    << " B at " << sends[k].at << " s; emulated " << emulated[k] << ", simulated "
                    << simulated[k]);
    Seconds& prev = last[{sends[k].src, sends[k].dst}];
    queued += prev > sends[k].at;
    prev = simulated[k];
    const double transfer = simulated[k] - sends[k].at;
    worst = std::max(worst, std::abs(emulated[k] - simulated[k]) / transfer);
    // The same model: only the float error of the event times separates them.
    CHECK(std::abs(emulated[k] - simulated[k]) <= 1e-6 * transfer);
  }
  INFO("worst relative difference in transfer time: " << worst);
  CHECK(worst <= 1e-6);
  // The trace exercises the connections' queues, and under tcp the warm floor.
  CHECK(queued >= 5);
  if (paced) CHECK(held >= 5);
  // ... and the ways the simulated network carries messages that its limit asks for.
  const auto total = static_cast<int64_t>(sends.size());
  CHECK(SimNetwork::kernel_messages() + SimNetwork::carrier_messages() == total);
  if (kernel_transfers == 0) CHECK(SimNetwork::kernel_messages() == 0);
  if (kernel_transfers >= static_cast<int>(sends.size()))
    CHECK(SimNetwork::carrier_messages() == 0);
  if (kernel_transfers > 0 && kernel_transfers < 10) {
    CHECK(SimNetwork::kernel_messages() >= 10);
    CHECK(SimNetwork::carrier_messages() >= 10);
  }
  if (regions) {
    // ... and the links between regions: some message's transfer took longer than its own two
    // links alone would allow.
    int bound_by_region = 0;
    for (size_t k = 0; k < sends.size(); ++k) {
      const int x = links.inter(sends[k].src, sends[k].dst);
      if (x < 0) continue;
      const double own = std::min(links.nodes[sends[k].src].up, links.nodes[sends[k].dst].down);
      bound_by_region += links.between[static_cast<size_t>(x)].bandwidth < own;
    }
    CHECK(bound_by_region >= 5);
  }
}

}  // namespace

TEST_CASE("a trace through the emulator gets the simulator's delivery times (ideal network)",
          "[emu][sim]") {
  check_trace("model = \"ideal\"");
}

TEST_CASE("a trace through the emulator gets the simulator's delivery times (tcp: TCP's window)",
          "[emu][sim]") {
  // Round trips up to 240 ms on links up to 200 Mbit/s: the window caps many of the flows.
  check_trace("model = \"tcp\"");
}

TEST_CASE("a trace through the emulator gets the simulator's delivery times (tcp, carriers)",
          "[emu][sim]") {
  check_trace("topology = \"regions\"\nmodel = \"tcp\"", true, 3);
}

TEST_CASE("a trace through the emulator gets the simulator's delivery times (regions)",
          "[emu][sim]") {
  check_trace("topology = \"regions\"\nmodel = \"ideal\"\nlatency_factor = 1.5", true);
}

TEST_CASE("a trace through the emulator gets the simulator's delivery times (carrier actors)",
          "[emu][sim]") {
  check_trace("model = \"ideal\"", false, 0);
}

TEST_CASE("a trace through the emulator gets the simulator's delivery times (kernel and carriers)",
          "[emu][sim]") {
  // Three of the kernel's transfers at most: the others, whichever pair they are of, go by carrier.
  check_trace("topology = \"regions\"\nmodel = \"ideal\"\nlatency_factor = 1.5", true, 3);
}

TEST_CASE("a trace through the emulator gets the simulator's delivery times (factors of one's own)",
          "[emu][sim]") {
  check_trace("model = \"ideal\"\nbandwidth_factor = 0.9\nlatency_factor = 2.5");
}
