#include "real/auth_store.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <map>
#include <thread>
#include <utility>

#include "core/error.h"
#include "real/auth.h"

namespace rv {
namespace {

using Clock = std::chrono::steady_clock;

// Requests (first byte of a frame after the handshake) and replies.
enum Op : char {
  kSet = 'S',         // key value                 -> kOk
  kGet = 'G',         // key                       -> kValue value | kNotFound
  kAdd = 'A',         // key i64                   -> kInt (the new value; stored as decimal text)
  kCompareSet = 'C',  // key expected desired      -> kValue (the value now held)
  kDelete = 'D',      // key                       -> kBool
  kCheck = 'K',       // n keys                    -> kBool (all present)
  kNumKeys = 'M',     //                           -> kInt
  kWait = 'W',  // ms(u64) n keys            -> kReady | kTimeout, once all are present or at the
                // deadline
};
enum Reply : char {
  kOk = 'O',
  kValue = 'V',
  kNotFound = 'N',
  kInt = 'I',
  kBool = 'B',
  kReady = 'R',
  kTimeout = 'T',
  kFail = 'E'
};

constexpr size_t kHandshakeFrameMax = 64;
constexpr size_t kMaxBuffered = size_t{8} << 20;  // per connection, in and out
constexpr const char* kServerHello = "RVS1";
constexpr const char* kClientHello = "RVC1";

void put_u32(std::string& s, uint32_t v) { s += auth::be32(v); }
void put_u64(std::string& s, uint64_t v) {
  put_u32(s, static_cast<uint32_t>(v >> 32));
  put_u32(s, static_cast<uint32_t>(v));
}
void put_str(std::string& s, std::string_view v) {
  put_u32(s, static_cast<uint32_t>(v.size()));
  s.append(v.data(), v.size());
}
std::string framed(const std::string& body) {
  std::string f;
  put_u32(f, static_cast<uint32_t>(body.size()));
  return f + body;
}

// Reads a frame's fields; any read past its end is a malformed frame (rv::InputError).
class Reader {
 public:
  explicit Reader(std::string_view s) : s_(s) {}
  char op() { return static_cast<char>(take(1)[0]); }
  uint32_t u32() {
    const std::string_view b = take(4);
    return (uint32_t{static_cast<uint8_t>(b[0])} << 24) |
           (uint32_t{static_cast<uint8_t>(b[1])} << 16) |
           (uint32_t{static_cast<uint8_t>(b[2])} << 8) | uint32_t{static_cast<uint8_t>(b[3])};
  }
  uint64_t u64() {
    const uint64_t hi = u32();
    return (hi << 32) | u32();
  }
  std::string_view str() { return take(u32()); }
  std::string_view take(size_t n) {
    if (n > s_.size() - at_) throw InputError("a malformed store frame (cut short)");
    const std::string_view v = s_.substr(at_, n);
    at_ += n;
    return v;
  }
  bool done() const { return at_ == s_.size(); }

 private:
  std::string_view s_;
  size_t at_ = 0;
};

std::string errno_str() { return std::strerror(errno); }

// The addresses of host:port (passive: for bind).
addrinfo* resolve(const std::string& host, int port, bool passive) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = passive ? AI_PASSIVE : 0;
  addrinfo* res = nullptr;
  const int rc = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res);
  if (rc != 0) throw Error("cannot resolve '" + host + "': " + ::gai_strerror(rc));
  return res;
}

std::string peer_name(const sockaddr_storage& a) {
  char host[INET6_ADDRSTRLEN] = "?";
  int port = 0;
  if (a.ss_family == AF_INET) {
    const auto* v4 = reinterpret_cast<const sockaddr_in*>(&a);
    ::inet_ntop(AF_INET, &v4->sin_addr, host, sizeof host);
    port = ntohs(v4->sin_port);
  } else if (a.ss_family == AF_INET6) {
    const auto* v6 = reinterpret_cast<const sockaddr_in6*>(&a);
    ::inet_ntop(AF_INET6, &v6->sin6_addr, host, sizeof host);
    port = ntohs(v6->sin6_port);
  }
  return std::string(host) + ":" + std::to_string(port);
}

}  // namespace

// ---- the server ----

