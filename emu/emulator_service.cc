#include "emu/emulator_service.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <limits>

#include "core/error.h"

namespace rv {
namespace {

enum RecordKind : int64_t { kHello = 1, kSend = 2, kDeliver = 3 };

// How often a client waiting for a delivery looks at its transport (failures, arrivals).
constexpr double kPollSeconds = 0.02;
// A tolerant client waiting for a delivered message's bytes looks first after this long, then
// twice as long each time, up to kPollSeconds: a message a little late is taken a little late
// (not up to kPollSeconds late, which distorted the emulated time), a long wait costs little CPU.
constexpr double kFirstPollSeconds = 0.0002;

struct Record {
  int64_t kind = 0, a = 0, b = 0, c = 0;
};

// The largest message size a node may announce (bytes): far beyond any tensor, small enough that
// the model's arithmetic stays exact.
constexpr int64_t kMaxMessageBytes = int64_t(1) << 50;

sockaddr_un address_of(const std::string& path) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.empty() || path.size() >= sizeof addr.sun_path)
    throw Error("network emulator: socket path '" + path + "' is empty or too long");
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  return addr;
}

// Sends one record; false if the peer has gone.
bool put(int fd, const Record& r) {
  for (;;) {
    const ssize_t n = ::send(fd, &r, sizeof r, MSG_NOSIGNAL);
    if (n == static_cast<ssize_t>(sizeof r)) return true;
    if (n < 0 && errno == EINTR) continue;
    return false;
  }
}

// Receives one record: 1 a record, 0 the peer closed (or its process died: a reset), -1 a packet
// of the wrong size or another error.
int take(int fd, Record& r) {
  for (;;) {
    const ssize_t n = ::recv(fd, &r, sizeof r, MSG_TRUNC);
    if (n == static_cast<ssize_t>(sizeof r)) return 1;
    if (n == 0) return 0;
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == ECONNRESET || errno == EPIPE)) return 0;
    return -1;
  }
}

}  // namespace

// ---- server ----

struct EmulatorServer::Conn {
  int fd = -1;
  int rank = -1;            // -1 until its hello
  int64_t last_token = -1;  // tokens increase per node
  bool closed = false;      // guarded by the server's mu_
};

EmulatorServer::EmulatorServer(const std::string& path, NetworkLinks links, const Clock& clock)
    : path_(path),
      nodes_(static_cast<int>(links.size())),
      by_rank_(static_cast<size_t>(nodes_)),
      backlog_(static_cast<size_t>(nodes_)),
      joined_(static_cast<size_t>(nodes_), false),
      net_(std::make_unique<EmulatedNetwork>(std::move(links), clock)) {
  const sockaddr_un addr = address_of(path_);
  listen_fd_ = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  wake_fd_ = ::eventfd(0, EFD_CLOEXEC);
  if (listen_fd_ < 0 || wake_fd_ < 0 ||
      ::bind(listen_fd_, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0 ||
      ::listen(listen_fd_, nodes_ + 8) != 0) {
    const std::string why = std::strerror(errno);
    if (listen_fd_ >= 0) ::close(listen_fd_);
    if (wake_fd_ >= 0) ::close(wake_fd_);
    throw Error("network emulator: cannot listen at " + path_ + ": " + why);
  }
}

EmulatorServer::~EmulatorServer() {
  net_.reset();  // no delivery runs from here on
  const uint64_t one = 1;
  if (::write(wake_fd_, &one, sizeof one) < 0) {
    // Cannot happen for an eventfd below its limit; the join below would then wait for a record.
  }
  if (thread_.joinable()) thread_.join();
  for (auto& c : conns_) {
    if (!c->closed) ::close(c->fd);
    c->closed = true;
  }
  ::close(listen_fd_);
  ::close(wake_fd_);
  ::unlink(path_.c_str());
}

void EmulatorServer::start(bool run_clock) {
  RV_CHECK(!thread_.joinable(), "network emulator: started twice");
  if (run_clock) net_->start();
  thread_ = std::thread([this] { serve(); });
}

std::string EmulatorServer::error() const {
  std::lock_guard<std::mutex> lock(mu_);
  return error_;
}

void EmulatorServer::serve() {
  for (;;) {
    std::vector<std::shared_ptr<Conn>> conns;
    {
      std::lock_guard<std::mutex> lock(mu_);
      conns = conns_;
    }
    std::vector<pollfd> fds = {{wake_fd_, POLLIN, 0}, {listen_fd_, POLLIN, 0}};
    for (auto& c : conns) fds.push_back({c->fd, POLLIN, 0});
    if (::poll(fds.data(), fds.size(), -1) < 0) {
      if (errno == EINTR) continue;
      std::lock_guard<std::mutex> lock(mu_);
      if (error_.empty())
        error_ = std::string("network emulator: poll failed: ") + std::strerror(errno);
      return;
    }
    if (fds[0].revents != 0) return;  // the destructor
    if (fds[1].revents & POLLIN) {
      const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd >= 0) {
        auto c = std::make_shared<Conn>();
        c->fd = fd;
        std::lock_guard<std::mutex> lock(mu_);
        conns_.push_back(c);
      }
    }
    for (size_t i = 0; i < conns.size(); ++i) {
      if (fds[i + 2].revents != 0) handle(conns[i]);
    }
  }
}

