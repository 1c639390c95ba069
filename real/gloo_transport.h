// GlooTransport: rv::Transport over PyTorch's distributed engine, c10d::ProcessGroupGloo over TCP,
// with an authenticated rendezvous store (real/auth_store.h; rank 0 hosts it unless another
// process does), configured like torchrun (MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE).
//
// Authentication: every rank holds the run's secret (real/auth.h). The store refuses a client
// that cannot prove it. Each rank publishes a fresh nonce in the store; the first message on each
// peer connection (a kControl with id kHelloId) carries MAC(secret; "peer-hello", the receiver's
// nonce, sender, receiver), and the constructor returns only once every peer's has been checked:
// a process that got between two ranks (guessing Gloo's ports) is refused with rv::PeerError. The
// process groups of make_group() check the same proof on their own connections.
//
// Bounds: a header that announces more than `max_payload_elems` (what the plan can send) is
// malformed (rv::InputError naming the peer). Received messages wait in the inbox up to
// `queue_bytes`; beyond that this rank reads no more until recv() takes some (the peers' sends
// wait: back-pressure, not memory). Sends in flight are bounded the same way: send() waits for
// room, and a send that finds none within `timeout` raises rv::PeerError.
//
// Wire format (real/wire_format.h): every message is an int64 header tensor: its fields, the
// payload's tensor count and shapes (at most kMaxPayloadTensors tensors of at most
// kMaxPayloadDims dimensions), and the payload itself as float32 if it has at most kInlineFloats
// elements. A larger payload is split: its lead (its first wire::kLeadFloats) follows the header
// on the same Gloo slot, its body (the rest) on a slot of its own, straight from the sender's
// memory into the receiver's. A header or lead is as long as what it carries; receivers post room
// for the longest. Gloo sends are rendezvous: data moves once the receiver has posted its recv and
// its notice of that has reached the sender. One receiver thread per peer keeps kHeadersAhead such
// rooms posted, takes that peer's headers and leads in order (a per-source recv, so that a peer's
// death wakes it at once, which Gloo's recvAnysource does not) and fills one inbox; recv()/
// try_recv() read the inbox, and posts the next room as it takes one. So no header or small
// payload waits for its receiver to post room for it, a round trip that no application protocol
// over TCP pays (through a shaped network its notice queues behind the receiver's own uploads),
// and one that cost a ring all-reduce of fresh state half its time on loopback (bench_allreduce:
// 1 MB pieces 0.5-0.7x c10d's allreduce, 1.1 MB pieces, each one payload after its header,
// 1.1-1.3x). A body's recv is posted, into its destination (an offered place, or pooled memory),
// as soon as its header is read, while its lead is still coming: the lead covers that round trip,
// and the body, the bulk of a large payload, is copied on neither side (copies of both were 40% of
// a 32 MB segment's exchange: bench_allreduce --part breakdown). send() is asynchronous: a reaper
// thread waits for the c10d work objects, which keep the headers, leads and bodies alive until
// sent; flush() waits.
// Memory: each receiver thread holds kHeadersAhead rooms of kHeaderWords words (about 1 MiB
// each), touched only as far as messages fill them.
//
// Local sockets: with MASTER_ADDR on the loopback (127.x, localhost) every rank binds 127.0.0.1;
// otherwise GLOO_SOCKET_IFNAME names the interface to bind, as for PyTorch, and without it Gloo
// binds the address this machine's hostname resolves to.
//
// kControl messages go to a separate queue read by recv_control(), never to recv()/try_recv().
//
// Failure: a peer whose connection closes (its process died) raises rv::PeerError("peer N ...")
// in recv()/try_recv() once the messages that arrived before are consumed; a recv() that waits
// `timeout` without a message raises rv::PeerError; a malformed header raises rv::InputError.
// Failures are sticky. close() is the orderly shutdown: every rank sends a "bye" (kControl with a
// negative id; such ids are reserved) to every other rank and waits for all of theirs (or the
// timeout), so no rank leaves while a peer still sends to it. Destroying a transport that was not
// closed aborts instead: no byes, connections dropped, so peers see this rank as failed.
//
// Joining (GlooOptions::peer_lost set): a rank's incarnation is 0 for the process that started
// with the run, k for its k-th replacement. The world group's mesh is made once, at the start, so a
// replacement is linked to each peer by a two-rank process group of its own, named after both
// ranks' incarnations. In the store:
//   rv/link/inc/<r>          rank r's incarnation (add; absent: 0)
//   rv/link/lost/<r>.<k>     set by a rank that lost incarnation k of r (after reporting it)
//   rv/link/claim/<r>.<k>    the nonce of the process that took r's slot as incarnation k (once)
//   rv/nonce/<r>[.<k>]       incarnation k's nonce (no suffix for 0)
//   rv/join/n, rv/join/req/<t> = "<r> <k>", rv/join/done/<t>   the joins, one at a time, in order
// A replacement of r checks that r's incarnation is lost, claims the next, takes a ticket, waits
// for the ticket before it to be done, and links to every rank whose incarnation is not lost,
// in rank order. Every other rank's acceptor thread serves the tickets in order: it takes r's
// old incarnation for lost (if it had not yet), makes its side of the link, says hello on it
// first and opens r again. The replacement's constructor returns once every link's hello proved
// the run's secret, as at the start; each end's own messages are what they were before.
//
// Threading: like every NodeEnv part, the public methods are called from the node's own thread;
// send() may also be called from one other thread at the same time (an emulator handing messages
// over): a message's header and payload are posted together, and each thread's messages to a
// peer arrive in the order that thread sent them.
#pragma once

