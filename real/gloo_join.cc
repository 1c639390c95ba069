// GlooTransport (real/gloo_transport.h): replacements joining a running job ("Joining" in
// the header): a replacement's side, and every other rank's acceptor.
#include <sstream>
#include <thread>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>

#include "core/error.h"
#include "real/gloo_transport_impl.h"

namespace rv {
namespace {

using namespace wire;
using namespace gloo_detail;

}  // namespace

GlooTransport::Impl::Link GlooTransport::Impl::make_link(int q, int k_q, int k_me) {
  const int me = opt.rank;
  const std::string name = "link/" + (me < q ? rank_inc(me, k_me) + "-" + rank_inc(q, k_q)
                                             : rank_inc(q, k_q) + "-" + rank_inc(me, k_me));
  auto prefixed = c10::make_intrusive<c10d::PrefixStore>(name, link_store);
  return Link{
      c10::make_intrusive<c10d::ProcessGroupGloo>(prefixed, me < q ? 0 : 1, 2, group_options()),
      me < q ? 1 : 0};
}

int64_t GlooTransport::Impl::join_job() {
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

void GlooTransport::Impl::admit(int r, int k) {
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

void GlooTransport::Impl::accept_loop() {
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

}  // namespace rv