void EmulatorServer::handle(const std::shared_ptr<Conn>& c) {
  Record r;
  const int got = take(c->fd, r);
  if (got == 0) return drop(c, "");  // the node has finished (or died: its launcher tells)
  const std::string who = c->rank < 0 ? "a node" : "rank " + std::to_string(c->rank);
  if (got < 0) return drop(c, who + " sent a record of the wrong size");
  if (c->rank < 0) {
    if (r.kind != kHello) return drop(c, who + " did not start with a hello");
    if (r.a < 0 || r.a >= nodes_)
      return drop(
          c, "a node said it is rank " + std::to_string(r.a) + " of " + std::to_string(nodes_));
    std::lock_guard<std::mutex> lock(mu_);
    const auto rank = static_cast<size_t>(r.a);
    if (joined_[rank]) {
      if (error_.empty())
        error_ = "network emulator: rank " + std::to_string(r.a) + " joined twice";
      c->closed = true;
      ::close(c->fd);
      conns_.erase(std::find(conns_.begin(), conns_.end(), c));
      return;
    }
    joined_[rank] = true;
    c->rank = static_cast<int>(r.a);
    by_rank_[rank] = c;
    // What was delivered to it before it joined, in order.
    for (int64_t src : backlog_[rank]) put(c->fd, Record{kDeliver, src, 0, 0});
    backlog_[rank].clear();
    return;
  }
  if (r.kind != kSend)
    return drop(c, who + " sent a record of unknown kind " + std::to_string(r.kind));
  if (r.a <= c->last_token) return drop(c, who + " reused message token " + std::to_string(r.a));
  if (r.b < 0 || r.b >= nodes_ || r.b == c->rank)
    return drop(c, who + " sent to rank " + std::to_string(r.b) + " of " + std::to_string(nodes_));
  if (r.c < 0 || r.c > kMaxMessageBytes)
    return drop(c, who + " sent a message of " + std::to_string(r.c) + " bytes");
  c->last_token = r.a;
  const int src = c->rank, dst = static_cast<int>(r.b);
  net_->submit(src, dst, r.c, [this, src, dst] { deliver(dst, src); });
}

void EmulatorServer::deliver(int dst, int src) {
  std::lock_guard<std::mutex> lock(mu_);
  const auto d = static_cast<size_t>(dst);
  if (!joined_[d]) {
    backlog_[d].push_back(src);
    return;
  }
  // A receiver that has gone needs no more deliveries.
  const std::shared_ptr<Conn>& c = by_rank_[d];
  if (c && !c->closed) put(c->fd, Record{kDeliver, src, 0, 0});
}

void EmulatorServer::drop(const std::shared_ptr<Conn>& c, const std::string& why) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!why.empty() && error_.empty()) error_ = "network emulator: " + why;
  auto it = std::find(conns_.begin(), conns_.end(), c);
  if (it != conns_.end()) conns_.erase(it);
  if (c->rank >= 0) by_rank_[static_cast<size_t>(c->rank)].reset();
  if (!c->closed) ::close(c->fd);
  c->closed = true;
}

// ---- client ----

EmulatorClient::EmulatorClient(const std::string& path, int rank, Seconds timeout, bool tolerant)
    : rank_(rank), timeout_(timeout), tolerant_(tolerant) {
  const sockaddr_un addr = address_of(path);
  fd_ = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  if (fd_ < 0 || ::connect(fd_, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0 ||
      !put(fd_, Record{kHello, rank, 0, 0})) {
    const std::string why = std::strerror(errno);
    if (fd_ >= 0) ::close(fd_);
    throw PeerError("cannot reach the network emulator at " + path + ": " + why);
  }
  reader_ = std::thread([this] { read_deliveries(); });
}

EmulatorClient::~EmulatorClient() {
  ::shutdown(fd_, SHUT_RDWR);  // wakes the reader
  if (reader_.joinable()) reader_.join();
  ::close(fd_);
}

void EmulatorClient::fail(std::exception_ptr e) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!error_) error_ = e;
  }
  changed_.notify_all();
}