struct AuthStoreServer::Impl {
  struct Conn {
    int fd = -1;
    std::string name;
    std::string in, out;
    bool authed = false;
    bool closing = false;  // close once `out` is sent
    std::string nonce;     // the server's, for the handshake
    Clock::time_point handshake_deadline;
    std::vector<std::string> wait_keys;  // a pending wait, if not empty
    Clock::time_point wait_deadline;
  };

  std::string secret;
  StoreLimits limits;
  int listen_fd = -1;
  int port = 0;
  int wake[2] = {-1, -1};
  std::thread thread;
  std::map<std::string, std::string> data;
  size_t total = 0;
  std::vector<Conn> conns;
  mutable std::mutex mu;  // refused counts
  int64_t refused = 0;
  std::string last_refusal;

  void refuse(Conn& c, const std::string& why) {
    {
      std::lock_guard<std::mutex> lock(mu);
      ++refused;
      last_refusal = why;
    }
    // Printed up to 10 times, then every 1,000th (a flood of strangers must not stall the store).
    const int64_t k = refused;
    if (k <= 10 || k % 1000 == 0)
      std::cerr << "ravnest: the rendezvous store (port " << port << ") refused a connection from "
                << c.name << ": " << why
                << (k == 10 ? " (further refusals: every 1,000th is shown)" : "") << std::endl;
    c.out += framed("NO" + why);
    c.closing = true;
  }

  void reply(Conn& c, char r, const std::string& body = {}) {
    c.out += framed(std::string(1, r) + body);
  }

  bool has_all(const std::vector<std::string>& keys) const {
    return std::all_of(keys.begin(), keys.end(),
                       [&](const std::string& k) { return data.count(k) != 0; });
  }

  void store(const std::string& key, std::string value) {
    auto it = data.find(key);
    if (it != data.end()) {
      total -= it->first.size() + it->second.size();
      it->second = std::move(value);
      total += it->first.size() + it->second.size();
    } else {
      total += key.size() + value.size();
      data.emplace(key, std::move(value));
    }
  }

  // Whether key and value fit the limits; replies with the error if not.
  bool fits(Conn& c, std::string_view key, size_t value_bytes) {
    if (key.size() > limits.max_key) {
      reply(c, kFail,
            "a key of " + std::to_string(key.size()) + " bytes (at most " +
                std::to_string(limits.max_key) + ")");
      return false;
    }
    if (value_bytes > limits.max_value) {
      reply(c, kFail,
            "a value of " + std::to_string(value_bytes) + " bytes (at most " +
                std::to_string(limits.max_value) + ")");
      return false;
    }
    const auto it = data.find(std::string(key));
    const size_t now = it == data.end() ? 0 : it->first.size() + it->second.size();
    if (total - now + key.size() + value_bytes > limits.max_total) {
      reply(c, kFail, "the store is full (" + std::to_string(limits.max_total) + " bytes)");
      return false;
    }
    return true;
  }

  std::vector<std::string> read_keys(Conn& c, Reader& r, bool* ok) {
    const uint32_t n = r.u32();
    std::vector<std::string> keys;
    if (n > limits.max_wait_keys) {
      reply(c, kFail,
            std::to_string(n) + " keys in one request (at most " +
                std::to_string(limits.max_wait_keys) + ")");
      *ok = false;
      return keys;
    }
    for (uint32_t i = 0; i < n; ++i) keys.emplace_back(r.str());
    *ok = true;
    return keys;
  }

  void handshake(Conn& c, std::string_view frame) {
    Reader r(frame);
    if (frame.size() != 4 + auth::kNonceBytes + auth::kMacBytes || r.take(4) != kClientHello) {
      refuse(c, "not a ravnest store handshake");
      return;
    }
    const std::string_view nonce_c = r.take(auth::kNonceBytes);
    const std::string_view proof = r.take(auth::kMacBytes);
    if (!auth::same_mac(auth::mac(secret, {"store-client", c.nonce, nonce_c}), proof)) {
      refuse(c, "wrong run secret (the proof does not match this run's secret)");
      return;
    }
    const auth::Mac mine = auth::mac(secret, {"store-server", nonce_c, c.nonce});
    c.out += framed("OK" + std::string(mine.begin(), mine.end()));
    c.authed = true;
  }