#include <c10/util/intrusive_ptr.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/env.h"
#include "real/wire_format.h"

namespace c10d {
class ProcessGroupGloo;
class Store;
}  // namespace c10d

namespace rv {

// A TCP port on 127.0.0.1 that was free a moment ago (bound to port 0, read back, released), for
// a rendezvous on this machine. Throws rv::Error if no socket can be bound.
int free_loopback_port();

struct GlooOptions {
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  int rank = 0;
  int world_size = 1;
  Seconds timeout = 60;  // rendezvous, and silence before a waiting recv() gives up
  // The run's secret (real/auth.h), at least auth::kMinSecretBytes; rv::InputError without it.
  std::string secret;
  // Rank 0 serves the rendezvous store at master_addr:master_port (true), or another process
  // does (`ravnest real`'s launcher, which binds its port before the ranks start).
  bool host_store = true;
  // The largest payload, in float32 elements, that a peer may announce (node_process.cc gives
  // what the plan can send); more is a malformed header.
  int64_t max_payload_elems = wire::kMaxPayloadElems;
  // Bytes of received messages the inbox holds before this rank stops reading (and of sends in
  // flight before send() waits); one message larger than this still passes, alone.
  size_t queue_bytes = size_t{256} << 20;
  // real.on_peer_loss = "recover": a peer that dies or falls silent is lost, not a failure of this
  // rank. It is reported once per incarnation to `peer_lost` (from a transport thread; the
  // callback must not call back into the transport but send()), messages to it are dropped,
  // recv() waits as long as any peer is open (their heartbeats say they live) and a lost peer's
  // bye is not awaited. A malformed message is still a failure (rv::InputError). Such a transport
  // also admits replacements (`join`, below) of the ranks it lost.
  std::function<void(int peer, int incarnation)> peer_lost;
  // This process replaces lost rank `rank` of a running job (`ravnest node --join`; needs
  // `peer_lost`): see "Joining" above. It has no world group (group(), barrier(), make_group()).
  bool join = false;
  // The direct channel (direct()) gets a second connection to each peer, for its exchanges from a
  // higher rank to a lower one; the first carries those from lower to higher, and the messages.
  // Over one connection Gloo reads and writes under one lock, so a rank writing a segment to a
  // peer could not take in the peer's segment meanwhile (its event loop spins on the lock): a ring
  // of two, where a rank's previous and next member are one peer, ran 1.2-1.3x c10d's allreduce
  // at 4 MB for it, 0.75-0.87x with this. Made at construction: every rank of the world must ask
  // alike. Not for a replacement (`join`), which has no direct channel.
  bool direct_reverse = false;
};

class GlooTransport : public Transport {
 public:
  // The wire format's limits (real/wire_format.h).
  static constexpr int kMaxPayloadTensors = wire::kMaxTensors;
  static constexpr int kMaxPayloadDims = wire::kMaxDims;
  static constexpr int64_t kInlineFloats = wire::kInlineFloats;
  static constexpr int kHeaderWords = wire::kHeaderWords;
  // Header recvs each receiving thread keeps posted ahead of its peer's messages.
  static constexpr size_t kHeadersAhead = 4;

  // Blocks until every rank has joined (or throws rv::PeerError after `timeout`).
  explicit GlooTransport(const GlooOptions& options);
  ~GlooTransport() override;  // aborts if close() was not called; never throws