void EmulatorClient::submit(Transport& inner, int src, int dst, Message msg) {
  RV_CHECK(src == rank_, "emulator client: a send from another rank");
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (error_) std::rethrow_exception(error_);
  }
  if (dst == rank_) {  // to itself: no link to cross
    inner.send(dst, std::move(msg));
    {
      std::lock_guard<std::mutex> lock(mu_);
      delivered_.push_back(rank_);
    }
    changed_.notify_all();
    return;
  }
  if (!put(fd_, Record{kSend, next_token_++, dst, msg.bytes})) {
    fail(std::make_exception_ptr(PeerError("the network emulator has gone (rank " +
                                           std::to_string(rank_) + " could not send to it)")));
    std::lock_guard<std::mutex> lock(mu_);
    std::rethrow_exception(error_);
  }
  inner.send(dst, std::move(msg));  // travels now; the receiver holds it until it is delivered
}

void EmulatorClient::drain(int src) {
  RV_CHECK(src == rank_, "emulator client: a drain for another rank");
  std::lock_guard<std::mutex> lock(mu_);
  if (error_) std::rethrow_exception(error_);
}

void EmulatorClient::read_deliveries() {
  for (;;) {
    Record r;
    const int got = take(fd_, r);
    if (got <= 0) {
      fail(std::make_exception_ptr(PeerError(
          got == 0 ? "the network emulator closed rank " + std::to_string(rank_) + "'s connection"
                   : "the network emulator sent a record of the wrong size")));
      return;
    }
    if (r.kind != kDeliver || r.a < 0 || r.a > std::numeric_limits<int>::max()) {
      fail(std::make_exception_ptr(PeerError("the network emulator sent rank " +
                                             std::to_string(rank_) + " a bad record (kind " +
                                             std::to_string(r.kind) + ")")));
      return;
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (gone_.count(static_cast<int>(r.a)) != 0) continue;
      delivered_.push_back(static_cast<int>(r.a));
    }
    changed_.notify_all();
  }
}

void EmulatorClient::forget(int src) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    gone_.insert(src);
    delivered_.erase(std::remove(delivered_.begin(), delivered_.end(), src), delivered_.end());
  }
  changed_.notify_all();
}

void EmulatorClient::take_arrived(Transport& inner) {
  while (std::optional<Message> m = inner.try_recv())
    arrived_[m->src < 0 ? -1 : m->src].push_back(std::move(*m));
}

// The next delivered message, if it has arrived; the executor's own first. Under mu_ throughout:
// forget() may drop delivery records meanwhile.
std::optional<Message> EmulatorClient::take_delivered() {
  if (auto own = arrived_.find(-1); own != arrived_.end() && !own->second.empty()) {
    Message m = std::move(own->second.front());
    own->second.pop_front();
    return m;
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (error_) std::rethrow_exception(error_);
  if (delivered_.empty()) return std::nullopt;
  auto it = arrived_.find(delivered_.front());
  if (it == arrived_.end() || it->second.empty()) return std::nullopt;
  Message m = std::move(it->second.front());
  it->second.pop_front();
  delivered_.pop_front();
  return m;
}

Message EmulatorClient::recv(Transport& inner) {
  using Clock = std::chrono::steady_clock;
  auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                     std::chrono::duration<double>(timeout_));
  double poll = kFirstPollSeconds;  // tolerant: the next look at the transport, after this long
  for (;;) {
    take_arrived(inner);
    if (std::optional<Message> m = take_delivered()) return std::move(*m);
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (delivered_.empty()) {
        // Nothing delivered yet: wait for the server, looking at the transport now and then.
        changed_.wait_for(lock, std::chrono::duration<double>(kPollSeconds),
                          [&] { return !delivered_.empty() || error_; });
        if (delivered_.empty() && !error_ && !tolerant_ && Clock::now() > deadline) {
          char secs[32];
          std::snprintf(secs, sizeof secs, "%g", timeout_);
          throw PeerError("rank " + std::to_string(rank_) + ": no message delivered within " +
                          secs + " s");
        }
        continue;
      }
    }
    // Delivered, but this machine has not carried it yet: wait for it on the transport (a while,
    // when tolerant: its sender may be lost meanwhile, and forgotten).
    if (tolerant_) {
      take_arrived(inner);
      std::this_thread::sleep_for(std::chrono::duration<double>(poll));
      poll = std::min(kPollSeconds, 2 * poll);
      continue;
    }
    Message m = inner.recv();
    arrived_[m.src].push_back(std::move(m));
    deadline = Clock::now() +
               std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_));
  }
}

std::optional<Message> EmulatorClient::try_recv(Transport& inner) {
  take_arrived(inner);
  return take_delivered();
}

}  // namespace rv
