// GlooTransport (real/gloo_transport.h): each peer's receiver (its headers posted ahead, the
// payloads into offered places or pooled memory), the inbox, and what follows a peer's failure.
#include <c10/util/ScopeExit.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "real/gloo_transport_impl.h"

namespace rv {
namespace {

using namespace wire;
using namespace gloo_detail;

}  // namespace

void GlooTransport::Impl::check_hello(int peer, const Decoded& d, const int64_t* words) {
  const bool shaped = d.msg.kind == MsgKind::kControl && d.msg.id == kHelloId && d.inline_payload &&
                      d.elems == static_cast<int64_t>(auth::kMacBytes / sizeof(float));
  if (!shaped ||
      !auth::same_mac(
          hello_mac(nonce, peer, opt.rank),
          std::string_view(reinterpret_cast<const char*>(words + kWInlineData), auth::kMacBytes))) {
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

void GlooTransport::Impl::deliver(Message m) {
  {
    std::lock_guard<std::mutex> lock(mu);
    inbox_bytes += payload_bytes(m);
    (m.kind == MsgKind::kControl ? control : inbox).push_back(std::move(m));
  }
  inbox_cv.notify_all();
}

Message GlooTransport::Impl::pop(std::deque<Message>& queue) {
  Message m = std::move(queue.front());
  queue.pop_front();
  inbox_bytes -= std::min(inbox_bytes, payload_bytes(m));
  room_cv.notify_all();
  return m;
}

bool GlooTransport::Impl::wait_for_room(int peer) {
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

std::optional<Message> GlooTransport::Impl::take(std::deque<Message>& queue,
                                                 SteadyClock::time_point deadline) {
  std::unique_lock<std::mutex> lock(mu);
  for (;;) {
    if (!queue.empty()) return pop(queue);
    if (failure) std::rethrow_exception(failure);
    if (closed) throw PeerError(who() + ": recv() after close()");
    if (open_peers == 0) {
      throw PeerError(who() +
                      (tolerant()
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

bool GlooTransport::Impl::mark_failed(int peer) {
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

void GlooTransport::Impl::report_lost(int peer, int k) {
  if (!tolerant()) return;
  try {
    opt.peer_lost(peer, k);
    store->set(lost_key(peer, k), store_value(std::to_string(opt.rank)));
  } catch (const std::exception& e) {
    {
      std::lock_guard<std::mutex> lock(mu);
      if (!failure && !stopping)
        failure =
            std::make_exception_ptr(PeerError(who() + ": lost peer " + std::to_string(peer) +
                                              ", and could not record its loss: " + short_what(e)));
    }
    inbox_cv.notify_all();
  }
}

void GlooTransport::Impl::peer_failed(int peer, std::exception_ptr e, int k) {
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

std::optional<GlooTransport::Impl::Posted> GlooTransport::Impl::post_recv(
    int peer, std::vector<at::Tensor> tensors, int tag) {
  std::lock_guard<std::mutex> lock(mu);
  if (stopping || (tolerant() && peers[peer] == PeerState::kFailed)) return std::nullopt;
  Posted p{links[peer].pg->recv(tensors, links[peer].index, tag), std::move(tensors)};
  recv_work[peer].push_back(p.work);
  return p;
}

void GlooTransport::Impl::untrack(int peer, const WorkPtr& w) {
  auto& posted = recv_work[peer];
  const auto it = std::find(posted.begin(), posted.end(), w);
  if (it != posted.end()) posted.erase(it);
}

bool GlooTransport::Impl::wait_recv(int peer, const WorkPtr& w) {
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

void GlooTransport::Impl::forget_recv(int peer, const WorkPtr& w) {
  std::lock_guard<std::mutex> lock(mu);
  untrack(peer, w);
  abort_quietly(w);
}

at::Tensor GlooTransport::Impl::take_offer(int peer, const Message& m, int64_t elems,
                                           size_t tensors) {
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

void GlooTransport::Impl::end_fill(int peer) {
  {
    std::lock_guard<std::mutex> lock(mu);
    filling[peer].reset();
  }
  fill_cv.notify_all();
}

std::optional<GlooTransport::Impl::Posted> GlooTransport::Impl::post_header(int peer) {
  std::vector<at::Tensor> h{buffers.take(kHeaderWords, at::kLong)};
  std::memset(h[0].data_ptr<int64_t>(), 0, sizeof(int64_t) * kWInlineData);
  return post_recv(peer, std::move(h), kHeaderTag);
}

void GlooTransport::Impl::receive_loop(int peer) {
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

bool GlooTransport::Impl::fill_headers(int peer, std::deque<Posted>& headers) {
  while (headers.size() < kHeadersAhead) {
    std::optional<Posted> p = post_header(peer);
    if (!p) return false;
    headers.push_back(std::move(*p));
  }
  return true;
}

Decoded GlooTransport::Impl::read_header(int peer, const Posted& header, bool first) {
  try {
    return decode_header(header.tensors[0].data_ptr<int64_t>(),
                         static_cast<size_t>(header.tensors[0].numel()), peer,
                         opt.max_payload_elems);
  } catch (const InputError& e) {
    if (!first) throw;
    throw PeerError(who() + ": the connection of peer " + std::to_string(peer) +
                    " did not prove the run's secret (its first message is malformed: " + e.what() +
                    "): an impostor, or a process of another kind");
  }
}

void GlooTransport::Impl::said_bye(int peer) {
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

bool GlooTransport::Impl::read_payload(int peer, const Posted& header, std::deque<Posted>& headers,
                                       Decoded& d) {
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

bool GlooTransport::Impl::read_split(int peer, std::deque<Posted>& headers, const Decoded& d,
                                     at::Tensor& flat) {
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

}  // namespace rv
