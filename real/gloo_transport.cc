#include "real/gloo_transport.h"

#include <ATen/ATen.h>
#include <arpa/inet.h>
#include <c10/util/Exception.h>
#include <c10/util/ScopeExit.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <exception>
#include <map>
#include <mutex>
#include <numeric>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <utility>
#include <vector>

#include "core/error.h"
#include "real/auth.h"
#include "real/auth_store.h"
#include "real/buffer_pool.h"
#include "real/gloo_work.h"
#include "real/liveness.h"
#include "real/wire_format.h"

namespace rv {

int free_loopback_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) throw Error(std::string("cannot open a socket: ") + std::strerror(errno));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof addr;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    const std::string why = std::strerror(errno);
    ::close(fd);
    throw Error("cannot find a free port on 127.0.0.1: " + why);
  }
  ::close(fd);
  return ntohs(addr.sin_port);
}
namespace {

using SteadyClock = std::chrono::steady_clock;
using namespace wire;
using WorkPtr = c10::intrusive_ptr<c10d::Work>;

// Gloo slots (c10d tags; collectives use prefixed slots): headers and leads, posted ahead; bodies,
// posted into their destination on reading the header (wire_format.h).
constexpr int kHeaderTag = 0;
constexpr int kBodyTag = 1;
constexpr int kDirectTagBase = 2;  // the direct channel's tag t is c10d's tag kDirectTagBase + t
// Gloo turns a timed-out wait into a failure of the whole context, so its waits are "forever"
// (30 days, which stays far from overflowing steady_clock arithmetic) and are aborted instead;
// the timeouts the user sees are kept by the inbox and flush() waits.
constexpr std::chrono::milliseconds kForever = std::chrono::hours(24 * 30);

// The first line of an exception's message, without c10's backtrace.
std::string short_what(const std::exception& e) {
  std::string s;
  if (const auto* ce = dynamic_cast<const c10::Error*>(&e)) {
    s = ce->what_without_backtrace();
  } else {
    s = e.what();
  }
  const auto nl = s.find('\n');
  if (nl != std::string::npos) s.resize(nl);
  return s;
}

std::chrono::milliseconds to_ms(Seconds s) {
  if (!(s > 0)) return std::chrono::milliseconds(1);
  if (s * 1000.0 >= static_cast<double>(kForever.count())) return kForever;
  return std::chrono::milliseconds(static_cast<int64_t>(std::ceil(s * 1000.0)));
}

std::string seconds_str(Seconds s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", s);
  return buf;
}

bool is_loopback(const std::string& addr) {
  return addr.rfind("127.", 0) == 0 || addr == "localhost" || addr == "::1";
}

std::shared_ptr<::gloo::transport::Device> make_device(const std::string& master_addr) {
  const char* ifname = std::getenv("GLOO_SOCKET_IFNAME");
  if (ifname != nullptr && *ifname != '\0') {
    return c10d::ProcessGroupGloo::createDeviceForInterface(ifname);
  }
  if (is_loopback(master_addr)) return c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1");
  return c10d::ProcessGroupGloo::createDefaultDevice();
}

// Store keys of joining (see "Joining" in the header).
std::string rank_inc(int r, int k) { return std::to_string(r) + "." + std::to_string(k); }
std::string nonce_key(int r, int k) {
  return "rv/nonce/" + (k == 0 ? std::to_string(r) : rank_inc(r, k));
}
std::string inc_key(int r) { return "rv/link/inc/" + std::to_string(r); }
std::string lost_key(int r, int k) { return "rv/link/lost/" + rank_inc(r, k); }
std::string claim_key(int r, int k) { return "rv/link/claim/" + rank_inc(r, k); }
const std::string kJoinCount = "rv/join/n";
std::string join_req_key(int64_t t) { return "rv/join/req/" + std::to_string(t); }
std::string join_done_key(int64_t t) { return "rv/join/done/" + std::to_string(t); }
// How often the acceptor looks for joins, and a replacement for its turn.
constexpr std::chrono::milliseconds kJoinPoll(50);

// The proof that member `from` of the process group `name` holds the run's `secret`, for member
// `to` (over `to_nonce`, its nonce), as a tensor to send.
at::Tensor group_proof(const std::string& secret, const std::string& name,
                       const std::string& to_nonce, int from, int to) {
  const auth::Mac m =
      auth::mac(secret, {"group-hello", name, to_nonce, auth::be32(static_cast<uint32_t>(from)),
                         auth::be32(static_cast<uint32_t>(to))});
  at::Tensor t = at::empty({static_cast<int64_t>(auth::kMacBytes / sizeof(int64_t))}, at::kLong);
  std::memcpy(t.data_ptr<int64_t>(), m.data(), m.size());
  return t;
}

}  // namespace

struct GlooTransport::Impl {
  // kJoining: a replacement's link is being opened (only its hello goes on it).
  enum class PeerState { kOpen, kBye, kFailed, kJoining };
  // Where messages to and from a peer go: the world group and the peer's rank, or a replacement's
  // two-rank group and its index there.
  struct Link {
    c10::intrusive_ptr<c10d::ProcessGroupGloo> pg;
    int index = 0;
  };

  GlooOptions opt;
  std::optional<AuthStoreServer> server;  // rank 0, when it hosts the store
  c10::intrusive_ptr<AuthStore> store;
  std::string nonce;                // this rank's, in the store: peers prove the secret over it
  std::vector<std::string> nonces;  // every rank's (this one's included), read by authenticate()
  // make_group() calls so far per member list: a later group of the same members gets a name of
  // its own (its store keys and its members' proofs differ from the earlier one's, so neither
  // collides with nor replays the other).
  std::map<std::string, int> groups_made;
  // The Gloo device (its address and event loop) of every process group this transport makes:
  // the world group, make_group()'s and the links. Made before any of them, read only after.
  std::shared_ptr<::gloo::transport::Device> device;
  c10::intrusive_ptr<c10d::ProcessGroupGloo> pg;  // the world group (none for a replacement)
  // GlooOptions::direct_reverse: the world's second connections, for direct exchanges from a
  // higher rank to a lower one (set in the constructor, read only after).
  c10::intrusive_ptr<c10d::ProcessGroupGloo> reverse;
  std::vector<Link> links;  // per rank (guarded by mu once the threads run)
  std::vector<int> inc;     // per rank: its incarnation as this rank knows it (guarded by mu)
  // Joining: a store client of its own (a link's making waits in the store for the other end,
  // which must not hold up the membership's requests), and the acceptor of replacements.
  c10::intrusive_ptr<AuthStore> link_store;
  int64_t accept_from = 0;  // the first join ticket the acceptor serves
  std::thread acceptor;
  // Memory of received headers and payloads, reused (buffer_pool.h): at most this many bytes kept.
  BufferPool buffers{size_t{256} << 20};

  std::mutex post_mu;  // serialises post_send() between sending threads

  // Everything below is guarded by mu.
  std::mutex mu;
  std::condition_variable inbox_cv;  // inbox, peer states
  std::condition_variable send_cv;   // sends (reaper and flush)
  std::deque<Message> inbox;         // algorithm messages
  std::deque<Message> control;   // kControl messages (executor level; algorithms never see them)
  std::vector<PeerState> peers;  // per rank; this rank's entry is unused
  int open_peers = 0;
  std::exception_ptr failure;                   // first receive-side failure (sticky)
  std::vector<std::vector<WorkPtr>> recv_work;  // per peer: its posted recvs (to abort them)
  bool stopping = false;                        // receivers must not post new recvs
  // Transport::offer: per peer, places offered for its coming payloads, and the match of the one
  // its receiver is filling now (withdraw() waits on fill_cv until it is no longer).
  struct Offer {
    MessageMatch match;
    at::Tensor into;
  };
  std::vector<std::vector<Offer>> offers;
  std::vector<std::optional<MessageMatch>> filling;
  std::condition_variable fill_cv;
  struct Sent {  // one message's parts: header, then lead and body if split
    int dst;
    int k;  // dst's incarnation
    std::vector<WorkPtr> works;
    size_t bytes;  // counted in send_bytes
  };
  std::deque<Sent> sends;           // posted, not yet completed (front is waited)
  size_t send_bytes = 0;            // of the bounded sends among them (opt.queue_bytes)
  size_t inbox_bytes = 0;           // payload bytes in inbox and control (opt.queue_bytes)
  std::condition_variable room_cv;  // inbox_bytes fell (receivers held back wait on it)
  std::vector<bool> held;           // per peer: its receiver waits for room
  // The node reads control messages (its algorithm is done) or closes: unread algorithm messages
  // may never be taken, so nothing is held back any longer (byes and control messages follow them).
  bool draining = false;
  std::vector<bool> authed;  // per peer: its hello proved the run's secret
  int authed_peers = 0;
  std::exception_ptr send_failure;  // first send-side failure (sticky)
  bool reaper_stop = false;
  bool closed = false;  // close() or shutdown() began

