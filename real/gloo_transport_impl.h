// GlooTransport's insides (real/gloo_transport.h), shared by the files that implement it:
// gloo_transport.cc (making the transport, the hellos, shutting down, the public methods but
// send()), gloo_send.cc (send(), posting, the reaper, heartbeats), gloo_receive.cc (each peer's
// receiver, the inbox, peers' failures) and gloo_join.cc (replacements joining a running job).
// Not for any other file.
#pragma once

#include <ATen/ATen.h>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <vector>

#include "real/auth.h"
#include "real/auth_store.h"
#include "real/buffer_pool.h"
#include "real/gloo_transport.h"
#include "real/liveness.h"
#include "real/wire_format.h"

namespace rv {
namespace gloo_detail {

using SteadyClock = std::chrono::steady_clock;
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
std::string short_what(const std::exception& e);
// Seconds as a Gloo wait: at least 1 ms, at most kForever.
std::chrono::milliseconds to_ms(Seconds s);
std::string seconds_str(Seconds s);

// Store keys of joining (see "Joining" in the header).
inline std::string rank_inc(int r, int k) { return std::to_string(r) + "." + std::to_string(k); }
inline std::string nonce_key(int r, int k) {
  return "rv/nonce/" + (k == 0 ? std::to_string(r) : rank_inc(r, k));
}
inline std::string inc_key(int r) { return "rv/link/inc/" + std::to_string(r); }
inline std::string lost_key(int r, int k) { return "rv/link/lost/" + rank_inc(r, k); }
inline std::string claim_key(int r, int k) { return "rv/link/claim/" + rank_inc(r, k); }
inline const std::string kJoinCount = "rv/join/n";
inline std::string join_req_key(int64_t t) { return "rv/join/req/" + std::to_string(t); }
inline std::string join_done_key(int64_t t) { return "rv/join/done/" + std::to_string(t); }
// How often the acceptor looks for joins, and a replacement for its turn.
constexpr std::chrono::milliseconds kJoinPoll(50);

}  // namespace gloo_detail

struct GlooTransport::Impl {
  using SteadyClock = gloo_detail::SteadyClock;
  using WorkPtr = gloo_detail::WorkPtr;
  using Decoded = wire::Decoded;

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
    auto go = c10d::ProcessGroupGloo::Options::create(gloo_detail::to_ms(opt.timeout));
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

  void start_threads();

  // The hello that proves to `to` (incarnation's nonce `to_nonce`) that this rank holds the secret.
  at::Tensor hello_header(int to, const std::string& to_nonce) const;

  // The proof that `from` holds the run's secret, for `to`, over `to`'s nonce.
  auth::Mac hello_mac(const std::string& to_nonce, int from, int to) const;

  // The peers this rank is linked to (at the start: every one; a replacement: those not lost).
  std::vector<int> open_at_start();

  // Rank `r`'s nonce for incarnation `k`, from the store.
  std::string nonce_of(c10d::Store& from, int r, int k);

  // Sends every linked peer this rank's hello (the first message on each connection: the beater
  // starts after), then waits until every one's hello has been checked. rv::PeerError if one fails
  // or does not come within the timeout.
  void authenticate();

  // Checks a peer's first message, its hello; throws rv::PeerError if it is not a valid one.
  void check_hello(int peer, const Decoded& d, const int64_t* words);

  static size_t payload_bytes(const Message& m) {
    size_t b = 0;
    for (const auto& t : m.payload) b += static_cast<size_t>(t.numel()) * kFloatBytes;
    return b;
  }

  void deliver(Message m);

  // Takes the front of `queue` (lock held), releasing its bytes.
  Message pop(std::deque<Message>& queue);

  // Holds `peer`'s receiver while the inbox is full (back-pressure); false once shutting down.
  bool wait_for_room(int peer);

  // The next message of `queue` (inbox or control), waiting until `deadline`; nothing on timeout.
  // Messages that arrived are delivered before a failure is raised.
  std::optional<Message> take(std::deque<Message>& queue, SteadyClock::time_point deadline);

  bool tolerant() const { return static_cast<bool>(opt.peer_lost); }

  // Lock held: `peer` is gone; true if it was open (then report_lost() must follow, unlocked).
  // Tolerant: what is posted to and from it is aborted, so that neither a silent peer's sends nor
  // its receiver wait for it (the sends behind them go to live peers).
  bool mark_failed(int peer);

  static void abort_quietly(const WorkPtr& w) {
    try {
      w->abort();
    } catch (...) {
    }
  }

  // Tells the executor (GlooOptions::peer_lost) that incarnation `k` of `peer` is lost, then the
  // store (a replacement may take its rank from then on); if it cannot (the store that keeps the
  // membership has gone with its host), this rank fails with that reason.
  void report_lost(int peer, int k);

  // A peer's connection (of its incarnation `k`) failed with `e`. Tolerant: a lost peer (a
  // malformed message still fails this rank); otherwise the first failure, sticky. A failure of
  // an incarnation a replacement has since taken over is past.
  void peer_failed(int peer, std::exception_ptr e, int k);

  // A recv posted ahead of its message: its work and the tensor it fills.
  struct Posted {
    WorkPtr work;
    std::vector<at::Tensor> tensors;
  };

  // Posts a recv from `peer` on `tag` into `tensors`; nothing once shutting down.
  std::optional<Posted> post_recv(int peer, std::vector<at::Tensor> tensors, int tag);

  // Lock held: a posted recv of `peer` no longer tracked (shutdown no longer aborts it).
  void untrack(int peer, const WorkPtr& w);

  // Waits for a posted recv; false if it was aborted (shutdown).
  bool wait_recv(int peer, const WorkPtr& w);