  // One request of an authenticated client; its reply goes to c.out.
  void serve(Conn& c, std::string_view frame) {
    Reader r(frame);
    const char op = r.op();
    switch (op) {
      case kSet:
        return serve_set(c, r);
      case kGet:
        return serve_get(c, r);
      case kAdd:
        return serve_add(c, r);
      case kCompareSet:
        return serve_compare_set(c, r);
      case kDelete:
        return serve_delete(c, r);
      case kCheck:
        return serve_check(c, r);
      case kNumKeys:
        return serve_num_keys(c);
      case kWait:
        return serve_wait(c, r);
      default:
        reply(c, kFail, "unknown request");
        c.closing = true;
        return;
    }
  }

  void serve_set(Conn& c, Reader& r) {
    const std::string_view key = r.str();
    const std::string_view value = r.str();
    if (fits(c, key, value.size())) {
      store(std::string(key), std::string(value));
      reply(c, kOk);
    }
  }

  void serve_get(Conn& c, Reader& r) {
    const auto it = data.find(std::string(r.str()));
    if (it == data.end())
      reply(c, kNotFound);
    else
      reply(c, kValue, it->second);
  }

  void serve_add(Conn& c, Reader& r) {
    const std::string key(r.str());
    const int64_t by = static_cast<int64_t>(r.u64());
    int64_t v = 0;
    const auto it = data.find(key);
    if (it != data.end()) {
      try {
        size_t used = 0;
        v = std::stoll(it->second, &used);
        if (used != it->second.size()) throw std::invalid_argument("trailing");
      } catch (const std::exception&) {
        reply(c, kFail, "add() to key '" + key.substr(0, 64) + "', which does not hold an integer");
        return;
      }
    }
    // Two's complement wrap, as the other c10d stores do, without undefined behaviour.
    v = static_cast<int64_t>(static_cast<uint64_t>(v) + static_cast<uint64_t>(by));
    const std::string text = std::to_string(v);
    if (fits(c, key, text.size())) {
      store(key, text);
      std::string body;
      put_u64(body, static_cast<uint64_t>(v));
      reply(c, kInt, body);
    }
  }

  void serve_compare_set(Conn& c, Reader& r) {
    const std::string key(r.str());
    const std::string_view expected = r.str();
    const std::string_view desired = r.str();
    const auto it = data.find(key);
    if ((it == data.end() && expected.empty()) || (it != data.end() && it->second == expected)) {
      if (!fits(c, key, desired.size())) return;
      store(key, std::string(desired));
      reply(c, kValue, std::string(desired));
    } else {
      reply(c, kValue, it == data.end() ? std::string(expected) : it->second);
    }
  }

  void serve_delete(Conn& c, Reader& r) {
    const auto it = data.find(std::string(r.str()));
    const bool had = it != data.end();
    if (had) {
      total -= it->first.size() + it->second.size();
      data.erase(it);
    }
    reply(c, kBool, std::string(1, had ? 1 : 0));
  }

  void serve_check(Conn& c, Reader& r) {
    bool ok = false;
    const auto keys = read_keys(c, r, &ok);
    if (ok) reply(c, kBool, std::string(1, has_all(keys) ? 1 : 0));
  }

  void serve_num_keys(Conn& c) {
    std::string body;
    put_u64(body, data.size());
    reply(c, kInt, body);
  }

  // Replies at once if every key is there; else the wait is pending (wake_waiters()).
  void serve_wait(Conn& c, Reader& r) {
    const uint64_t ms = std::min<uint64_t>(r.u64(), uint64_t{30} * 24 * 3600 * 1000);
    bool ok = false;
    auto keys = read_keys(c, r, &ok);
    if (!ok) return;
    if (has_all(keys)) {
      reply(c, kReady);
    } else {
      c.wait_keys = std::move(keys);
      c.wait_deadline = Clock::now() + std::chrono::milliseconds(ms);
    }
  }

