// The network emulator shared by node processes (emu/emulator_service.h): a receiver holds each
// message until the server's model, on an injected clock, has delivered it; bad records and a
// lost server end in errors, never a hang.
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <thread>

#include "catch.h"
#include "core/error.h"
#include "emu/emulator_service.h"
#include "emu_support.h"
#include "exec/wall_env.h"
#include "loopback/loopback.h"

using namespace rv;
namespace fs = std::filesystem;

namespace {

using test::ManualClock;
using test::sized;

const double kMb = kMbpsToBytesPerSecond;

std::string socket_path(const std::string& name) {
  return (fs::temp_directory_path() / ("rv-emu-" + std::to_string(getpid()) + "-" + name + ".sock"))
      .string();
}

// Waits (up to 10 s of wall time: a bound against hanging, not a timing check) until `done`.
template <typename F>
bool eventually(F done) {
  for (int i = 0; i < 10000; ++i) {
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return done();
}

// A raw connection that writes whatever records a test makes up.
int raw_connect(const std::string& path) {
  const int fd = ::socket(AF_UNIX, SOCK_SEQPACKET, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  REQUIRE(::connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) == 0);
  return fd;
}

}  // namespace

TEST_CASE("a message is received when the launcher's model delivers it, not when it arrives",
          "[emu]") {
  // Node 0: 8 Mbit/s up, 20 ms; node 1: 4 Mbit/s down, 10 ms; node 2 sends to 1 as well.
  const std::vector<NodeLinks> links = {
      {8 * kMb, 8 * kMb, 0.020}, {8 * kMb, 4 * kMb, 0.010}, {8 * kMb, 8 * kMb, 0.020}};
  ManualClock clock;
  EmulatorServer server(socket_path("deliver"), links, clock);
  server.start(false);
  LoopbackHub hub(3, 10.0);
  LoopbackTransport t0(hub, 0), t1(hub, 1), t2(hub, 2);
  EmulatorClient c0(server.path(), 0, 10.0), c1(server.path(), 1, 10.0), c2(server.path(), 2, 10.0);
  ShapedTransport s0(t0, c0), s1(t1, c1), s2(t2, c2);
  s0.send(1, sized(7, 500'000));
  s0.send(1, sized(9, 1'000));
  s2.send(1, sized(8, 500'000));
  REQUIRE(eventually([&] { return server.network().submitted() == 3; }));
  s0.flush();
  s2.flush();
  // The two connections into node 1 share its downlink from 30 ms on, so messages 7 and 8 are
  // through together; message 9 waited behind 7 on its pair's connection and follows alone.
  const Seconds both = 0.030 + 1'000'000 / (4 * kMb), due = 0.030 + 1'001'000 / (4 * kMb);
  clock.set(both - 1e-6);
  server.network().pump();
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  CHECK_FALSE(s1.try_recv().has_value());  // all three are here, none delivered
  clock.set(both);
  server.network().pump();
  std::vector<int64_t> got;
  REQUIRE(eventually([&] {
    while (auto m = s1.try_recv()) got.push_back(m->id);
    return got.size() == 2;
  }));
  std::sort(got.begin(), got.end());
  CHECK(got == std::vector<int64_t>{7, 8});
  clock.set(due - 1e-6);
  server.network().pump();
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  CHECK_FALSE(s1.try_recv().has_value());
  clock.set(due);
  server.network().pump();
  REQUIRE(eventually([&] {
    while (auto m = s1.try_recv()) got.push_back(m->id);
    return got.size() == 3;
  }));
  CHECK(got.back() == 9);
  CHECK(server.error().empty());
}

TEST_CASE("a receiver waiting in recv() gets each message on delivery, in order", "[emu]") {
  const std::vector<NodeLinks> links = {{800 * kMb, 800 * kMb, 0.001},
                                        {800 * kMb, 800 * kMb, 0.001}};
  WallClock clock;
  EmulatorServer server(socket_path("wall"), links, clock);
  server.start();
  LoopbackHub hub(2, 10.0);
  LoopbackTransport t0(hub, 0), t1(hub, 1);
  EmulatorClient c0(server.path(), 0, 10.0), c1(server.path(), 1, 10.0);
  ShapedTransport s0(t0, c0), s1(t1, c1);
  for (int i = 0; i < 30; ++i) s0.send(1, sized(i, 20'000));
  s0.flush();
  std::vector<int64_t> got, want;
  for (int i = 0; i < 30; ++i) {
    got.push_back(s1.recv().id);
    want.push_back(i);
  }
  CHECK(got == want);
}

TEST_CASE("deliveries to a node that has not joined yet wait for it", "[emu]") {
  const std::vector<NodeLinks> links = {{kMb, kMb, 0}, {kMb, kMb, 0}};
  ManualClock clock;
  EmulatorServer server(socket_path("late"), links, clock);
  server.start(false);
  LoopbackHub hub(2, 10.0);
  LoopbackTransport t0(hub, 0), t1(hub, 1);
  EmulatorClient c0(server.path(), 0, 10.0);
  ShapedTransport s0(t0, c0);
  s0.send(1, sized(3, 1000));
  REQUIRE(eventually([&] { return server.network().submitted() == 1; }));
  clock.set(1.0);
  server.network().pump();  // delivered before node 1 is there
  EmulatorClient c1(server.path(), 1, 10.0);
  ShapedTransport s1(t1, c1);
  CHECK(s1.recv().id == 3);
}

TEST_CASE("the server refuses bad records and names the node, the node fails, not hangs", "[emu]") {
  const std::vector<NodeLinks> links = {{kMb, kMb, 0}, {kMb, kMb, 0}};
  ManualClock clock;
  EmulatorServer server(socket_path("bad"), links, clock);
  server.start(false);

  SECTION("a rank out of range") {
    EmulatorClient c(server.path(), 5, 10.0);
    LoopbackHub hub(2, 1.0);
    LoopbackTransport t(hub, 0);
    REQUIRE(eventually([&] { return !server.error().empty(); }));
    CHECK(server.error().find("rank 5 of 2") != std::string::npos);
    // The connection is closed: the node's next step fails with a PeerError.
    CHECK_THROWS_AS(
        [&] {
          for (int i = 0; i < 100; ++i) {
            c.submit(t, 5, 1, sized(1, 100));
            std::this_thread::sleep_for(std::chrono::milliseconds(10));
          }
        }(),
        PeerError);
  }
  // The server keeps its first error: one bad connection per section.
  auto refused = [&](const std::vector<int64_t>& words, const std::string& says) {
    const int fd = raw_connect(server.path());
    REQUIRE(::send(fd, words.data(), words.size() * 8, 0) ==
            static_cast<ssize_t>(words.size() * 8));
    REQUIRE(eventually([&] { return !server.error().empty(); }));
    CHECK(server.error().find(says) != std::string::npos);
    char buf[32];
    CHECK(::recv(fd, buf, sizeof buf, 0) == 0);  // closed by the server
    ::close(fd);
  };
  SECTION("a send before its hello") { refused({2, 0, 1, 100}, "did not start with a hello"); }
  SECTION("a record of the wrong size") { refused({1, 0, 0}, "a record of the wrong size"); }
  SECTION("a message to a rank that does not exist") {
    const int fd = raw_connect(server.path());
    const int64_t hello[4] = {1, 0, 0, 0}, send[4] = {2, 0, 9, 100};
    REQUIRE(::send(fd, hello, sizeof hello, 0) == sizeof hello);
    REQUIRE(::send(fd, send, sizeof send, 0) == sizeof send);
    REQUIRE(eventually([&] { return !server.error().empty(); }));
    CHECK(server.error().find("rank 0 sent to rank 9 of 2") != std::string::npos);
    ::close(fd);
  }
}

TEST_CASE("a node whose emulator has gone fails with a PeerError instead of waiting", "[emu]") {
  const std::vector<NodeLinks> links = {{kMb, kMb, 0}, {kMb, kMb, 0}};
  ManualClock clock;
  LoopbackHub hub(2, 60.0);
  LoopbackTransport t0(hub, 0), t1(hub, 1);
  auto server = std::make_unique<EmulatorServer>(socket_path("gone"), links, clock);
  server->start(false);
  EmulatorClient c0(server->path(), 0, 60.0), c1(server->path(), 1, 60.0);
  ShapedTransport s0(t0, c0), s1(t1, c1);
  s0.send(1, sized(1, 1000));
  REQUIRE(eventually([&] { return server->network().submitted() == 1; }));
  server.reset();                         // the launcher is gone; the message is never delivered
  CHECK_THROWS_AS(s1.recv(), PeerError);  // at once, not after the 60 s timeout
  CHECK_THROWS_AS(EmulatorClient(socket_path("gone"), 0, 1.0), PeerError);
}

TEST_CASE("a receiver that sees no delivery for its timeout fails with a PeerError", "[emu]") {
  const std::vector<NodeLinks> links = {{kMb, kMb, 0}, {kMb, kMb, 0}};
  ManualClock clock;  // never moves: nothing is ever delivered
  EmulatorServer server(socket_path("silent"), links, clock);
  server.start(false);
  LoopbackHub hub(2, 60.0);
  LoopbackTransport t0(hub, 0), t1(hub, 1);
  EmulatorClient c0(server.path(), 0, 0.2), c1(server.path(), 1, 0.2);
  ShapedTransport s0(t0, c0), s1(t1, c1);
  s0.send(1, sized(1, 1000));
  CHECK_THROWS_AS(s1.recv(), PeerError);
}