  // A posted recv given up before it completed: aborted and no longer tracked, so that it is
  // released with its last reference (Gloo then writes nothing more into its tensor).
  void forget_recv(int peer, const WorkPtr& w);

  // The place offered for this message's payload (taken from the offers, and marked as being
  // filled), or an undefined tensor.
  at::Tensor take_offer(int peer, const Message& m, int64_t elems, size_t tensors);
  void end_fill(int peer);

  // Posts room for `peer`'s next header (the largest one), fields zeroed so that a header cut
  // short reads as malformed rather than as an earlier message's fields in reused memory.
  std::optional<Posted> post_header(int peer);

  // One per peer: that peer's messages, in order, until its bye, its failure or shutdown.
  // kHeadersAhead header recvs stay posted, so that Gloo's notice that a recv is ready reaches
  // the sender before its next messages rather than after it, behind this rank's own uploads.
  void receive_loop(int peer);

  // Keeps kHeadersAhead header recvs of `peer` posted in `headers`; false once shutting down.
  bool fill_headers(int peer, std::deque<Posted>& headers);

  // The header that arrived in `header`, decoded (rv::InputError if malformed). A peer's `first`
  // message that is malformed is no proof of the run's secret: rv::PeerError.
  Decoded read_header(int peer, const Posted& header, bool first);

  // `peer` said bye: it sends no more.
  void said_bye(int peer);

  // Reads the payload of the message `d` (whose header arrived in `header`) into d.msg.payload:
  // from the header, or split, its lead from the next of `headers` and its body from its own slot.
  // False once shutting down.
  bool read_payload(int peer, const Posted& header, std::deque<Posted>& headers, Decoded& d);

  // A split payload, into `flat`: an offered place (Transport::offer) or pooled memory. The body's
  // recv is posted there now, while the lead comes into room posted ahead, so that its notice
  // reaches the sender before the lead has arrived; then the lead is copied in front. False once
  // shutting down.
  bool read_split(int peer, std::deque<Posted>& headers, const Decoded& d, at::Tensor& flat);

  // Waits for posted sends in order, so that their tensors are released and errors are seen. A
  // message's last part first: the others went before it on the same connection, so that one
  // wake-up of this thread serves the whole message.
  void reap_loop();

  // Every beat interval, a heartbeat to every open peer, until stopped.
  void beat_loop();

  void drain();

  void stop_beating() noexcept;

  // `bounded`: waits (up to the timeout) while opt.queue_bytes of bounded sends are in flight;
  // heartbeats, hellos and byes are not bounded (they are small, and must not wait).
  // `parts`: a message's header, then its lead if it is split; `body`: a split payload's body
  // (wire_format.h), read where it is until its send completes.
  void post_send(int dst, const std::vector<at::Tensor>& parts, bool bounded = true,
                 const at::Tensor& body = {});

  // post_send() with post_mu held. `hello`: the first message on a replacement's link, the only
  // one that goes while it is joining. Tolerant: a message to a peer not open is dropped.
  void post_locked(int dst, const std::vector<at::Tensor>& parts, size_t bytes, bool bounded,
                   bool hello, const at::Tensor& body = {});

  // Waits until every posted send completed, up to `deadline`; false on timeout.
  bool wait_sends(std::unique_lock<std::mutex>& lock, SteadyClock::time_point deadline) {
    return send_cv.wait_until(lock, deadline, [&] { return sends.empty(); });
  }

  // ---- Construction ----

  // rv::InputError for options no transport can have.
  void check_options() const;

  // Rank 0 serves the rendezvous store, unless another process does (GlooOptions::host_store).
  void host_store();

  // Makes the device, connects to the store (and, tolerant, a second client for links) and
  // publishes this rank's nonce; a replacement joins the job (join_job()) and returns its ticket,
  // other ranks -1. Errors name this rank.
  int64_t rendezvous();

  // A replacement, linked: starts its threads, checks every link's hello and marks its join
  // `ticket` done ("failed" if it fails, and then shuts down).
  void finish_join(int64_t ticket);

  // The world group, over which every peer is linked and open. rv::PeerError if the ranks do not
  // all come within the timeout.
  void make_world();

  // A new group's connections are new: each member proves the run's secret to each other member
  // over the receiver's nonce, as on the transport's own connections. rv::PeerError naming a member
  // whose proof is wrong; a proof that does not come within the timeout fails in c10d.
  void check_group(c10d::ProcessGroupGloo& group, const std::vector<int>& ranks,
                   const std::string& name);

  // ---- Joining (see the header) ----

  bool is_stopping() {
    std::lock_guard<std::mutex> lock(mu);
    return stopping;
  }

  // The two-rank group that links this rank to a replacement `q` (or, on a replacement, to peer
  // q), named after both ends' incarnations. Blocks until the other end makes it too.
  Link make_link(int q, int k_q, int k_me);

  // This process replaces lost rank opt.rank: claims its next incarnation, waits its turn, and
  // links to every rank whose incarnation is not lost (peers and inc are set; the threads not yet
  // started). Returns its join ticket, to be marked done once its links are checked.
  int64_t join_job();

  // Opens rank r again as its incarnation k (a replacement asked to join): its old incarnation is
  // lost (reported, if this rank had not yet), its link is made, and the hello goes first on it.
  void admit(int r, int k);

  // Serves the join tickets in order, from accept_from, until the transport stops. A ticket whose
  // request never comes (its process died) is passed over after the timeout; a link that cannot
  // be made leaves its rank lost.
  void accept_loop();

  // Stops every thread (aborting pending Gloo waits) and drops the process group. Never throws.
  void shutdown() noexcept;
};

}  // namespace rv