  std::vector<std::thread> receivers;  // per rank (this rank's and never-linked ones' are empty)
  std::thread reaper;
  // Heartbeats (liveness.h): the beater sends one to every open peer each beat interval; `live`
  // (guarded by mu) knows when each peer was last heard from.
  std::optional<Liveness> live;
  std::thread beater;
  std::condition_variable beat_cv;
  bool beat_stop = false;

  std::string who() const { return "rank " + std::to_string(opt.rank); }

  // Options for a new process group on this transport's device.
  c10::intrusive_ptr<c10d::ProcessGroupGloo::Options> group_options() const {
    auto go = c10d::ProcessGroupGloo::Options::create(to_ms(opt.timeout));
    go->devices.push_back(device);
    return go;
  }

  // Lock held: `p` takes no messages (lost, or its replacement not yet in).
  bool unreachable(int p) const {
    return peers[p] == PeerState::kFailed || peers[p] == PeerState::kJoining;
  }

  static Seconds now_s() {
    return std::chrono::duration<double>(SteadyClock::now().time_since_epoch()).count();
  }
  static SteadyClock::time_point at_s(Seconds t) {
    return SteadyClock::time_point(
        std::chrono::duration_cast<SteadyClock::duration>(std::chrono::duration<double>(t)));
  }

  void start_threads() {
    live.emplace(opt.world_size, opt.rank, opt.timeout, now_s());
    nonces.resize(static_cast<size_t>(opt.world_size));  // (the acceptor fills a replacement's)
    receivers.resize(static_cast<size_t>(opt.world_size));
    for (int p = 0; p < opt.world_size; ++p) {
      if (p == opt.rank) continue;
      if (peers[p] != PeerState::kOpen) {
        live->forget(p);
        continue;
      }
      receivers[p] = std::thread([this, p] { receive_loop(p); });
    }
    reaper = std::thread([this] { reap_loop(); });
    if (tolerant()) acceptor = std::thread([this] { accept_loop(); });
  }

  // The hello that proves to `to` (incarnation's nonce `to_nonce`) that this rank holds the secret.
  at::Tensor hello_header(int to, const std::string& to_nonce) const {
    const auth::Mac m = hello_mac(to_nonce, opt.rank, to);
    Message hello;
    hello.kind = MsgKind::kControl;
    hello.id = kHelloId;
    at::Tensor proof =
        at::empty({static_cast<int64_t>(auth::kMacBytes / sizeof(float))}, at::kFloat);
    std::memcpy(proof.data_ptr<float>(), m.data(), m.size());  // raw bits; no arithmetic
    return encode_header(hello, {proof}, proof.numel(), proof);
  }

  // The proof that `from` holds the run's secret, for `to`, over `to`'s nonce.
  auth::Mac hello_mac(const std::string& to_nonce, int from, int to) const {
    return auth::mac(opt.secret, {"peer-hello", to_nonce, auth::be32(static_cast<uint32_t>(from)),
                                  auth::be32(static_cast<uint32_t>(to))});
  }

  // The peers this rank is linked to (at the start: every one; a replacement: those not lost).
  std::vector<int> open_at_start() {
    std::vector<int> open;
    std::lock_guard<std::mutex> lock(mu);
    for (int p = 0; p < opt.world_size; ++p)
      if (p != opt.rank && peers[p] == PeerState::kOpen) open.push_back(p);
    return open;
  }

  // Rank `r`'s nonce for incarnation `k`, from the store.
  std::string nonce_of(c10d::Store& from, int r, int k) {
    try {
      return store_text(from.get(nonce_key(r, k)));
    } catch (const std::exception& e) {
      throw PeerError(who() + ": cannot read peer " + std::to_string(r) +
                      "'s nonce from the store: " + short_what(e));
    }
  }

  // Sends every linked peer this rank's hello (the first message on each connection: the beater
  // starts after), then waits until every one's hello has been checked. rv::PeerError if one fails
  // or does not come within the timeout.
  void authenticate() {
    const std::vector<int> open = open_at_start();
    nonces[opt.rank] = nonce;
    for (int p : open) {
      nonces[p] = nonce_of(*store, p, inc[p]);
      post_send(p, {hello_header(p, nonces[p])}, false);
    }
    const int want = static_cast<int>(open.size());
    std::unique_lock<std::mutex> lock(mu);
    inbox_cv.wait_until(lock, SteadyClock::now() + to_ms(opt.timeout),
                        [&] { return failure || authed_peers == want; });
    if (failure) std::rethrow_exception(failure);
    if (authed_peers != want) {
      std::string missing;
      for (int p : open)
        if (!authed[p]) missing += (missing.empty() ? "" : ", ") + std::to_string(p);
      throw PeerError(who() + ": no proof of the run secret from peer(s) " + missing + " within " +
                      seconds_str(opt.timeout) + " s");
    }
    if (opt.world_size > 1) beater = std::thread([this] { beat_loop(); });
  }

  // Checks a peer's first message, its hello; throws rv::PeerError if it is not a valid one.
  void check_hello(int peer, const Decoded& d, const int64_t* words) {
    const bool shaped = d.msg.kind == MsgKind::kControl && d.msg.id == kHelloId &&
                        d.inline_payload &&
                        d.elems == static_cast<int64_t>(auth::kMacBytes / sizeof(float));
    if (!shaped ||
        !auth::same_mac(hello_mac(nonce, peer, opt.rank),
                        std::string_view(reinterpret_cast<const char*>(words + kWInlineData),
                                         auth::kMacBytes))) {
      throw PeerError(who() + ": the connection of peer " + std::to_string(peer) +
                      " did not prove the run's secret (" +
                      (shaped ? "a wrong proof" : "no hello first") +
                      "): an impostor, a process of another run, or ranks given different secrets");
    }
    {
      std::lock_guard<std::mutex> lock(mu);
      authed[peer] = true;
      ++authed_peers;
    }
    inbox_cv.notify_all();
  }

  static size_t payload_bytes(const Message& m) {
    size_t b = 0;
    for (const auto& t : m.payload) b += static_cast<size_t>(t.numel()) * kFloatBytes;
    return b;
  }

  void deliver(Message m) {
    {
      std::lock_guard<std::mutex> lock(mu);
      inbox_bytes += payload_bytes(m);
      (m.kind == MsgKind::kControl ? control : inbox).push_back(std::move(m));
    }
    inbox_cv.notify_all();
  }

  // Takes the front of `queue` (lock held), releasing its bytes.
  Message pop(std::deque<Message>& queue) {
    Message m = std::move(queue.front());
    queue.pop_front();
    inbox_bytes -= std::min(inbox_bytes, payload_bytes(m));
    room_cv.notify_all();
    return m;
  }

  // Holds `peer`'s receiver while the inbox is full (back-pressure); false once shutting down.
  bool wait_for_room(int peer) {
    std::unique_lock<std::mutex> lock(mu);
    // A peer taken for lost is read no more (a replacement may take its rank).
    auto room = [&] {
      return inbox_bytes < opt.queue_bytes || draining || stopping ||
             peers[peer] == PeerState::kFailed;
    };
    if (room()) return !stopping && peers[peer] != PeerState::kFailed;
    held[peer] = true;
    room_cv.wait(lock, room);
    held[peer] = false;
    // Not reading is not the peer's silence: it counts as heard from now.
    live->heard(peer, now_s());
    return !stopping && peers[peer] != PeerState::kFailed;
  }