  int rank() const override;
  int size() const override;
  // Payload: at most kMaxPayloadTensors defined float32 CPU tensors of at most kMaxPayloadDims
  // dimensions (rv::Error otherwise). The sender may write its tensors again once send() returns:
  // a small payload is copied into its header, a split one's body is sent from a copy unless
  // Message::payload_frozen is set or the message alone holds its memory (then from where it is,
  // until it is sent). Sending to oneself puts the message in one's own inbox.
  void send(int dst, Message msg) override;
  Message recv() override;
  std::optional<Message> try_recv() override;
  // A payload of more than kInlineFloats offered a place (one contiguous CPU float32 tensor) is
  // written straight into it (its body by Gloo, its lead copied); other offers (smaller payloads,
  // to oneself, other types) are ignored.
  void offer(int src, const MessageMatch& match, at::Tensor into) override;
  void withdraw(int src, const MessageMatch& match) override;
  // Like recv(), but waits at most `wait` seconds, whatever the transport's timeout, and returns
  // nothing if no message arrived by then. Failures throw as in recv().
  std::optional<Message> recv_for(Seconds wait);
  // The executor's own channel: kControl messages (ids >= 0) never reach recv()/try_recv(), so
  // that an algorithm still running on this rank never sees them; they are read here, in order per
  // sender, waiting at most `wait` seconds (nothing on timeout; for waits whose length is no sign
  // of failure, such as gathering results while peers still train). Failures throw as in recv().
  std::optional<Message> recv_control(Seconds wait);
  // Throws rv::PeerError if a send failed or did not complete within `timeout`.
  void flush() override;
  // The algorithm is done: what it left unread will not be read, so a full inbox no longer holds
  // back the peers (their control messages and byes come behind). close() does it too.
  void drain();

  // Puts `m` in this rank's own inbox as the executor's message (src -1: a churn notice); any
  // thread may call it.
  void notify(Message m);
  // The run's rendezvous store (the churn membership keeps its state there). Valid until close().
  c10::intrusive_ptr<c10d::Store> store();
  // Peers lost so far (GlooOptions::peer_lost set), ascending; a rank that a replacement took
  // again is open, not lost.
  std::vector<int> lost_peers() const;
  // Rank `peer`'s incarnation as this rank knows it (this rank's own: its own).
  int incarnation(int peer) const;

  // Payload bytes received and not yet taken by recv(), try_recv() or recv_control(): at most
  // GlooOptions::queue_bytes plus the messages that had arrived when it was reached.
  size_t inbox_bytes() const;

  // Blocks until every rank has called barrier() (c10d barrier).
  void barrier();
  // Orderly shutdown (see above); idempotent. Throws the first failure seen (rv::PeerError, or
  // rv::InputError for a malformed message), or rv::PeerError if a peer did not say bye within
  // `timeout`; the transport is shut down all the same.
  void close();
  // For collective baselines (c10d allreduce) and gathering outputs at rank 0. Valid until close().
  c10d::ProcessGroupGloo& group();
  // A new process group of `ranks` (ascending, this rank among them) over the same rendezvous
  // store, for collectives within a subset. Blocks until every member has made it (rv::PeerError
  // after the timeout). The group may outlive neither close() nor this transport. Members make
  // the groups of one member list in the same order: the k-th of them is a group of its own
  // (its own store keys and proofs) on every member.
  c10::intrusive_ptr<c10d::ProcessGroupGloo> make_group(const std::vector<int>& ranks);

  // NodeEnv's direct channel (core/env.h DirectChannel) over this transport's links: c10d send and
  // recv on each peer's connection, under tags of their own (no message's header or body shares
  // them), so the tensor moves once, from the sender's memory into the place the receiver posted,
  // with no header, no receiving thread and no inbox between (bench_allreduce: a ring all-reduce
  // of 4 MB on 2-3 ranks over it against over messages). Sends and receives need an open peer
  // (rv::PeerError otherwise, and a work whose peer fails or stays silent past the timeout
  // fails with rv::PeerError); a tensor that is not contiguous float32 on the CPU, a tag outside
  // [0, DirectChannel::kMaxTag], this rank itself or no rank is rv::Error. Not for a replacement's
  // links or a transport that takes peers for lost (GlooOptions::peer_lost): the executor offers
  // the channel to runs without either. Valid until close().
  DirectChannel& direct();

 private:
  struct Impl;
  class Direct;
  std::unique_ptr<Impl> impl_;
  std::unique_ptr<Direct> direct_;
};

}  // namespace rv
