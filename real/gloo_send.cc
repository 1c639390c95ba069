// GlooTransport (real/gloo_transport.h): sending: send() and its checks, the posting of a
// message's parts, the reaper that waits for them, and the heartbeats.
#include <algorithm>
#include <chrono>
#include <cstring>

#include "core/error.h"
#include "real/gloo_transport_impl.h"

namespace rv {
namespace {

using namespace wire;
using namespace gloo_detail;

}  // namespace

void GlooTransport::Impl::reap_loop() {
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
      err = std::make_exception_ptr(
          PeerError(who() + ": send to peer " + std::to_string(dst) + " failed: " + short_what(e)));
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

void GlooTransport::Impl::beat_loop() {
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

void GlooTransport::Impl::post_send(int dst, const std::vector<at::Tensor>& parts, bool bounded,
                                    const at::Tensor& body) {
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

void GlooTransport::Impl::post_locked(int dst, const std::vector<at::Tensor>& parts, size_t bytes,
                                      bool bounded, bool hello, const at::Tensor& body) {
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

}  // namespace rv