  // Frames complete in c.in, handled in order. False if the connection is to be dropped at once.
  bool consume(Conn& c) {
    for (;;) {
      if (c.closing || !c.wait_keys.empty() || c.in.size() < 4) return true;
      Reader r(c.in);
      const uint32_t len = r.u32();
      // (A check or wait of many keys may be longer than one value: up to 4 MiB.)
      const size_t max = c.authed
                             ? std::max(limits.max_key * 2 + limits.max_value + 64, size_t{4} << 20)
                             : kHandshakeFrameMax;
      if (len > max) {
        if (!c.authed) {
          refuse(c, "a handshake frame of " + std::to_string(len) + " bytes (at most " +
                        std::to_string(kHandshakeFrameMax) + ")");
          return true;
        }
        reply(
            c, kFail,
            "a request of " + std::to_string(len) + " bytes (at most " + std::to_string(max) + ")");
        c.closing = true;
        return true;
      }
      if (c.in.size() < 4 + size_t{len}) return true;
      const std::string frame = c.in.substr(4, len);
      c.in.erase(0, 4 + size_t{len});
      try {
        if (c.authed)
          serve(c, frame);
        else
          handshake(c, frame);
      } catch (const std::exception& e) {  // a malformed frame; or no memory, no randomness
        if (c.authed) {
          reply(c, kFail, e.what());
          c.closing = true;
        } else {
          refuse(c, e.what());
        }
      }
    }
  }

  void wake_waiters(Clock::time_point now) {
    for (Conn& c : conns) {
      if (c.wait_keys.empty()) continue;
      if (has_all(c.wait_keys)) {
        c.wait_keys.clear();
        reply(c, kReady);
      } else if (now >= c.wait_deadline) {
        c.wait_keys.clear();
        reply(c, kTimeout);
      }
    }
  }

  int unauthenticated() const {
    return static_cast<int>(
        std::count_if(conns.begin(), conns.end(), [](const Conn& x) { return !x.authed; }));
  }

  void accept_one() {
    sockaddr_storage a{};
    socklen_t len = sizeof a;
    const int fd =
        ::accept4(listen_fd, reinterpret_cast<sockaddr*>(&a), &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) return;
    Conn c;
    c.fd = fd;
    c.name = peer_name(a);
    const int unauth = unauthenticated();
    if (static_cast<int>(conns.size()) - unauth >= limits.max_clients) {
      refuse(c, "too many connections at once");
      const std::string& out = c.out;
      (void)!::send(fd, out.data(), out.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
      ::close(fd);
      return;
    }
    const int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    try {
      c.nonce = auth::random_bytes(auth::kNonceBytes);
    } catch (const std::exception&) {
      ::close(fd);
      return;
    }
    c.handshake_deadline =
        Clock::now() + std::chrono::milliseconds(static_cast<int64_t>(limits.handshake_s * 1000));
    c.out = framed(kServerHello + c.nonce);
    conns.push_back(std::move(c));
  }

  // Serves every connection until woken through `wake`, or poll() fails.
  void loop() {
    std::vector<pollfd> fds;
    for (;;) {
      if (!wait_for_events(fds)) return;
      std::vector<bool> drop(conns.size(), false);
      for (size_t i = 0; i < conns.size(); ++i) drop[i] = !serve_io(conns[i], fds[i + 2]);
      const auto later = Clock::now();
      refuse_late_handshakes(drop, later);
      wake_waiters(later);
      // Requests held behind a wait that just ended.
      for (size_t i = 0; i < conns.size(); ++i)
        if (!drop[i]) consume(conns[i]);
      drop_conns(drop);
      if ((fds[1].revents & POLLIN) != 0) accept_one();
    }
  }

  // Polls the wake pipe (fds[0]), the listening socket (fds[1]) and each connection (fds[i + 2]),
  // until the next handshake or wait deadline (at most 1 s). False: stop (woken, or poll failed).
  bool wait_for_events(std::vector<pollfd>& fds) {
    const auto now = Clock::now();
    auto next = now + std::chrono::seconds(1);
    for (const Conn& c : conns) {
      if (!c.authed) next = std::min(next, c.handshake_deadline);
      if (!c.wait_keys.empty()) next = std::min(next, c.wait_deadline);
    }
    // At the limit of unauthenticated connections, new ones wait in the listen backlog (they
    // are not refused: a large world's ranks all connect at once).
    const bool accepting = unauthenticated() < limits.max_unauthenticated;
    fds.assign({pollfd{wake[0], POLLIN, 0},
                pollfd{listen_fd, static_cast<short>(accepting ? POLLIN : 0), 0}});
    // A client is read from only while its buffers are small: pipelined requests wait in TCP.
    for (const Conn& c : conns) {
      const bool read = c.in.size() < kMaxBuffered && c.out.size() < kMaxBuffered;
      fds.push_back(
          pollfd{c.fd, static_cast<short>((read ? POLLIN : 0) | (c.out.empty() ? 0 : POLLOUT)), 0});
    }
    const auto wait_ms = std::chrono::duration_cast<std::chrono::milliseconds>(next - now).count();
    const int n =
        ::poll(fds.data(), fds.size(), static_cast<int>(std::max<int64_t>(0, wait_ms) + 1));
    if (n < 0 && errno != EINTR) return false;
    return fds[0].revents == 0;  // else: stop
  }

  // Reads what connection `c` sent (handling its complete requests) and writes what it is owed,
  // as poll() reported on `p`. False if the connection is to be dropped.
  bool serve_io(Conn& c, const pollfd& p) {
    const short ev = p.revents;
    if ((ev & (POLLHUP | POLLERR)) != 0 && (p.events & POLLIN) == 0)
      return false;  // gone while not being read
    if ((ev & (POLLIN | POLLHUP | POLLERR)) != 0) {
      char buf[65536];
      const ssize_t r = ::recv(c.fd, buf, sizeof buf, 0);
      if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR)) return false;
      if (r > 0 && !c.closing) {
        c.in.append(buf, static_cast<size_t>(r));
        consume(c);
      }
    }
    bool keep = true;
    if (!c.out.empty()) {
      const ssize_t w = ::send(c.fd, c.out.data(), c.out.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
      if (w > 0)
        c.out.erase(0, static_cast<size_t>(w));
      else if (w < 0 && errno != EAGAIN && errno != EINTR)
        keep = false;
    }
    if (c.closing && c.out.empty()) keep = false;
    return keep;
  }

