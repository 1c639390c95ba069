#include "real/real_membership.h"

#include <sstream>
#include <string>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include "core/error.h"
#include "real/auth_store.h"
#include "real/gloo_transport.h"

namespace rv {
namespace {

const std::string kCount = "rv/churn/n";
const std::string kSeals = "rv/churn/seals";
std::string event_key(int64_t i) { return "rv/churn/e/" + std::to_string(i); }
std::string gone_key(int node, int incarnation) {
  return "rv/churn/gone/" + std::to_string(node) +
         (incarnation == 0 ? "" : "." + std::to_string(incarnation));
}
std::string seal_key(int64_t round) { return "rv/churn/seal/" + std::to_string(round); }

}  // namespace

StoreMembership::StoreMembership(c10::intrusive_ptr<c10d::Store> store, GlooTransport& transport,
                                 const Clock& clock, Seconds poll)
    : store_(std::move(store)),
      transport_(transport),
      clock_(clock),
      poll_(poll),
      rank_(transport.rank()) {
  watcher_ = std::thread([this] { watch(); });
}

StoreMembership::~StoreMembership() { stop(); }

void StoreMembership::stop() {
  {
    std::lock_guard<std::mutex> lock(stop_mu_);
    stopping_ = true;
  }
  stop_cv_.notify_all();
  if (watcher_.joinable()) watcher_.join();
}

int64_t StoreMembership::count() const { return store_->add(kCount, 0); }

void StoreMembership::left(int node, int incarnation) {
  const std::string me = std::to_string(rank_);
  // Held across the count and the event's key: this process's events() (whose store client
  // would block on the key while holding the client's one connection) waits instead.
  std::lock_guard<std::mutex> lock(mu_);
  if (store_text(store_->compareSet(gone_key(node, incarnation), {}, store_value(me))) != me)
    return;  // another rank reported it
  record(node, false);
}

void StoreMembership::record(int node, bool join) {
  const Seconds at = clock_.now();
  const int64_t i = store_->add(kCount, 1) - 1;
  store_->set(event_key(i),
              store_value(std::to_string(node) + (join ? " 1 " : " 0 ") + std::to_string(at)));
  Event e;
  e.kind = join ? EventKind::kJoin : EventKind::kLeave;
  e.node = node;
  e.start = e.end = at;
  recorded_.push_back(e);
}

void StoreMembership::joined(int node, Seconds timeout) {
  // Present at the start; then as its last event says (as the roster replays them).
  auto present = [&] {
    bool in = true;
    for (const MemberEvent& e : events(0))
      if (e.node == node) in = e.join;
    return in;
  };
  const Seconds until = clock_.now() + timeout;
  while (present()) {
    if (clock_.now() > until)
      throw PeerError("rank " + std::to_string(rank_) +
                      ": the run has not recorded the departure of the rank this "
                      "process replaces within " +
                      std::to_string(static_cast<int>(timeout)) + " s");
    std::this_thread::sleep_for(std::chrono::duration<double>(poll_));
  }
  std::lock_guard<std::mutex> lock(mu_);
  record(node, true);
}

std::vector<Event> StoreMembership::take_events() {
  std::lock_guard<std::mutex> lock(mu_);
  return std::move(recorded_);
}

int64_t StoreMembership::seal(int64_t round) {
  for (int64_t r = 0; r <= round; ++r) {
    if (sealed(r) >= 0) continue;
    // Earlier rounds are sealed (above), so the count read now is at least theirs.
    const std::string mine = std::to_string(count()) + " " + std::to_string(rank_);
    if (store_text(store_->compareSet(seal_key(r), {}, store_value(mine))) == mine)
      store_->add(kSeals, 1);
  }
  return sealed(round);
}

int64_t StoreMembership::sealed(int64_t round) const {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (const auto it = sealed_.find(round); it != sealed_.end()) return it->second;
  }
  if (!store_->check({seal_key(round)})) return -1;
  int64_t n = -1;
  std::istringstream(store_text(store_->get(seal_key(round)))) >> n;
  if (n < 0)
    throw InputError("the rendezvous store holds a malformed seal of round " +
                     std::to_string(round));
  std::lock_guard<std::mutex> lock(mu_);
  sealed_[round] = n;
  return n;
}

std::vector<MemberEvent> StoreMembership::events(size_t from) const {
  const auto n = static_cast<size_t>(count());
  std::lock_guard<std::mutex> lock(mu_);
  for (size_t i = events_.size(); i < n; ++i) {
    std::istringstream in(store_text(store_->get(event_key(static_cast<int64_t>(i)))));
    MemberEvent e;
    int join = 0;
    if (!(in >> e.node >> join >> e.at) || e.node < 0 || e.node >= transport_.size())
      throw InputError("the rendezvous store holds a malformed membership event " +
                       std::to_string(i));
    e.join = join != 0;
    events_.push_back(e);
  }
  if (from >= events_.size()) return {};
  return {events_.begin() + static_cast<std::ptrdiff_t>(from), events_.end()};
}

void StoreMembership::watch() {
  int64_t seen_events = 0, seen_seals = 0;
  std::unique_lock<std::mutex> lock(stop_mu_);
  while (
      !stop_cv_.wait_for(lock, std::chrono::duration<double>(poll_), [&] { return stopping_; })) {
    lock.unlock();
    try {
      const int64_t n = store_->add(kCount, 0), s = store_->add(kSeals, 0);
      if (n != seen_events || s != seen_seals) {
        seen_events = n;
        seen_seals = s;
        Message m;
        m.kind = MsgKind::kMember;
        m.bytes = kHeaderBytes;
        transport_.notify(std::move(m));
      }
    } catch (const std::exception&) {
      // The store went away (the run ends, or its host died): nothing more will change.
      lock.lock();
      return;
    }
    lock.lock();
  }
}

}  // namespace rv