  // The next message of `queue` (inbox or control), waiting until `deadline`; nothing on timeout.
  // Messages that arrived are delivered before a failure is raised.
  std::optional<Message> take(std::deque<Message>& queue, SteadyClock::time_point deadline) {
    std::unique_lock<std::mutex> lock(mu);
    for (;;) {
      if (!queue.empty()) return pop(queue);
      if (failure) std::rethrow_exception(failure);
      if (closed) throw PeerError(who() + ": recv() after close()");
      if (open_peers == 0) {
        throw PeerError(
            who() + (tolerant()
                         ? ": recv() with no peer left to send (every peer was lost or said bye)"
                         : ": recv() with no peer left to send (every peer said bye)"));
      }
      const Seconds now = now_s();
      for (int p = 0; p < opt.world_size; ++p)
        if (held[p]) live->heard(p, now);  // held back by this rank, not silent
      if (const std::optional<int> p = live->silent(now); p && tolerant()) {
        if (const int k = inc[*p]; mark_failed(*p)) {
          lock.unlock();
          report_lost(*p, k);
          lock.lock();
        }
        continue;
      } else if (p) {
        const std::string what = who() + ": peer " + std::to_string(*p) + " silent for " +
                                 seconds_str(std::round(live->silent_for(*p, now) * 10) / 10) +
                                 " s: no message or heartbeat (every " +
                                 seconds_str(live->beat_interval()) + " s) within the timeout of " +
                                 seconds_str(opt.timeout) + " s; it is stopped, hung or cut off";
        failure = std::make_exception_ptr(PeerError(what));
        if (peers[*p] == PeerState::kOpen) {
          peers[*p] = PeerState::kFailed;
          --open_peers;
        }
        live->forget(*p);
        std::rethrow_exception(failure);
      }
      const auto wake = std::min(deadline, at_s(live->next_check(now)));
      if (inbox_cv.wait_until(lock, wake) == std::cv_status::timeout && queue.empty() && !failure &&
          SteadyClock::now() >= deadline) {
        return std::nullopt;
      }
    }
  }

  bool tolerant() const { return static_cast<bool>(opt.peer_lost); }

  // Lock held: `peer` is gone; true if it was open (then report_lost() must follow, unlocked).
  // Tolerant: what is posted to and from it is aborted, so that neither a silent peer's sends nor
  // its receiver wait for it (the sends behind them go to live peers).
  bool mark_failed(int peer) {
    live->forget(peer);
    if (peers[peer] != PeerState::kOpen) return false;
    peers[peer] = PeerState::kFailed;
    --open_peers;
    if (tolerant()) {
      for (auto& sent : sends)
        if (sent.dst == peer)
          for (const WorkPtr& w : sent.works) abort_quietly(w);
      for (auto& w : recv_work[peer]) abort_quietly(w);
      room_cv.notify_all();  // its receiver, if held back, ends
    }
    return true;
  }

  static void abort_quietly(const WorkPtr& w) {
    try {
      w->abort();
    } catch (...) {
    }
  }

  // Tells the executor (GlooOptions::peer_lost) that incarnation `k` of `peer` is lost, then the
  // store (a replacement may take its rank from then on); if it cannot (the store that keeps the
  // membership has gone with its host), this rank fails with that reason.
  void report_lost(int peer, int k) {
    if (!tolerant()) return;
    try {
      opt.peer_lost(peer, k);
      store->set(lost_key(peer, k), store_value(std::to_string(opt.rank)));
    } catch (const std::exception& e) {
      {
        std::lock_guard<std::mutex> lock(mu);
        if (!failure && !stopping)
          failure = std::make_exception_ptr(
              PeerError(who() + ": lost peer " + std::to_string(peer) +
                        ", and could not record its loss: " + short_what(e)));
      }
      inbox_cv.notify_all();
    }
  }

  // A peer's connection (of its incarnation `k`) failed with `e`. Tolerant: a lost peer (a
  // malformed message still fails this rank); otherwise the first failure, sticky. A failure of
  // an incarnation a replacement has since taken over is past.
  void peer_failed(int peer, std::exception_ptr e, int k) {
    bool lost = false;
    {
      std::lock_guard<std::mutex> lock(mu);
      if (k != inc[peer]) return;
      const bool open = mark_failed(peer);
      bool malformed = false;
      try {
        std::rethrow_exception(e);
      } catch (const InputError&) {
        malformed = true;
      } catch (...) {
      }
      // An error seen while shutting down is the shutdown itself, not a failure. A peer that has
      // not proved the run's secret is no peer to lose: that stays a failure, but for a
      // replacement's link, which is merely not opened (the run never counted it in).
      if (tolerant() && !malformed && authed[peer])
        lost = open && !stopping;
      else if (tolerant() && k > 0 && !authed[peer])
        lost = false;
      else if (!failure && !stopping)
        failure = e;
    }
    inbox_cv.notify_all();
    if (lost) report_lost(peer, k);
  }

  // A recv posted ahead of its message: its work and the tensor it fills.
  struct Posted {
    WorkPtr work;
    std::vector<at::Tensor> tensors;
  };

  // Posts a recv from `peer` on `tag` into `tensors`; nothing once shutting down.
  std::optional<Posted> post_recv(int peer, std::vector<at::Tensor> tensors, int tag) {
    std::lock_guard<std::mutex> lock(mu);
    if (stopping || (tolerant() && peers[peer] == PeerState::kFailed)) return std::nullopt;
    Posted p{links[peer].pg->recv(tensors, links[peer].index, tag), std::move(tensors)};
    recv_work[peer].push_back(p.work);
    return p;
  }

  // Lock held: a posted recv of `peer` no longer tracked (shutdown no longer aborts it).
  void untrack(int peer, const WorkPtr& w) {
    auto& posted = recv_work[peer];
    const auto it = std::find(posted.begin(), posted.end(), w);
    if (it != posted.end()) posted.erase(it);
  }

  // Waits for a posted recv; false if it was aborted (shutdown).
  bool wait_recv(int peer, const WorkPtr& w) {
    auto forget = [&] {
      std::lock_guard<std::mutex> lock(mu);
      untrack(peer, w);
      return !stopping;
    };
    bool ok = false;
    try {
      ok = w->wait(kForever);
    } catch (...) {
      forget();
      throw;
    }
    return forget() && ok;
  }

  // A posted recv given up before it completed: aborted and no longer tracked, so that it is
  // released with its last reference (Gloo then writes nothing more into its tensor).
  void forget_recv(int peer, const WorkPtr& w) {
    std::lock_guard<std::mutex> lock(mu);
    untrack(peer, w);
    abort_quietly(w);
  }

  // The place offered for this message's payload (taken from the offers, and marked as being
  // filled), or an undefined tensor.
  at::Tensor take_offer(int peer, const Message& m, int64_t elems, size_t tensors) {
    std::lock_guard<std::mutex> lock(mu);
    auto& mine = offers[peer];
    for (auto it = mine.begin(); it != mine.end(); ++it) {
      if (!it->match.matches(m)) continue;
      at::Tensor into = std::move(it->into);
      const MessageMatch match = it->match;
      mine.erase(it);
      if (tensors != 1 || into.numel() != elems) return at::Tensor();  // not this size: withdrawn
      filling[peer] = match;
      return into;
    }
    return at::Tensor();
  }
  void end_fill(int peer) {
    {
      std::lock_guard<std::mutex> lock(mu);
      filling[peer].reset();
    }
    fill_cv.notify_all();
  }

  // Posts room for `peer`'s next header (the largest one), fields zeroed so that a header cut
  // short reads as malformed rather than as an earlier message's fields in reused memory.
  std::optional<Posted> post_header(int peer) {
    std::vector<at::Tensor> h{buffers.take(kHeaderWords, at::kLong)};
    std::memset(h[0].data_ptr<int64_t>(), 0, sizeof(int64_t) * kWInlineData);
    return post_recv(peer, std::move(h), kHeaderTag);
  }

  // One per peer: that peer's messages, in order, until its bye, its failure or shutdown.
  // kHeadersAhead header recvs stay posted, so that Gloo's notice that a recv is ready reaches
  // the sender before its next messages rather than after it, behind this rank's own uploads.
  void receive_loop(int peer) {
    int k = 0;  // the incarnation whose messages these are
    {
      std::lock_guard<std::mutex> lock(mu);
      k = inc[peer];
    }
    std::deque<Posted> headers;  // oldest first; left posted at the end (shutdown aborts them)
    try {
      for (bool first = true;; first = false) {
        if (!fill_headers(peer, headers) || !wait_for_room(peer)) return;
        const Posted header = std::move(headers.front());
        headers.pop_front();
        if (!wait_recv(peer, header.work)) return;
        Decoded d = read_header(peer, header, first);
        if (first) {
          check_hello(peer, d, header.tensors[0].data_ptr<int64_t>());
          std::lock_guard<std::mutex> lock(mu);
          live->heard(peer, now_s());
          continue;
        }
        {
          std::lock_guard<std::mutex> lock(mu);
          live->heard(peer, now_s(), d.split ? kFloatBytes * d.elems : 0);
        }
        if (d.msg.kind == MsgKind::kControl && d.msg.id == kBeatId) continue;
        if (d.msg.kind == MsgKind::kControl && d.msg.id == kByeId) return said_bye(peer);
        // Not a bye: the peer goes on, so the next header's room is posted now, before this
        // message's payload. (After a bye the peer may close, and posting would fail.)
        if (!fill_headers(peer, headers) || !read_payload(peer, header, headers, d)) return;
        {
          std::lock_guard<std::mutex> lock(mu);
          if (peers[peer] == PeerState::kFailed)
            continue;  // taken for lost (tolerant): its word no longer counts
        }
        d.msg.src = peer;
        d.msg.arrived =
            std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
                .count();
        deliver(std::move(d.msg));
      }
    } catch (const InputError&) {
      peer_failed(peer, std::current_exception(), k);
    } catch (const PeerError&) {
      peer_failed(peer, std::current_exception(), k);
    } catch (const std::exception& e) {
      const std::string what = who() + ": lost peer " + std::to_string(peer) +
                               " (its process ended or the network failed): " + short_what(e);
      peer_failed(peer, std::make_exception_ptr(PeerError(what)), k);
    }
  }