  // Refuses (and marks to drop) the connections that have not proved the secret by `now`.
  void refuse_late_handshakes(std::vector<bool>& drop, Clock::time_point now) {
    for (size_t i = 0; i < conns.size(); ++i) {
      Conn& c = conns[i];
      if (!c.authed && !c.closing && !drop[i] && now >= c.handshake_deadline) {
        char s_buf[32];
        std::snprintf(s_buf, sizeof s_buf, "%g", limits.handshake_s);
        refuse(c, std::string("no proof of the run secret within ") + s_buf + " s");
        (void)!::send(c.fd, c.out.data(), c.out.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
        drop[i] = true;
      }
    }
  }

  // Closes and removes the connections marked in `drop`, keeping the others' order.
  void drop_conns(const std::vector<bool>& drop) {
    size_t kept = 0;
    for (size_t i = 0; i < conns.size(); ++i) {
      if (drop[i]) {
        ::close(conns[i].fd);
      } else {
        if (kept != i) conns[kept] = std::move(conns[i]);
        ++kept;
      }
    }
    conns.resize(kept);
  }
};

AuthStoreServer::AuthStoreServer(std::string secret, const std::string& addr, int port,
                                 StoreLimits limits)
    : impl_(std::make_unique<Impl>()) {
  Impl& s = *impl_;
  s.secret = std::move(secret);
  s.limits = limits;
  if (port < 0 || port > 65535)
    throw InputError("store port " + std::to_string(port) + " is not in 0..65535");
  addrinfo* res = resolve(addr, port, true);
  std::string why = "no address";
  for (addrinfo* a = res; a != nullptr; a = a->ai_next) {
    const int fd =
        ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol);
    if (fd < 0) {
      why = errno_str();
      continue;
    }
    const int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (::bind(fd, a->ai_addr, a->ai_addrlen) != 0 || ::listen(fd, 1024) != 0) {
      why = errno_str();
      ::close(fd);
      continue;
    }
    sockaddr_storage got{};
    socklen_t len = sizeof got;
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&got), &len);
    s.port = got.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&got)->sin6_port)
                                       : ntohs(reinterpret_cast<sockaddr_in*>(&got)->sin_port);
    s.listen_fd = fd;
    break;
  }
  ::freeaddrinfo(res);
  if (s.listen_fd < 0)
    throw Error("cannot serve the rendezvous store at " + addr + ":" + std::to_string(port) + ": " +
                why);
  if (::pipe2(s.wake, O_CLOEXEC) != 0) {
    ::close(s.listen_fd);
    throw Error("cannot make a pipe: " + errno_str());
  }
  s.thread = std::thread([&s] { s.loop(); });
}

