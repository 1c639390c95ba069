#include "real/gloo_transport.h"

#include <ATen/ATen.h>
#include <arpa/inet.h>
#include <c10/util/Exception.h>
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
#include "real/gloo_transport_impl.h"
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

using namespace wire;
using namespace gloo_detail;

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

// The first line of an exception's message, without c10's backtrace.
std::string gloo_detail::short_what(const std::exception& e) {
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

std::chrono::milliseconds gloo_detail::to_ms(Seconds s) {
  if (!(s > 0)) return std::chrono::milliseconds(1);
  if (s * 1000.0 >= static_cast<double>(kForever.count())) return kForever;
  return std::chrono::milliseconds(static_cast<int64_t>(std::ceil(s * 1000.0)));
}

std::string gloo_detail::seconds_str(Seconds s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", s);
  return buf;
}

void GlooTransport::Impl::start_threads() {
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

at::Tensor GlooTransport::Impl::hello_header(int to, const std::string& to_nonce) const {
  const auth::Mac m = hello_mac(to_nonce, opt.rank, to);
  Message hello;
  hello.kind = MsgKind::kControl;
  hello.id = kHelloId;
  at::Tensor proof = at::empty({static_cast<int64_t>(auth::kMacBytes / sizeof(float))}, at::kFloat);
  std::memcpy(proof.data_ptr<float>(), m.data(), m.size());  // raw bits; no arithmetic
  return encode_header(hello, {proof}, proof.numel(), proof);
}

auth::Mac GlooTransport::Impl::hello_mac(const std::string& to_nonce, int from, int to) const {
  return auth::mac(opt.secret, {"peer-hello", to_nonce, auth::be32(static_cast<uint32_t>(from)),
                                auth::be32(static_cast<uint32_t>(to))});
}

std::vector<int> GlooTransport::Impl::open_at_start() {
  std::vector<int> open;
  std::lock_guard<std::mutex> lock(mu);
  for (int p = 0; p < opt.world_size; ++p)
    if (p != opt.rank && peers[p] == PeerState::kOpen) open.push_back(p);
  return open;
}

std::string GlooTransport::Impl::nonce_of(c10d::Store& from, int r, int k) {
  try {
    return store_text(from.get(nonce_key(r, k)));
  } catch (const std::exception& e) {
    throw PeerError(who() + ": cannot read peer " + std::to_string(r) +
                    "'s nonce from the store: " + short_what(e));
  }
}

void GlooTransport::Impl::authenticate() {
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

void GlooTransport::Impl::drain() {
  {
    std::lock_guard<std::mutex> lock(mu);
    if (draining) return;
    draining = true;
  }
  room_cv.notify_all();
}

void GlooTransport::Impl::stop_beating() noexcept {
  {
    std::lock_guard<std::mutex> lock(mu);
    beat_stop = true;
  }
  beat_cv.notify_all();
  if (beater.joinable()) beater.join();
}

void GlooTransport::Impl::check_options() const {
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
    throw InputError(who() + ": no run secret (at least " + std::to_string(auth::kMinSecretBytes) +
                     " bytes; real/auth.h)");
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

void GlooTransport::Impl::host_store() {
  if (opt.rank != 0 || !opt.host_store) return;
  try {
    server.emplace(opt.secret, opt.master_addr, opt.master_port);
  } catch (const InputError&) {
    throw;
  } catch (const std::exception& e) {
    throw PeerError(who() + ": cannot host the rendezvous store: " + short_what(e));
  }
}

int64_t GlooTransport::Impl::rendezvous() {
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

void GlooTransport::Impl::finish_join(int64_t ticket) {
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

void GlooTransport::Impl::make_world() {
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

void GlooTransport::Impl::check_group(c10d::ProcessGroupGloo& group, const std::vector<int>& ranks,
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

void GlooTransport::Impl::shutdown() noexcept {
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