  // Keeps kHeadersAhead header recvs of `peer` posted in `headers`; false once shutting down.
  bool fill_headers(int peer, std::deque<Posted>& headers) {
    while (headers.size() < kHeadersAhead) {
      std::optional<Posted> p = post_header(peer);
      if (!p) return false;
      headers.push_back(std::move(*p));
    }
    return true;
  }

  // The header that arrived in `header`, decoded (rv::InputError if malformed). A peer's `first`
  // message that is malformed is no proof of the run's secret: rv::PeerError.
  Decoded read_header(int peer, const Posted& header, bool first) {
    try {
      return decode_header(header.tensors[0].data_ptr<int64_t>(),
                           static_cast<size_t>(header.tensors[0].numel()), peer,
                           opt.max_payload_elems);
    } catch (const InputError& e) {
      if (!first) throw;
      throw PeerError(who() + ": the connection of peer " + std::to_string(peer) +
                      " did not prove the run's secret (its first message is malformed: " +
                      e.what() + "): an impostor, or a process of another kind");
    }
  }

  // `peer` said bye: it sends no more.
  void said_bye(int peer) {
    {
      std::lock_guard<std::mutex> lock(mu);
      live->forget(peer);
      if (peers[peer] == PeerState::kOpen) {
        peers[peer] = PeerState::kBye;
        --open_peers;
      }
    }
    inbox_cv.notify_all();
  }

  // Reads the payload of the message `d` (whose header arrived in `header`) into d.msg.payload:
  // from the header, or split, its lead from the next of `headers` and its body from its own slot.
  // False once shutting down.
  bool read_payload(int peer, const Posted& header, std::deque<Posted>& headers, Decoded& d) {
    if (d.elems == 0) {
      for (const auto& shape : d.shapes) d.msg.payload.push_back(at::empty(shape, at::kFloat));
      return true;
    }
    at::Tensor flat;
    if (d.inline_payload) {
      flat = buffers.take(d.elems, at::kFloat);
      std::memcpy(flat.data_ptr<float>(), header.tensors[0].data_ptr<int64_t>() + kWInlineData,
                  sizeof(float) * d.elems);
    } else if (!read_split(peer, headers, d, flat)) {
      return false;
    }
    int64_t offset = 0;
    for (const auto& shape : d.shapes) {
      int64_t n = 1;
      for (int64_t s : shape) n *= s;
      d.msg.payload.push_back(flat.narrow(0, offset, n).view(shape));
      offset += n;
    }
    return true;
  }

  // A split payload, into `flat`: an offered place (Transport::offer) or pooled memory. The body's
  // recv is posted there now, while the lead comes into room posted ahead, so that its notice
  // reaches the sender before the lead has arrived; then the lead is copied in front. False once
  // shutting down.
  bool read_split(int peer, std::deque<Posted>& headers, const Decoded& d, at::Tensor& flat) {
    const at::Tensor into = take_offer(peer, d.msg, d.elems, d.shapes.size());
    const auto filled = c10::make_scope_exit([&] {
      if (into.defined()) end_fill(peer);
    });
    flat = into.defined() ? into.view({-1}) : buffers.take(d.elems, at::kFloat);
    const int64_t body_floats = d.elems - d.lead;
    std::optional<Posted> body = post_recv(peer, {flat.narrow(0, d.lead, body_floats)}, kBodyTag);
    if (!body) return false;
    // Left unfinished (a failure, a shutdown), the body's recv is aborted and released, so that
    // nothing lands in an offered place once it is handed back.
    const auto unposted = c10::make_scope_exit([&] {
      if (body) forget_recv(peer, body->work);
    });
    const Posted lead = std::move(headers.front());
    headers.pop_front();
    if (!fill_headers(peer, headers) || !wait_recv(peer, lead.work))
      return false;  // the next room posted first
    const float* from = decode_lead(lead.tensors[0].data_ptr<int64_t>(),
                                    static_cast<size_t>(lead.tensors[0].numel()), peer, d);
    std::memcpy(flat.data_ptr<float>(), from, sizeof(float) * d.lead);
    {
      std::lock_guard<std::mutex> lock(mu);
      live->heard(peer, now_s(), kFloatBytes * body_floats);
    }
    const WorkPtr work = body->work;
    body.reset();
    return wait_recv(peer, work);
  }

  // Waits for posted sends in order, so that their tensors are released and errors are seen. A
  // message's last part first: the others went before it on the same connection, so that one
  // wake-up of this thread serves the whole message.
  void reap_loop() {
    std::unique_lock<std::mutex> lock(mu);
    for (;;) {
      send_cv.wait(lock, [&] { return !sends.empty() || reaper_stop; });
      if (sends.empty()) return;
      const int dst = sends.front().dst, k = sends.front().k;
      const std::vector<WorkPtr> works = sends.front().works;
      lock.unlock();
      std::exception_ptr err;
      try {
        // (A c10d work is waited once: each wait takes one completion of its Gloo buffer.)
        if (!works.empty()) works.back()->wait(kForever);
        for (size_t i = 0; i + 1 < works.size(); ++i) works[i]->wait(kForever);
      } catch (const std::exception& e) {
        err = std::make_exception_ptr(PeerError(who() + ": send to peer " + std::to_string(dst) +
                                                " failed: " + short_what(e)));
      }
      lock.lock();
      send_bytes -= std::min(send_bytes, sends.front().bytes);
      sends.pop_front();
      send_cv.notify_all();
      if (err && tolerant() && !stopping) {  // a connection that broke: its peer is lost
        lock.unlock();
        peer_failed(dst, err, k);
        lock.lock();
      } else if (err && !send_failure && !stopping) {
        send_failure = err;
      }
    }
  }

  // Every beat interval, a heartbeat to every open peer, until stopped.
  void beat_loop() {
    Message beat;
    beat.kind = MsgKind::kControl;
    beat.id = kBeatId;
    const at::Tensor header = encode_header(beat, {}, 0);
    std::unique_lock<std::mutex> lock(mu);
    for (;;) {
      beat_cv.wait_for(lock, to_ms(live->beat_interval()), [&] { return beat_stop; });
      if (beat_stop) return;
      std::vector<int> open;
      for (int p = 0; p < opt.world_size; ++p)
        if (p != opt.rank && peers[p] == PeerState::kOpen) open.push_back(p);
      lock.unlock();
      for (int p : open) {
        try {
          post_send(p, {header}, false);
        } catch (const std::exception&) {
          // That peer's receiver reports its loss.
        }
      }
      lock.lock();
    }
  }

  void drain() {
    {
      std::lock_guard<std::mutex> lock(mu);
      if (draining) return;
      draining = true;
    }
    room_cv.notify_all();
  }

  void stop_beating() noexcept {
    {
      std::lock_guard<std::mutex> lock(mu);
      beat_stop = true;
    }
    beat_cv.notify_all();
    if (beater.joinable()) beater.join();
  }

  // `bounded`: waits (up to the timeout) while opt.queue_bytes of bounded sends are in flight;
  // heartbeats, hellos and byes are not bounded (they are small, and must not wait).
  // `parts`: a message's header, then its lead if it is split; `body`: a split payload's body
  // (wire_format.h), read where it is until its send completes.
  void post_send(int dst, const std::vector<at::Tensor>& parts, bool bounded = true,
                 const at::Tensor& body = {}) {
    size_t bytes = body.defined() ? body.nbytes() : 0;
    for (const at::Tensor& t : parts) bytes += t.nbytes();
    if (bounded) {
      std::unique_lock<std::mutex> lock(mu);
      const bool room = send_cv.wait_until(lock, SteadyClock::now() + to_ms(opt.timeout), [&] {
        return send_bytes == 0 || send_bytes + bytes <= opt.queue_bytes || send_failure || stopping;
      });
      if (send_failure) std::rethrow_exception(send_failure);
      if (stopping)
        throw PeerError(who() + ": send to peer " + std::to_string(dst) +
                        " after the transport shut down");
      if (!room) {
        throw PeerError(who() + ": send to peer " + std::to_string(dst) + " found no room within " +
                        seconds_str(opt.timeout) + " s: " + std::to_string(send_bytes >> 20) +
                        " MiB of sends are still in flight, the oldest to peer " +
                        std::to_string(sends.front().dst) + ", which does not take them");
      }
      send_bytes += bytes;
    }
    // A message's header, lead and body are posted back to back: the receiver takes them in order.
    std::lock_guard<std::mutex> post_lock(post_mu);
    post_locked(dst, parts, bytes, bounded, false, body);
  }