AuthStoreServer::~AuthStoreServer() {
  Impl& s = *impl_;
  (void)!::write(s.wake[1], "x", 1);
  if (s.thread.joinable()) s.thread.join();
  for (auto& c : s.conns) ::close(c.fd);
  ::close(s.listen_fd);
  ::close(s.wake[0]);
  ::close(s.wake[1]);
}

int AuthStoreServer::port() const { return impl_->port; }
int64_t AuthStoreServer::refused() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->refused;
}
std::string AuthStoreServer::last_refusal() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->last_refusal;
}

// ---- the client ----

namespace {

// Sends all of `bytes` before `deadline`; false on timeout or a closed connection.
bool send_all(int fd, const std::string& bytes, Clock::time_point deadline) {
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t w =
        ::send(fd, bytes.data() + done, bytes.size() - done, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w > 0) {
      done += static_cast<size_t>(w);
      continue;
    }
    if (w < 0 && errno != EAGAIN && errno != EINTR) return false;
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) return false;
    pollfd p{fd, POLLOUT, 0};
    ::poll(&p, 1, static_cast<int>(std::min<int64_t>(left, 1 << 30)));
  }
  return true;
}

// Reads exactly n bytes before `deadline`. Empty optional-like: returns false on timeout/close.
bool recv_all(int fd, char* out, size_t n, Clock::time_point deadline, bool* closed) {
  size_t done = 0;
  while (done < n) {
    const ssize_t r = ::recv(fd, out + done, n - done, MSG_DONTWAIT);
    if (r > 0) {
      done += static_cast<size_t>(r);
      continue;
    }
    if (r == 0 || (errno != EAGAIN && errno != EINTR)) {
      *closed = true;
      return false;
    }
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) return false;
    pollfd p{fd, POLLIN, 0};
    ::poll(&p, 1, static_cast<int>(std::min<int64_t>(left, 1 << 30)));
  }
  return true;
}

constexpr size_t kReplyMax = (size_t{1} << 20) + 4096;  // the server's largest value, and room

std::string seconds(std::chrono::milliseconds ms) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", static_cast<double>(ms.count()) / 1000.0);
  return buf;
}

// A non-blocking connection to address `a`, so that an address that drops the connection request
// costs no more than the time left until `deadline`; -1 (and `why`) if it fails.
int connect_one(const addrinfo* a, Clock::time_point deadline, std::string& why) {
  const int fd =
      ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol);
  if (fd < 0) return -1;
  int rc = ::connect(fd, a->ai_addr, a->ai_addrlen);
  if (rc != 0 && errno == EINPROGRESS) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    pollfd p{fd, POLLOUT, 0};
    if (::poll(&p, 1, static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(left, 1 << 30)))) ==
        1) {
      int err = 0;
      socklen_t len = sizeof err;
      ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
      rc = err == 0 ? 0 : -1;
      errno = err;
    } else {
      errno = ETIMEDOUT;
    }
  }
  if (rc == 0) return fd;
  why = errno_str();
  ::close(fd);
  return -1;
}

