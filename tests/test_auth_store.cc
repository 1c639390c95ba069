// The run secret (real/auth.h) and the authenticated rendezvous store (real/auth_store.h): a
// client with the secret gets c10d's store semantics; a client without it, a stray process that
// sends c10d TCPStore's 1 GiB request, an idle connection, and a server that does not know the
// secret are each refused with a message, and the store goes on serving.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "catch.h"
#include "core/error.h"
#include "real/auth.h"
#include "real/auth_store.h"

namespace {

namespace fs = std::filesystem;
using std::chrono::milliseconds;

const std::string kSecret = "the secret of this test run, 32B";

std::vector<uint8_t> bytes(const std::string& s) {
  return std::vector<uint8_t>(s.begin(), s.end());
}
std::string text(const std::vector<uint8_t>& v) { return std::string(v.begin(), v.end()); }
bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

// A raw TCP connection to 127.0.0.1:port.
int raw_connect(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<uint16_t>(port));
  REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  return fd;
}

// Everything the peer sends until it closes the connection (or `limit_ms` passes).
std::string read_until_closed(int fd, int limit_ms) {
  std::string got;
  const auto end = std::chrono::steady_clock::now() + milliseconds(limit_ms);
  for (;;) {
    const auto left =
        std::chrono::duration_cast<milliseconds>(end - std::chrono::steady_clock::now()).count();
    if (left <= 0) return got + "<open>";
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left)) <= 0) continue;
    char buf[4096];
    const ssize_t r = ::recv(fd, buf, sizeof buf, 0);
    if (r <= 0) return got;
    got.append(buf, static_cast<size_t>(r));
  }
}

}  // namespace