  // post_send() with post_mu held. `hello`: the first message on a replacement's link, the only
  // one that goes while it is joining. Tolerant: a message to a peer not open is dropped.
  void post_locked(int dst, const std::vector<at::Tensor>& parts, size_t bytes, bool bounded,
                   bool hello, const at::Tensor& body = {}) {
    Link link;
    int k = 0;
    {
      std::lock_guard<std::mutex> lock(mu);
      link = links[dst];
      k = inc[dst];
      if (tolerant() && unreachable(dst) && !(hello && peers[dst] == PeerState::kJoining)) {
        if (bounded) send_bytes -= std::min(send_bytes, bytes);
        send_cv.notify_all();
        return;
      }
    }
    std::vector<WorkPtr> posted;
    try {
      for (const at::Tensor& t : parts) {
        std::vector<at::Tensor> one{t};
        posted.push_back(link.pg->send(one, link.index, kHeaderTag));
      }
      if (body.defined()) {
        std::vector<at::Tensor> one{body};
        posted.push_back(link.pg->send(one, link.index, kBodyTag));
      }
    } catch (const std::exception& e) {
      {
        std::lock_guard<std::mutex> lock(mu);
        if (bounded) send_bytes -= std::min(send_bytes, bytes);
      }
      if (!posted.empty()) {
        // The header went without all its parts; the peer's receiver will report the loss.
        std::lock_guard<std::mutex> lock(mu);
        sends.push_back(Sent{dst, k, std::move(posted), 0});
      }
      auto err = std::make_exception_ptr(
          PeerError(who() + ": send to peer " + std::to_string(dst) + " failed: " + short_what(e)));
      if (tolerant()) {  // its connection broke: the peer is lost, the message dropped
        peer_failed(dst, err, k);
        return;
      }
      std::rethrow_exception(err);
    }
    {
      std::lock_guard<std::mutex> lock(mu);
      sends.push_back(Sent{dst, k, std::move(posted), bounded ? bytes : 0});
    }
    send_cv.notify_all();
  }

  // Waits until every posted send completed, up to `deadline`; false on timeout.
  bool wait_sends(std::unique_lock<std::mutex>& lock, SteadyClock::time_point deadline) {
    return send_cv.wait_until(lock, deadline, [&] { return sends.empty(); });
  }

  // ---- Construction ----

  // rv::InputError for options no transport can have.
  void check_options() const {
    if (opt.world_size < 1) {
      throw InputError("world size must be at least 1, not " + std::to_string(opt.world_size));
    }
    if (opt.rank < 0 || opt.rank >= opt.world_size) {
      throw InputError("rank " + std::to_string(opt.rank) + " is not in [0, " +
                       std::to_string(opt.world_size) + ")");
    }
    if (opt.master_port <= 0 || opt.master_port > 65535) {
      throw InputError("master port " + std::to_string(opt.master_port) + " is not in 1..65535");
    }
    if (!(opt.timeout > 0)) {
      throw InputError("timeout must be positive, not " + seconds_str(opt.timeout) + " s");
    }
    if (opt.secret.size() < auth::kMinSecretBytes) {
      throw InputError(who() + ": no run secret (at least " +
                       std::to_string(auth::kMinSecretBytes) + " bytes; real/auth.h)");
    }
    if (opt.max_payload_elems < 1 || opt.max_payload_elems > kMaxPayloadElems) {
      throw InputError(who() + ": max_payload_elems " + std::to_string(opt.max_payload_elems) +
                       " is not in 1..2^34");
    }
    if (opt.join && !opt.peer_lost)
      throw InputError(who() +
                       ": only a run that recovers lost ranks (real.on_peer_loss = \"recover\") "
                       "takes a replacement");
    if (opt.join && opt.rank == 0)
      throw InputError(
          who() +
          ": rank 0 cannot be replaced: it holds the run's gathering (and may host its store)");
  }

  // Rank 0 serves the rendezvous store, unless another process does (GlooOptions::host_store).
  void host_store() {
    if (opt.rank != 0 || !opt.host_store) return;
    try {
      server.emplace(opt.secret, opt.master_addr, opt.master_port);
    } catch (const InputError&) {
      throw;
    } catch (const std::exception& e) {
      throw PeerError(who() + ": cannot host the rendezvous store: " + short_what(e));
    }
  }

  // Makes the device, connects to the store (and, tolerant, a second client for links) and
  // publishes this rank's nonce; a replacement joins the job (join_job()) and returns its ticket,
  // other ranks -1. Errors name this rank.
  int64_t rendezvous() {
    const auto timeout = to_ms(opt.timeout);
    int64_t ticket = -1;
    try {
      device = make_device(opt.master_addr);
      store = c10::make_intrusive<AuthStore>(opt.secret, opt.master_addr, opt.master_port, timeout);
      nonce = auth::random_bytes(auth::kNonceBytes);
      if (tolerant())
        link_store =
            c10::make_intrusive<AuthStore>(opt.secret, opt.master_addr, opt.master_port, timeout);
      if (opt.join)
        ticket = join_job();
      else
        store->set(nonce_key(opt.rank, 0), store_value(nonce));
    } catch (const InputError& e) {
      const std::string what = e.what();
      throw InputError(what.rfind(who(), 0) == 0 ? what : who() + ": " + what);
    } catch (const PeerError& e) {
      const std::string what = e.what();
      throw PeerError(what.rfind(who(), 0) == 0 ? what : who() + ": " + what);
    } catch (const std::exception& e) {
      throw PeerError(who() + ": " + short_what(e));
    }
    return ticket;
  }

  // A replacement, linked: starts its threads, checks every link's hello and marks its join
  // `ticket` done ("failed" if it fails, and then shuts down).
  void finish_join(int64_t ticket) {
    start_threads();
    try {
      authenticate();
      link_store->set(join_done_key(ticket), store_value(std::to_string(opt.rank)));
    } catch (...) {
      try {
        link_store->set(join_done_key(ticket), store_value("failed"));
      } catch (...) {
      }
      shutdown();
      throw;
    }
  }

  // The world group, over which every peer is linked and open. rv::PeerError if the ranks do not
  // all come within the timeout.
  void make_world() {
    try {
      pg = c10::make_intrusive<c10d::ProcessGroupGloo>(store, opt.rank, opt.world_size,
                                                       group_options());
    } catch (const std::exception& e) {
      store.reset();
      // Where this rank hosts the store, what it refused may be why a rank never came (another
      // run's secret, a stray process on the port).
      std::string refused;
      if (server && server->refused() > 0)
        refused = "; the store refused " + std::to_string(server->refused()) +
                  " connection(s), the last: " + server->last_refusal();
      const std::string where = opt.master_addr + ":" + std::to_string(opt.master_port);
      throw PeerError(who() + ": cannot connect to all " + std::to_string(opt.world_size) +
                      " ranks (rendezvous at " + where + ") within " + seconds_str(opt.timeout) +
                      " s: " + short_what(e) + refused);
    }
    peers.assign(opt.world_size, PeerState::kOpen);
    inc.assign(opt.world_size, 0);
    for (int p = 0; p < opt.world_size; ++p) links.push_back(Link{pg, p});
    open_peers = opt.world_size - 1;
  }

