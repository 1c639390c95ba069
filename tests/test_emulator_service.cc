// The network emulator shared by node processes (emu/emulator_service.h): nodes' clients hold
// their messages until the server's model, on an injected clock, releases them; bad records and a
// lost server end in errors, never a hang.
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <thread>

#include "catch.h"
#include "core/error.h"
#include "emu/emulator_service.h"
#include "loopback/loopback.h"

using namespace rv;
namespace fs = std::filesystem;

namespace {

class ManualClock : public Clock {
 public:
  Seconds now() const override { return t_.load(); }
  void sleep_for(Seconds s) override { t_ = t_.load() + s; }
  void set(Seconds t) { t_ = t; }

 private:
  std::atomic<double> t_{0};
};

const double kMb = kMbpsToBytesPerSecond;

std::string socket_path(const std::string& name) {
  return (fs::temp_directory_path() / ("rv-emu-" + std::to_string(getpid()) + "-" + name + ".sock"))
      .string();
}

Message sized(int64_t id, Bytes bytes) {
  Message m;
  m.kind = MsgKind::kForward;
  m.id = id;
  m.bytes = bytes;
  return m;
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

TEST_CASE("a node's message is handed over when the launcher's model releases it", "[emu]") {
  // Node 0: 8 Mbit/s up, 20 ms; node 1: 4 Mbit/s down, 10 ms; node 2 sends to 1 as well.
  const std::vector<NodeLinks> links = {
      {8 * kMb, 8 * kMb, 0.020}, {8 * kMb, 4 * kMb, 0.010}, {8 * kMb, 8 * kMb, 0.020}};
  ManualClock clock;
  EmulatorServer server(socket_path("release"), links, clock);
  server.start(false);
  LoopbackHub hub(3, 10.0);
  LoopbackTransport t0(hub, 0), t2(hub, 2);
  EmulatorClient c0(server.path(), 0), c2(server.path(), 2);
  ShapedTransport s0(t0, c0), s2(t2, c2);
  s0.send(1, sized(7, 500'000));
  s2.send(1, sized(8, 500'000));
  REQUIRE(eventually([&] { return server.network().submitted() == 2; }));
  // Both flows share node 1's downlink from 30 ms on: 1 MB at 4 Mbit/s.
  const Seconds due = 0.030 + 1'000'000 / (4 * kMb);
  clock.set(due - 1e-6);
  server.network().pump();
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  CHECK_FALSE(hub.try_take(1).has_value());
  clock.set(due);
  const Seconds next = server.network().pump();
  INFO("next event after the due time: " << next << ", error: " << server.error());
  std::vector<int64_t> got;
  REQUIRE(eventually([&] {
    while (auto m = hub.try_take(1)) got.push_back(m->id);
    return got.size() == 2;
  }));
  std::sort(got.begin(), got.end());
  CHECK(got == std::vector<int64_t>{7, 8});
  s0.flush();  // nothing held any more: returns
  s2.flush();
  CHECK(server.error().empty());
}

TEST_CASE("on the wall clock, a node's sends arrive in order and flush waits for them", "[emu]") {
  const std::vector<NodeLinks> links = {{800 * kMb, 800 * kMb, 0.001}, {800 * kMb, 800 * kMb, 0.001}};
  struct Wall : Clock {
    std::chrono::steady_clock::time_point t0 = std::chrono::steady_clock::now();
    Seconds now() const override {
      return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    }
    void sleep_for(Seconds s) override { std::this_thread::sleep_for(std::chrono::duration<double>(s)); }
  } clock;
  EmulatorServer server(socket_path("wall"), links, clock);
  server.start();
  LoopbackHub hub(2, 10.0);
  LoopbackTransport t0(hub, 0), t1(hub, 1);
  EmulatorClient c0(server.path(), 0);
  ShapedTransport s0(t0, c0);
  for (int i = 0; i < 30; ++i) s0.send(1, sized(i, 20'000));
  s0.flush();
  std::vector<int64_t> got, want;
  for (int i = 0; i < 30; ++i) {
    got.push_back(t1.recv().id);
    want.push_back(i);
  }
  CHECK(got == want);
}

TEST_CASE("the server refuses bad records and names the node; the node fails, not hangs", "[emu]") {
  const std::vector<NodeLinks> links = {{kMb, kMb, 0}, {kMb, kMb, 0}};
  ManualClock clock;
  EmulatorServer server(socket_path("bad"), links, clock);
  server.start(false);

  SECTION("a rank out of range") {
    EmulatorClient c(server.path(), 5);
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
    REQUIRE(::send(fd, words.data(), words.size() * 8, 0) == static_cast<ssize_t>(words.size() * 8));
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
  LoopbackHub hub(2, 1.0);
  LoopbackTransport t0(hub, 0);
  auto server = std::make_unique<EmulatorServer>(socket_path("gone"), links, clock);
  server->start(false);
  EmulatorClient c0(server->path(), 0);
  ShapedTransport s0(t0, c0);
  s0.send(1, sized(1, 1000));
  REQUIRE(eventually([&] { return server->network().submitted() == 1; }));
  server.reset();  // the launcher is gone, the message never released
  CHECK_THROWS_AS(s0.flush(), PeerError);
  CHECK_THROWS_AS(EmulatorClient(socket_path("gone"), 0), PeerError);
}