// A connection to the store at addr:port (`where`), retried every 50 ms until `deadline` (the
// server may not be up yet); rv::PeerError after `timeout`.
int connect_store(const std::string& addr, int port, const std::string& where,
                  Clock::time_point deadline, std::chrono::milliseconds timeout) {
  std::string why = "timed out";
  for (;;) {
    int fd = -1;
    addrinfo* res = resolve(addr, port, false);
    for (addrinfo* a = res; a != nullptr && fd < 0; a = a->ai_next)
      fd = connect_one(a, deadline, why);
    ::freeaddrinfo(res);
    if (fd >= 0) return fd;
    if (Clock::now() >= deadline)
      throw PeerError("cannot reach the rendezvous store at " + where + " within " +
                      seconds(timeout) + " s: " + why);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

// One handshake frame of at most `max` bytes from the store at `where`, before `deadline`.
std::string read_handshake_frame(int fd, size_t max, const std::string& where,
                                 Clock::time_point deadline) {
  char len_b[4];
  bool closed = false;
  if (!recv_all(fd, len_b, 4, deadline, &closed))
    throw PeerError("the rendezvous store at " + where +
                    (closed ? " closed the connection" : " did not answer") +
                    " during the handshake");
  const uint32_t len = Reader(std::string_view(len_b, 4)).u32();
  if (len > max)
    throw PeerError("the server at " + where + " is not a ravnest rendezvous store (a frame of " +
                    std::to_string(len) + " bytes)");
  std::string f(len, '\0');
  if (!recv_all(fd, f.data(), len, deadline, &closed))
    throw PeerError("the rendezvous store at " + where + " did not finish the handshake");
  return f;
}

// The client's side of the handshake: proves the run's secret over the server's nonce and checks
// the server's proof over its own. rv::PeerError if the server is not a ravnest store or turned
// this client away; rv::InputError if it refused the proof, or proves another secret.
void client_handshake(int fd, const std::string& secret, const std::string& where,
                      Clock::time_point deadline) {
  const std::string hello = read_handshake_frame(fd, kHandshakeFrameMax, where, deadline);
  if (hello.compare(0, 2, "NO") == 0)
    throw PeerError("the rendezvous store at " + where +
                    " turned this rank away: " + hello.substr(2));
  if (hello.size() != 4 + auth::kNonceBytes || hello.compare(0, 4, kServerHello) != 0)
    throw PeerError("the server at " + where + " is not a ravnest rendezvous store");
  const std::string nonce_s = hello.substr(4);
  const std::string nonce_c = auth::random_bytes(auth::kNonceBytes);
  const auth::Mac proof = auth::mac(secret, {"store-client", nonce_s, nonce_c});
  if (!send_all(fd, framed(kClientHello + nonce_c + std::string(proof.begin(), proof.end())),
                deadline))
    throw PeerError("the rendezvous store at " + where +
                    " closed the connection during the handshake");
  const std::string answer = read_handshake_frame(fd, 1024, where, deadline);
  if (answer.compare(0, 2, "NO") == 0)
    throw InputError("the rendezvous store at " + where +
                     " refused this rank: " + answer.substr(2) +
                     " (a rank of another run, or the ranks were given different secrets)");
  if (answer.size() != 2 + auth::kMacBytes || answer.compare(0, 2, "OK") != 0 ||
      !auth::same_mac(auth::mac(secret, {"store-server", nonce_c, nonce_s}),
                      std::string_view(answer).substr(2)))
    throw InputError("the server at " + where +
                     " does not prove this run's secret: it is not this run's store "
                     "(another process holds the port, or the ranks were given different secrets)");
}

}  // namespace

AuthStore::AuthStore(const std::string& secret, const std::string& addr, int port,
                     std::chrono::milliseconds timeout)
    : c10d::Store(timeout),
      secret_(secret),
      addr_(addr),
      port_(port),
      where_(addr + ":" + std::to_string(port)) {
  const auto deadline = Clock::now() + timeout;
  fd_ = connect_store(addr, port, where_, deadline, timeout);
  const int one = 1;
  ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  try {
    client_handshake(fd_, secret, where_, deadline);
  } catch (...) {
    ::close(fd_);
    fd_ = -1;
    throw;
  }
}

AuthStore::~AuthStore() {
  if (fd_ >= 0) ::close(fd_);
}

std::string AuthStore::request(const std::string& body, std::chrono::milliseconds reply_within) {
  std::lock_guard<std::mutex> lock(mu_);
  try {
    return exchange(body, reply_within);
  } catch (...) {
    // A reply cut short or late would be read as the next request's: the connection is done.
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
    throw;
  }
}

std::string AuthStore::exchange(const std::string& body, std::chrono::milliseconds reply_within) {
  const auto deadline = Clock::now() + reply_within;
  if (fd_ < 0 || !send_all(fd_, framed(body), deadline))
    throw PeerError("the rendezvous store at " + where_ + " is gone (the connection closed)");
  char len_b[4];
  bool closed = false;
  if (!recv_all(fd_, len_b, 4, deadline, &closed))
    throw PeerError("the rendezvous store at " + where_ +
                    (closed ? " is gone (the connection closed)"
                            : " did not answer within " + seconds(reply_within) + " s"));
  const uint32_t len = Reader(std::string_view(len_b, 4)).u32();
  if (len == 0 || len > kReplyMax)
    throw PeerError("the rendezvous store at " + where_ + " sent a malformed reply");
  std::string r(len, '\0');
  if (!recv_all(fd_, r.data(), len, deadline, &closed))
    throw PeerError("the rendezvous store at " + where_ + " did not finish its reply");
  return r;
}

namespace {

std::string key_request(char op, const std::string& key) {
  std::string b(1, op);
  put_str(b, key);
  return b;
}
std::string keys_body(const std::vector<std::string>& keys) {
  std::string b;
  put_u32(b, static_cast<uint32_t>(keys.size()));
  for (const auto& k : keys) put_str(b, k);
  return b;
}
void expect(const std::string& r, char want, const std::string& where) {
  if (!r.empty() && r[0] == kFail)
    throw PeerError("the rendezvous store at " + where + " refused a request: " + r.substr(1));
  if (r.empty() || r[0] != want)
    throw PeerError("the rendezvous store at " + where + " sent an unexpected reply");
}

}  // namespace

void AuthStore::set(const std::string& key, const std::vector<uint8_t>& value) {
  std::string b = key_request(kSet, key);
  put_str(b, store_text(value));
  expect(request(b, timeout_), kOk, where_);
}

std::vector<uint8_t> AuthStore::compareSet(const std::string& key,
                                           const std::vector<uint8_t>& expected,
                                           const std::vector<uint8_t>& desired) {
  std::string b = key_request(kCompareSet, key);
  put_str(b, store_text(expected));
  put_str(b, store_text(desired));
  const std::string r = request(b, timeout_);
  expect(r, kValue, where_);
  return store_value(std::string_view(r).substr(1));
}

std::vector<uint8_t> AuthStore::get(const std::string& key) {
  wait({key});
  const std::string r = request(key_request(kGet, key), timeout_);
  if (!r.empty() && r[0] == kNotFound)
    throw PeerError("the rendezvous store at " + where_ + " lost key '" + key + "'");
  expect(r, kValue, where_);
  return store_value(std::string_view(r).substr(1));
}

int64_t AuthStore::add(const std::string& key, int64_t value) {
  std::string b = key_request(kAdd, key);
  put_u64(b, static_cast<uint64_t>(value));
  const std::string r = request(b, timeout_);
  expect(r, kInt, where_);
  if (r.size() != 9)
    throw PeerError("the rendezvous store at " + where_ + " sent a malformed reply");
  return static_cast<int64_t>(Reader(std::string_view(r).substr(1)).u64());
}

bool AuthStore::deleteKey(const std::string& key) {
  const std::string r = request(key_request(kDelete, key), timeout_);
  expect(r, kBool, where_);
  return r.size() == 2 && r[1] != 0;
}

bool AuthStore::check(const std::vector<std::string>& keys) {
  const std::string r = request(std::string(1, kCheck) + keys_body(keys), timeout_);
  expect(r, kBool, where_);
  return r.size() == 2 && r[1] != 0;
}

int64_t AuthStore::getNumKeys() {
  const std::string r = request(std::string(1, kNumKeys), timeout_);
  expect(r, kInt, where_);
  if (r.size() != 9)
    throw PeerError("the rendezvous store at " + where_ + " sent a malformed reply");
  return static_cast<int64_t>(Reader(std::string_view(r).substr(1)).u64());
}

void AuthStore::wait(const std::vector<std::string>& keys) { wait(keys, timeout_); }

void AuthStore::wait(const std::vector<std::string>& keys,
                     const std::chrono::milliseconds& timeout) {
  const std::chrono::milliseconds t = timeout == kNoTimeout ? std::chrono::hours(24 * 30) : timeout;
  std::string b(1, kWait);
  put_u64(b, static_cast<uint64_t>(t.count()));
  b += keys_body(keys);
  // The server answers at its deadline; the reply may take a moment longer to arrive.
  const std::string r = request(b, t + std::chrono::seconds(10));
  if (!r.empty() && r[0] == kTimeout) {
    std::string names;
    for (size_t i = 0; i < keys.size() && i < 3; ++i) names += (i ? ", " : "") + keys[i];
    if (keys.size() > 3) names += ", ...";
    throw PeerError("timed out after " + seconds(t) + " s waiting for the rendezvous store at " +
                    where_ + " to hold " + names + " (a rank has not started or cannot reach it)");
  }
  expect(r, kReady, where_);
}

c10::intrusive_ptr<c10d::Store> AuthStore::clone() {
  return c10::make_intrusive<AuthStore>(secret_, addr_, port_, timeout_);
}

}  // namespace rv