  // A new group's connections are new: each member proves the run's secret to each other member
  // over the receiver's nonce, as on the transport's own connections. rv::PeerError naming a member
  // whose proof is wrong; a proof that does not come within the timeout fails in c10d.
  void check_group(c10d::ProcessGroupGloo& group, const std::vector<int>& ranks,
                   const std::string& name) {
    std::vector<std::vector<at::Tensor>> outs, ins;
    std::vector<WorkPtr> works;
    for (size_t j = 0; j < ranks.size(); ++j) {
      if (ranks[j] == opt.rank) continue;
      outs.push_back({group_proof(opt.secret, name, nonces[ranks[j]], opt.rank, ranks[j])});
      works.push_back(group.send(outs.back(), static_cast<int>(j), kHeaderTag));
      ins.push_back(
          {at::zeros({static_cast<int64_t>(auth::kMacBytes / sizeof(int64_t))}, at::kLong)});
      works.push_back(group.recv(ins.back(), static_cast<int>(j), kHeaderTag));
    }
    for (auto& w : works) w->wait(to_ms(opt.timeout));
    size_t k = 0;
    for (size_t j = 0; j < ranks.size(); ++j) {
      if (ranks[j] == opt.rank) continue;
      const at::Tensor want = group_proof(opt.secret, name, nonces[opt.rank], ranks[j], opt.rank);
      auth::Mac w{};
      std::memcpy(w.data(), want.data_ptr<int64_t>(), w.size());
      if (!auth::same_mac(
              w, std::string_view(reinterpret_cast<const char*>(ins[k++][0].data_ptr<int64_t>()),
                                  w.size())))
        throw PeerError(
            who() + ": member " + std::to_string(ranks[j]) + " of the process group " + name +
            " did not prove the run's secret (an impostor, or ranks given different secrets)");
    }
  }

  // ---- Joining (see the header) ----

  bool is_stopping() {
    std::lock_guard<std::mutex> lock(mu);
    return stopping;
  }

  // The two-rank group that links this rank to a replacement `q` (or, on a replacement, to peer
  // q), named after both ends' incarnations. Blocks until the other end makes it too.
  Link make_link(int q, int k_q, int k_me) {
    const int me = opt.rank;
    const std::string name = "link/" + (me < q ? rank_inc(me, k_me) + "-" + rank_inc(q, k_q)
                                               : rank_inc(q, k_q) + "-" + rank_inc(me, k_me));
    auto prefixed = c10::make_intrusive<c10d::PrefixStore>(name, link_store);
    return Link{
        c10::make_intrusive<c10d::ProcessGroupGloo>(prefixed, me < q ? 0 : 1, 2, group_options()),
        me < q ? 1 : 0};
  }

  // This process replaces lost rank opt.rank: claims its next incarnation, waits its turn, and
  // links to every rank whose incarnation is not lost (peers and inc are set; the threads not yet
  // started). Returns its join ticket, to be marked done once its links are checked.
  int64_t join_job() {
    const int r = opt.rank;
    c10d::Store& st = *link_store;
    const int old = static_cast<int>(st.add(inc_key(r), 0));
    if (!st.check({lost_key(r, old)}))
      throw InputError(who() + ": rank " + std::to_string(r) +
                       " is still in the run (no rank has lost it): a "
                       "replacement takes the rank of a lost process only");
    if (store_text(st.compareSet(claim_key(r, old + 1), {}, store_value(nonce))) != nonce)
      throw InputError(who() + ": another process has already taken the place of lost rank " +
                       std::to_string(r));
    const int k = static_cast<int>(st.add(inc_key(r), 1));
    st.set(nonce_key(r, k), store_value(nonce));
    const int64_t ticket = st.add(kJoinCount, 1) - 1;
    st.set(join_req_key(ticket), store_value(std::to_string(r) + " " + std::to_string(k)));
    accept_from = ticket + 1;
    // One join at a time: the one before must have linked first (or given up).
    const auto deadline = SteadyClock::now() + to_ms(opt.timeout);
    while (ticket > 0 && !st.check({join_done_key(ticket - 1)})) {
      if (SteadyClock::now() > deadline)
        throw PeerError(who() + ": the replacement that asked to join before this one (join " +
                        std::to_string(ticket - 1) + ") did not finish within " +
                        seconds_str(opt.timeout) + " s");
      std::this_thread::sleep_for(kJoinPoll);
    }
    inc.assign(static_cast<size_t>(opt.world_size), 0);
    inc[r] = k;
    peers.assign(static_cast<size_t>(opt.world_size), PeerState::kFailed);
    links.resize(static_cast<size_t>(opt.world_size));
    for (int q = 0; q < opt.world_size; ++q) {
      if (q == r) continue;
      inc[q] = static_cast<int>(st.add(inc_key(q), 0));
      if (st.check({lost_key(q, inc[q])})) continue;
      try {
        links[q] = make_link(q, inc[q], k);
      } catch (const std::exception& e) {
        throw PeerError(who() + ": cannot link to rank " + std::to_string(q) + " within " +
                        seconds_str(opt.timeout) + " s (has the run ended?): " + short_what(e));
      }
      peers[q] = PeerState::kOpen;
      ++open_peers;
    }
    if (open_peers == 0)
      throw PeerError(who() + ": every rank of the run is lost or gone: nothing to join");
    return ticket;
  }

  // Opens rank r again as its incarnation k (a replacement asked to join): its old incarnation is
  // lost (reported, if this rank had not yet), its link is made, and the hello goes first on it.
  void admit(int r, int k) {
    int old = 0;
    bool was_open = false;
    {
      std::lock_guard<std::mutex> lock(mu);
      if (r == opt.rank || r < 0 || r >= opt.world_size || k <= inc[r])
        return;  // not for this rank, or stale
      old = inc[r];
      was_open = mark_failed(r);
    }
    inbox_cv.notify_all();
    if (was_open) report_lost(r, old);
    if (receivers[r].joinable()) receivers[r].join();
    const std::string their_nonce = nonce_of(*link_store, r, k);
    int k_me = 0;
    {
      std::lock_guard<std::mutex> lock(mu);
      k_me = inc[opt.rank];
    }
    Link link = make_link(r, k, k_me);
    {
      std::lock_guard<std::mutex> post_lock(post_mu);
      {
        std::lock_guard<std::mutex> lock(mu);
        if (stopping || closed) return;
        links[r] = std::move(link);
        inc[r] = k;
        nonces[r] = their_nonce;
        peers[r] = PeerState::kJoining;
        authed[r] = false;
        held[r] = false;
        recv_work[r].clear();
      }
      post_locked(r, {hello_header(r, their_nonce)}, 0, false, true);
      std::lock_guard<std::mutex> lock(mu);
      if (peers[r] != PeerState::kJoining) return;  // its hello failed: it stays lost
      peers[r] = PeerState::kOpen;
      ++open_peers;
      live->expect(r, now_s());
      receivers[r] = std::thread([this, r] { receive_loop(r); });
    }
    inbox_cv.notify_all();
  }

  // Serves the join tickets in order, from accept_from, until the transport stops. A ticket whose
  // request never comes (its process died) is passed over after the timeout; a link that cannot
  // be made leaves its rank lost.
  void accept_loop() {
    int64_t next = accept_from;
    Seconds waiting_since = -1;
    while (!is_stopping()) {
      try {
        const int64_t n = link_store->add(kJoinCount, 0);
        while (next < n && !is_stopping()) {
          if (!link_store->check({join_req_key(next)})) {
            if (waiting_since < 0) waiting_since = now_s();
            if (now_s() - waiting_since <= opt.timeout) break;
            ++next;  // its joiner is gone
            waiting_since = -1;
            continue;
          }
          waiting_since = -1;
          std::istringstream in(store_text(link_store->get(join_req_key(next))));
          int r = -1, k = -1;
          ++next;
          if (!(in >> r >> k)) continue;  // malformed: no join
          try {
            admit(r, k);
          } catch (const std::exception&) {
            // That replacement is not linked: it stays lost here (and gives up on its side).
          }
        }
      } catch (const std::exception&) {
        return;  // the store is gone (the run ends, or its host died): no more joins
      }
      std::unique_lock<std::mutex> lock(mu);
      beat_cv.wait_for(lock, kJoinPoll, [&] { return stopping; });
    }
  }

  // Stops every thread (aborting pending Gloo waits) and drops the process group. Never throws.
  void shutdown() noexcept {
    stop_beating();
    {
      std::lock_guard<std::mutex> lock(mu);
      closed = true;
      stopping = true;
      reaper_stop = true;
      for (auto& posted : recv_work) {
        for (auto& w : posted) {
          try {
            w->abort();
          } catch (...) {
          }
        }
      }
      for (auto& s : sends)
        for (const WorkPtr& w : s.works) abort_quietly(w);
    }
    send_cv.notify_all();
    inbox_cv.notify_all();
    room_cv.notify_all();
    beat_cv.notify_all();
    // The acceptor first: it may still start a receiver.
    if (acceptor.joinable()) acceptor.join();
    for (auto& t : receivers) {
      if (t.joinable()) t.join();
    }
    receivers.clear();
    if (reaper.joinable()) reaper.join();
    try {
      recv_work.clear();
      sends.clear();
      links.clear();
      reverse.reset();
      pg.reset();
      link_store.reset();
      store.reset();
      server.reset();
    } catch (...) {
    }
  }
};