TEST_CASE("auth: MACs depend on every part and on the secret, secrets come from the environment",
          "[auth]") {
  const auto m = rv::auth::mac(kSecret, {"a", "bc"});
  CHECK(m == rv::auth::mac(kSecret, {"a", "bc"}));
  CHECK(m != rv::auth::mac(kSecret, {"ab", "c"}));  // parts are length-prefixed
  CHECK(m != rv::auth::mac(kSecret + "x", {"a", "bc"}));
  CHECK(rv::auth::same_mac(m, std::string_view(reinterpret_cast<const char*>(m.data()), m.size())));
  CHECK_FALSE(rv::auth::same_mac(m, "short"));
  CHECK(rv::auth::new_secret() != rv::auth::new_secret());
  const std::string fresh = rv::auth::new_secret();
  CHECK(fresh.size() == 64);
  CHECK(fresh.find_first_not_of("0123456789abcdef") == std::string::npos);

  const fs::path dir = fs::temp_directory_path() / ("rv-auth-test-" + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  ::unsetenv(rv::auth::kSecretEnv);
  ::unsetenv(rv::auth::kSecretFileEnv);
  try {
    rv::auth::secret_from_environment();
    FAIL("no secret was accepted");
  } catch (const rv::InputError& e) {
    CHECK(contains(e.what(), "RAVNEST_SECRET_FILE"));
  }
  const std::string file = (dir / "secret").string();
  rv::auth::write_secret_file(file, kSecret);
  struct stat st {};
  REQUIRE(::stat(file.c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0600);
  CHECK_THROWS_AS(rv::auth::write_secret_file(file, kSecret), rv::Error);  // never over a file
  ::setenv(rv::auth::kSecretFileEnv, file.c_str(), 1);
  CHECK(rv::auth::secret_from_environment() == kSecret);
  ::chmod(file.c_str(), 0644);
  try {
    rv::auth::secret_from_environment();
    FAIL("a secret other users may read was accepted");
  } catch (const rv::InputError& e) {
    CHECK(contains(e.what(), "other users may read it (mode 0644)"));
  }
  // A final newline (echo, an editor) is not part of the secret: the file agrees with
  // RAVNEST_SECRET.
  const std::string lined = (dir / "secret-with-newline").string();
  rv::auth::write_secret_file(lined, kSecret + "\n");
  ::setenv(rv::auth::kSecretFileEnv, lined.c_str(), 1);
  CHECK(rv::auth::secret_from_environment() == kSecret);
  ::unsetenv(rv::auth::kSecretFileEnv);
  ::setenv(rv::auth::kSecretEnv, "too short", 1);
  CHECK_THROWS_AS(rv::auth::secret_from_environment(), rv::InputError);
  ::setenv(rv::auth::kSecretEnv, kSecret.c_str(), 1);
  CHECK(rv::auth::secret_from_environment() == kSecret);
  ::unsetenv(rv::auth::kSecretEnv);
  fs::remove_all(dir);
}

TEST_CASE("auth store: a client with the secret gets c10d's store semantics", "[auth][store]") {
  rv::AuthStoreServer server(kSecret, "127.0.0.1", 0);
  REQUIRE(server.port() > 0);
  rv::AuthStore a(kSecret, "127.0.0.1", server.port(), milliseconds(5000));
  rv::AuthStore b(kSecret, "127.0.0.1", server.port(), milliseconds(5000));
  a.set("k", bytes("value"));
  CHECK(text(b.get("k")) == "value");
  CHECK(b.check({"k"}));
  CHECK_FALSE(b.check({"k", "absent"}));
  CHECK(a.add("n", 5) == 5);
  CHECK(b.add("n", -7) == -2);
  CHECK(text(a.get("n")) == "-2");
  CHECK(text(a.compareSet("k", bytes("value"), bytes("new"))) == "new");
  CHECK(text(a.compareSet("k", bytes("value"), bytes("other"))) == "new");  // no match: unchanged
  CHECK(text(a.compareSet("fresh", {}, bytes("first"))) == "first");
  CHECK(a.getNumKeys() == 3);
  CHECK(a.deleteKey("fresh"));
  CHECK_FALSE(a.deleteKey("fresh"));
  // get() and wait() wait for a key another client sets later.
  std::thread later([&] {
    std::this_thread::sleep_for(milliseconds(200));
    b.set("late", bytes("here"));
  });
  CHECK(text(a.get("late")) == "here");
  later.join();
  // A wait that times out says which keys it waited for.
  try {
    a.wait({"never"}, milliseconds(300));
    FAIL("the wait did not time out");
  } catch (const rv::PeerError& e) {
    CHECK(contains(e.what(), "never"));
  }
  // Limits: a value over 1 MiB is refused, and the connection still serves.
  try {
    a.set("big", std::vector<uint8_t>((size_t{1} << 20) + 1, 7));
    FAIL("an oversized value was stored");
  } catch (const rv::PeerError& e) {
    CHECK(contains(e.what(), "at most 1048576"));
  }
  CHECK(text(b.get("k")) == "new");
  // A clone (c10d::Store::clone() in LibTorch 2.5+) is a client of its own to the same store.
  auto c = a.clone();
  a.set("from-a", bytes("1"));
  CHECK(text(c->get("from-a")) == "1");
  c->set("from-clone", bytes("2"));
  CHECK(text(b.get("from-clone")) == "2");
  CHECK(c->getTimeout() == milliseconds(5000));
  CHECK(server.refused() == 0);
}

TEST_CASE(
    "auth store: a client without the secret is refused with a message, and the store goes on",
    "[auth][store]") {
  rv::AuthStoreServer server(kSecret, "127.0.0.1", 0);
  try {
    rv::AuthStore wrong("another run's secret, 32 bytes!!", "127.0.0.1", server.port(),
                        milliseconds(5000));
    FAIL("a client with the wrong secret was let in");
  } catch (const rv::InputError& e) {
    CHECK(contains(e.what(), "refused"));
    CHECK(contains(e.what(), "wrong run secret"));
  }
  CHECK(server.refused() == 1);
  rv::AuthStore good(kSecret, "127.0.0.1", server.port(), milliseconds(5000));
  good.set("k", bytes("v"));
  CHECK(text(good.get("k")) == "v");
}

TEST_CASE("auth store: TCPStore's 1 GiB request, garbage and idle connections are refused cheaply",
          "[auth][store]") {
  rv::StoreLimits limits;
  limits.handshake_s = 0.5;
  rv::AuthStoreServer server(kSecret, "127.0.0.1", 0, limits);
  {
    // The 17 bytes that make c10d's TCPStore allocate 1 GiB: a query type (SET), then a key
    // length of 2^30 (u64, little-endian), then the start of the key.
    const int fd = raw_connect(server.port());
    const unsigned char req[17] = {0, 0, 0, 0, 0x40, 0, 0, 0, 0, 'k', 'e', 'y', 0, 0, 0, 0, 0};
    REQUIRE(::send(fd, req, sizeof req, MSG_NOSIGNAL) == 17);
    const std::string got = read_until_closed(fd, 5000);
    ::close(fd);
    CHECK(contains(got, "not a ravnest store handshake"));
  }
  {
    // The same in this store's own framing: a frame of 2^30 bytes announced before the handshake.
    const int fd = raw_connect(server.port());
    const unsigned char req[4] = {0x40, 0, 0, 0};
    REQUIRE(::send(fd, req, sizeof req, MSG_NOSIGNAL) == 4);
    const std::string got = read_until_closed(fd, 5000);
    ::close(fd);
    CHECK(contains(got, "a handshake frame of 1073741824 bytes"));
  }
  {
    // A well-formed handshake with a made-up proof.
    const int fd = raw_connect(server.port());
    std::string hello = std::string("RVC1") + std::string(16, 'n') + std::string(32, 'p');
    const std::string frame = rv::auth::be32(static_cast<uint32_t>(hello.size())) + hello;
    REQUIRE(::send(fd, frame.data(), frame.size(), MSG_NOSIGNAL) ==
            static_cast<ssize_t>(frame.size()));
    const std::string got = read_until_closed(fd, 5000);
    ::close(fd);
    CHECK(contains(got, "wrong run secret"));
  }
  {
    // A connection that says nothing is dropped after the handshake time.
    const int fd = raw_connect(server.port());
    const std::string got = read_until_closed(fd, 5000);
    ::close(fd);
    CHECK(contains(got, "no proof of the run secret within"));
  }
  CHECK(server.refused() == 4);
  rv::AuthStore good(kSecret, "127.0.0.1", server.port(), milliseconds(5000));
  good.set("still", bytes("serving"));
  CHECK(text(good.get("still")) == "serving");
}

TEST_CASE("auth store: a server that does not know the secret cannot pose as the store",
          "[auth][store]") {
  // A store of another run on the port this client was given: it refuses the client, which says so.
  rv::AuthStoreServer other("the secret of some other run, 32", "127.0.0.1", 0);
  try {
    rv::AuthStore c(kSecret, "127.0.0.1", other.port(), milliseconds(3000));
    FAIL("connected to a store of another run");
  } catch (const rv::InputError& e) {
    CHECK(contains(e.what(), "refused this rank"));
  }
  // A process that is not a store at all (it accepts and sends garbage).
  const int lfd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::bind(lfd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  REQUIRE(::listen(lfd, 4) == 0);
  socklen_t len = sizeof a;
  ::getsockname(lfd, reinterpret_cast<sockaddr*>(&a), &len);
  std::thread impostor([&] {
    const int fd = ::accept(lfd, nullptr, nullptr);
    const std::string junk = std::string("\x00\x00\x00\x14", 4) + "RVS1" + std::string(16, 'x');
    (void)!::send(fd, junk.data(), junk.size(), MSG_NOSIGNAL);
    read_until_closed(fd, 3000);
    ::close(fd);
  });
  try {
    rv::AuthStore c(kSecret, "127.0.0.1", ntohs(a.sin_port), milliseconds(3000));
    FAIL("trusted a server that proved nothing");
  } catch (const rv::Error& e) {
    CHECK(contains(e.what(), "127.0.0.1"));
  }
  impostor.join();
  ::close(lfd);
}

TEST_CASE("auth store: a port that is taken is an error that names it", "[auth][store]") {
  rv::AuthStoreServer first(kSecret, "127.0.0.1", 0);
  try {
    rv::AuthStoreServer second(kSecret, "127.0.0.1", first.port());
    FAIL("two stores on one port");
  } catch (const rv::Error& e) {
    CHECK(contains(e.what(), "127.0.0.1:" + std::to_string(first.port())));
  }
}

TEST_CASE(
    "auth store: beyond the unauthenticated limit, connections wait rather than being refused",
    "[auth][store]") {
  rv::StoreLimits limits;
  limits.max_unauthenticated = 2;
  limits.handshake_s = 0.5;
  rv::AuthStoreServer server(kSecret, "127.0.0.1", 0, limits);
  // Three strangers hold connections without a word; a rank still gets in once they time out.
  std::vector<int> idle;
  for (int i = 0; i < 3; ++i) idle.push_back(raw_connect(server.port()));
  rv::AuthStore good(kSecret, "127.0.0.1", server.port(), milliseconds(10000));
  good.set("k", bytes("v"));
  CHECK(text(good.get("k")) == "v");
  for (int fd : idle) ::close(fd);
  CHECK(server.refused() >= 2);  // the strangers, for want of a proof (not the rank)
}