GlooTransport::GlooTransport(const GlooOptions& options) : impl_(std::make_unique<Impl>()) {
  Impl& s = *impl_;
  s.opt = options;
  s.check_options();
  if (options.join) s.opt.host_store = false;
  s.host_store();
  s.recv_work.resize(options.world_size);
  s.offers.resize(options.world_size);
  s.filling.resize(options.world_size);
  s.held.assign(options.world_size, false);
  s.authed.assign(options.world_size, false);
  const int64_t ticket = s.rendezvous();
  if (options.join) {
    s.finish_join(ticket);
    return;
  }
  s.make_world();
  s.start_threads();
  try {
    s.authenticate();
    if (options.direct_reverse && options.world_size > 1) {
      std::vector<int> all(static_cast<size_t>(options.world_size));
      std::iota(all.begin(), all.end(), 0);
      s.reverse = make_group(all);
    }
  } catch (...) {
    s.shutdown();  // (no destructor runs for a constructor that throws)
    throw;
  }
}

GlooTransport::~GlooTransport() {
  if (impl_) impl_->shutdown();
}

int GlooTransport::rank() const { return impl_->opt.rank; }
int GlooTransport::size() const { return impl_->opt.world_size; }

namespace {

// What send() accepts (rv::Error otherwise, naming `who`): a peer of the world, the transport not
// closed, a control id that is not the transport's, and at most kMaxTensors defined float32
// tensors of at most kMaxDims dimensions. Returns the payload's elements.
int64_t check_sendable(const std::string& who, int world_size, bool closed, int dst,
                       const Message& msg) {
  RV_CHECK(dst >= 0 && dst < world_size, who + ": send to rank " + std::to_string(dst) +
                                             " of a world of " + std::to_string(world_size));
  RV_CHECK(!closed, who + ": send after close()");
  RV_CHECK(!(msg.kind == MsgKind::kControl && msg.id < 0),
           who + ": control messages with a negative id are reserved by the transport");
  RV_CHECK(msg.payload.size() <= static_cast<size_t>(kMaxTensors),
           who + ": a message carries at most " + std::to_string(kMaxTensors) + " tensors, not " +
               std::to_string(msg.payload.size()));
  int64_t elems = 0;
  for (auto& t : msg.payload) {
    RV_CHECK(t.defined(), who + ": undefined tensor in a " + to_string(msg.kind) + " message");
    RV_CHECK(t.scalar_type() == at::kFloat, who + ": payload tensors must be float32, not " +
                                                std::string(c10::toString(t.scalar_type())));
    RV_CHECK(t.dim() <= kMaxDims, who + ": payload tensor with " + std::to_string(t.dim()) +
                                      " dimensions (at most " + std::to_string(kMaxDims) + ")");
    elems += t.numel();
  }
  return elems;
}

// The payload of `msg` (`elems` elements) as one flat contiguous CPU tensor. A split payload's
// body is sent from it as it is (wire_format.h), after send() returns: so it is read where it is
// only if no one will write it meanwhile (Message::payload_frozen, or this message alone holds its
// memory); else a copy.
at::Tensor flat_payload(const Message& msg, int64_t elems) {
  at::Tensor flat;
  if (msg.payload.size() == 1) {
    const at::Tensor& t = msg.payload[0];
    const bool alone = msg.payload_frozen || holds_alone(t);
    flat = t.detach().to(at::kCPU).contiguous().view({-1});
    if (!alone && is_split(elems) && flat.storage().is_alias_of(t.storage())) flat = flat.clone();
  } else if (elems > 0) {
    std::vector<at::Tensor> parts;
    for (auto& t : msg.payload) parts.push_back(t.detach().to(at::kCPU).reshape({-1}));
    flat = at::cat(parts);
  }
  return flat;
}

}  // namespace

void GlooTransport::send(int dst, Message msg) {
  Impl& s = *impl_;
  const int64_t elems = check_sendable(s.who(), s.opt.world_size, s.closed, dst, msg);
  if (dst == s.opt.rank) {
    msg.src = dst;
    s.deliver(std::move(msg));
    return;
  }
  {
    std::lock_guard<std::mutex> lock(s.mu);
    if (s.send_failure) std::rethrow_exception(s.send_failure);
    // Lost: dropped. A replacement being admitted (kJoining) is not: post_send() waits on post_mu
    // until admit() has posted its hello and opened it (or found it lost, and then drops it).
    if (s.tolerant() && s.peers[dst] == Impl::PeerState::kFailed) return;
  }
  RV_CHECK(elems <= s.opt.max_payload_elems,
           s.who() + ": a message of " + std::to_string(elems) + " elements, more than the " +
               std::to_string(s.opt.max_payload_elems) +
               " a peer accepts (GlooOptions::max_payload_elems)");
  const at::Tensor flat = flat_payload(msg, elems);
  try {
    std::vector<at::Tensor> parts{encode_header(msg, msg.payload, elems, flat)};
    at::Tensor body;
    if (is_split(elems)) {
      parts.push_back(encode_lead(flat.data_ptr<float>(), elems, kLeadFloats));
      body = flat.narrow(0, kLeadFloats, elems - kLeadFloats);
    }
    s.post_send(dst, parts, true, body);
  } catch (const PeerError&) {
    // Tolerant: a message to a peer taken for lost meanwhile is dropped; any other failure stands.
    std::lock_guard<std::mutex> lock(s.mu);
    if (!s.tolerant() || !s.unreachable(dst)) throw;
  }
}

void GlooTransport::notify(Message m) {
  m.src = -1;
  impl_->deliver(std::move(m));
}

c10::intrusive_ptr<c10d::Store> GlooTransport::store() {
  RV_CHECK(impl_->store, impl_->who() + ": store() after close()");
  return impl_->store;
}

int GlooTransport::incarnation(int peer) const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  RV_CHECK(peer >= 0 && peer < impl_->opt.world_size,
           impl_->who() + ": incarnation of rank " + std::to_string(peer));
  return impl_->inc[peer];
}

std::vector<int> GlooTransport::lost_peers() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  std::vector<int> out;
  for (int p = 0; p < impl_->opt.world_size; ++p)
    if (p != impl_->opt.rank && impl_->peers[p] == Impl::PeerState::kFailed) out.push_back(p);
  return out;
}

void GlooTransport::offer(int src, const MessageMatch& match, at::Tensor into) {
  RV_CHECK(src >= 0 && src < impl_->opt.world_size, "offer: no rank " + std::to_string(src));
  if (src == impl_->opt.rank || !into.defined() || !into.is_cpu() ||
      into.scalar_type() != at::kFloat || !into.is_contiguous())
    return;  // delivered as usual
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->offers[src].push_back(Impl::Offer{match, std::move(into)});
}

void GlooTransport::withdraw(int src, const MessageMatch& match) {
  RV_CHECK(src >= 0 && src < impl_->opt.world_size, "withdraw: no rank " + std::to_string(src));
  Impl& s = *impl_;
  std::unique_lock<std::mutex> lock(s.mu);
  auto& mine = s.offers[src];
  mine.erase(std::remove_if(mine.begin(), mine.end(),
                            [&](const Impl::Offer& o) { return o.match == match; }),
             mine.end());
  s.fill_cv.wait(lock, [&] { return !(s.filling[src] && *s.filling[src] == match); });
}

std::optional<Message> GlooTransport::recv_for(Seconds wait) {
  return impl_->take(impl_->inbox, SteadyClock::now() + to_ms(wait));
}

void GlooTransport::drain() { impl_->drain(); }

std::optional<Message> GlooTransport::recv_control(Seconds wait) {
  return impl_->take(impl_->control, SteadyClock::now() + to_ms(wait));
}

Message GlooTransport::recv() {
  std::optional<Message> m = recv_for(impl_->opt.timeout);
  if (m) return std::move(*m);
  // Tolerant: waiting long is no sign of failure (a spare waits for a stage); the open peers'
  // heartbeats say they live, and a silent one is lost (take()).
  while (impl_->tolerant() && !m) m = recv_for(impl_->opt.timeout);
  if (m) return std::move(*m);
  Impl& s = *impl_;
  std::string open;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    for (int p = 0; p < s.opt.world_size; ++p) {
      if (p != s.opt.rank && s.peers[p] == Impl::PeerState::kOpen) {
        open += (open.empty() ? "" : ", ") + std::to_string(p);
      }
    }
  }
  // The peer heard from least recently, which a stopped peer is (its heartbeats stopped too).
  std::string quiet;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    if (const std::optional<int> q = s.live->quietest())
      quiet = "; heard from least recently: peer " + std::to_string(*q) + ", " +
              seconds_str(std::round(s.live->silent_for(*q, Impl::now_s()) * 10) / 10) + " s ago";
  }
  throw PeerError(s.who() + ": no message from any peer within " + seconds_str(s.opt.timeout) +
                  " s (timeout); still connected: peer(s) " + open + quiet);
}

std::optional<Message> GlooTransport::try_recv() {
  Impl& s = *impl_;
  std::lock_guard<std::mutex> lock(s.mu);
  if (!s.inbox.empty()) return s.pop(s.inbox);
  if (s.failure) std::rethrow_exception(s.failure);
  return std::nullopt;
}

void GlooTransport::flush() {
  Impl& s = *impl_;
  std::unique_lock<std::mutex> lock(s.mu);
  if (!s.wait_sends(lock, SteadyClock::now() + to_ms(s.opt.timeout))) {
    throw PeerError(s.who() + ": " + std::to_string(s.sends.size()) +
                    " sends not delivered within " + seconds_str(s.opt.timeout) +
                    " s (first to peer " + std::to_string(s.sends.front().dst) + ")");
  }
  if (s.send_failure) std::rethrow_exception(s.send_failure);
}

size_t GlooTransport::inbox_bytes() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->inbox_bytes;
}

void GlooTransport::barrier() {
  Impl& s = *impl_;
  RV_CHECK(!s.closed, s.who() + ": barrier() after close()");
  RV_CHECK(s.pg, s.who() + ": a replacement has no world group (barrier)");
  try {
    s.pg->barrier()->wait();
  } catch (const std::exception& e) {
    throw PeerError(s.who() + ": barrier failed: " + short_what(e));
  }
}

void GlooTransport::close() {
  Impl& s = *impl_;
  if (s.closed) return;
  const auto deadline = SteadyClock::now() + to_ms(s.opt.timeout);
  s.drain();
  s.stop_beating();  // no heartbeat may follow a bye
  // Byes to every peer still there (a failed peer is left out: sending to it would fail).
  for (int p = 0; p < s.opt.world_size; ++p) {
    if (p == s.opt.rank) continue;
    {
      std::lock_guard<std::mutex> lock(s.mu);
      if (s.unreachable(p)) continue;
    }
    Message bye;
    bye.kind = MsgKind::kControl;
    bye.id = kByeId;
    try {
      s.post_send(p, {encode_header(bye, {}, 0)}, false);
    } catch (const std::exception&) {
      // The receiver thread of that peer reports it.
    }
  }
  std::string problem;
  {
    std::unique_lock<std::mutex> lock(s.mu);
    s.closed = true;
    if (!s.wait_sends(lock, deadline)) {
      problem = std::to_string(s.sends.size()) + " sends not delivered within " +
                seconds_str(s.opt.timeout) + " s";
    }
    const bool all = s.inbox_cv.wait_until(lock, deadline, [&] { return s.open_peers == 0; });
    if (!all) {
      std::string open;
      for (int p = 0; p < s.opt.world_size; ++p) {
        if (p != s.opt.rank && s.peers[p] == Impl::PeerState::kOpen) {
          open += (open.empty() ? "" : ", ") + std::to_string(p);
        }
      }
      problem += (problem.empty() ? "" : "; ") + std::string("no bye from peer(s) ") + open +
                 " within " + seconds_str(s.opt.timeout) + " s";
    }
  }
  std::exception_ptr failure;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    failure = s.failure ? s.failure : s.send_failure;
  }
  s.shutdown();
  if (failure) std::rethrow_exception(failure);
  if (!problem.empty()) throw PeerError(s.who() + ": close: " + problem);
}

class GlooTransport::Direct : public DirectChannel {
 public:
  explicit Direct(GlooTransport::Impl& s) : s_(s) {}
  std::unique_ptr<CollectiveWork> send(int dst, int64_t tag, at::Tensor from) override {
    return post(true, dst, tag, std::move(from));
  }
  std::unique_ptr<CollectiveWork> recv(int src, int64_t tag, at::Tensor into) override {
    return post(false, src, tag, std::move(into));
  }

 private:
  std::unique_ptr<CollectiveWork> post(bool sending, int peer, int64_t tag, at::Tensor t) {
    const std::string what = s_.who() + ": a direct " + (sending ? "send to" : "receive from") +
                             " peer " + std::to_string(peer);
    RV_CHECK(peer >= 0 && peer < s_.opt.world_size && peer != s_.opt.rank,
             what + ": no other rank of a world of " + std::to_string(s_.opt.world_size));
    RV_CHECK(tag >= 0 && tag <= DirectChannel::kMaxTag,
             what + ": tag " + std::to_string(tag) + " out of range");
    RV_CHECK(
        t.defined() && t.device().is_cpu() && t.scalar_type() == at::kFloat && t.is_contiguous(),
        what + ": needs a contiguous float32 CPU tensor");
    RV_CHECK(!s_.opt.join && !s_.tolerant(),
             what + ": no direct channel on a transport that takes peers for lost");
    Impl::Link link;
    {
      std::lock_guard<std::mutex> lock(s_.mu);
      if (s_.stopping) throw PeerError(what + " after close()");
      if (s_.peers[peer] == Impl::PeerState::kFailed || s_.failure) {
        throw PeerError(what + ": the peer is lost or the transport failed");
      }
      link = s_.links[peer];
    }
    std::vector<at::Tensor> tensors{std::move(t)};
    const int c10d_tag = kDirectTagBase + static_cast<int>(tag);
    // From a higher rank to a lower one over the second connections, where there are some
    // (GlooOptions::direct_reverse): both ends pick the same. (The channel has world links only:
    // a transport that admits replacements has none, above.)
    const bool downward = sending ? peer < s_.opt.rank : s_.opt.rank < peer;
    c10d::ProcessGroupGloo& pg = downward && s_.reverse ? *s_.reverse : *link.pg;
    c10::intrusive_ptr<c10d::Work> work =
        sending ? pg.send(tensors, link.index, c10d_tag) : pg.recv(tensors, link.index, c10d_tag);
    return std::make_unique<GlooWork>(std::move(work), std::move(tensors), what);
  }
  GlooTransport::Impl& s_;
};

DirectChannel& GlooTransport::direct() {
  RV_CHECK(!impl_->closed, impl_->who() + ": direct() after close()");
  if (!direct_) direct_ = std::make_unique<Direct>(*impl_);
  return *direct_;
}

c10d::ProcessGroupGloo& GlooTransport::group() {
  RV_CHECK(impl_->pg, impl_->who() + (impl_->opt.join ? ": a replacement has no world group"
                                                      : ": group() after close()"));
  return *impl_->pg;
}

c10::intrusive_ptr<c10d::ProcessGroupGloo> GlooTransport::make_group(
    const std::vector<int>& ranks) {
  Impl& s = *impl_;
  RV_CHECK(s.store, s.who() + ": make_group() after close()");
  RV_CHECK(!s.opt.join, s.who() + ": a replacement has no world group (make_group)");
  RV_CHECK(std::is_sorted(ranks.begin(), ranks.end()) &&
               std::adjacent_find(ranks.begin(), ranks.end()) == ranks.end(),
           s.who() + ": make_group() needs distinct ranks in ascending order");
  auto me = std::find(ranks.begin(), ranks.end(), s.opt.rank);
  RV_CHECK(me != ranks.end(), s.who() + ": make_group() of a group without this rank");
  std::string name = "group";
  for (int r : ranks) {
    RV_CHECK(r >= 0 && r < s.opt.world_size,
             s.who() + ": make_group() with rank " + std::to_string(r));
    name += "-" + std::to_string(r);
  }
  if (const int earlier = s.groups_made[name]++; earlier > 0)
    name += "#" + std::to_string(earlier + 1);
  try {
    auto store = c10::make_intrusive<c10d::PrefixStore>(name, s.store);
    auto group = c10::make_intrusive<c10d::ProcessGroupGloo>(
        store, static_cast<int>(me - ranks.begin()), static_cast<int>(ranks.size()),
        s.group_options());
    s.check_group(*group, ranks, name);
    return group;
  } catch (const PeerError&) {
    throw;
  } catch (const std::exception& e) {
    throw PeerError(s.who() + ": cannot make the process group " + name + " within " +
                    seconds_str(s.opt.timeout) + " s: " + short_what(e));
  }
}

}  // namespace rv
