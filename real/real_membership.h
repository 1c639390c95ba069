// The churn Membership of a real run (real.on_peer_loss = "recover"), kept in the run's
// rendezvous store so that every rank sees one order of events and one count per round:
//
//   rv/churn/n            how many events (add)
//   rv/churn/e/<i>        event i: "<node> <join 0|1> <at>"
//   rv/churn/gone/<node>[.<k>]  claimed (compare-and-set) by the first rank to report the node's
//                         incarnation k (GlooTransport: a replacement's) lost, which alone records
//                         its departure
// A replacement (`ravnest node --join`) records its own arrival once the node's departure is
// recorded (joined()).
//   rv/churn/seal/<r>     round r's count, "<count> <rank>" set once by compare-and-set
//   rv/churn/seals        how many rounds are sealed (add)
//
// A watcher thread polls n and seals every `poll` seconds and, when either moved, puts a kMember
// notice in this rank's inbox (GlooTransport::notify), as the simulator's membership does
// after each event and each seal.
//
// Threading: left() may be called from any thread (the transport's, on a lost peer); the
// Membership methods from the rank's own thread.
#pragma once

#include <c10/util/intrusive_ptr.h>

#include <atomic>
#include <condition_variable>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "core/env.h"

namespace c10d {
class Store;
}

namespace rv {

class GlooTransport;

class StoreMembership : public Membership {
 public:
  // `store` and `transport` outlive it (stop() before the transport closes); `clock`: the run's.
  StoreMembership(c10::intrusive_ptr<c10d::Store> store, GlooTransport& transport,
                  const Clock& clock, Seconds poll = 0.05);
  ~StoreMembership() override;
  // Records the departure of incarnation `incarnation` of `node`, once for the run (the first rank
  // to report it records it, and keeps a kLeave event for take_events()).
  void left(int node, int incarnation);
  // This process replaced `node` (a lost rank): waits until the departure of the node's last
  // incarnation is recorded (up to `timeout`; rv::PeerError after it), then records its arrival
  // (a kJoin event for take_events()).
  void joined(int node, Seconds timeout);
  std::vector<Event> take_events();  // the kLeave and kJoin events this rank recorded
  void stop();                       // ends the watcher (idempotent)

  int64_t seal(int64_t round) override;
  int64_t sealed(int64_t round) const override;
  std::vector<MemberEvent> events(size_t from) const override;

 private:
  void watch();
  void record(int node, bool join);  // mu_ held: appends the event to the store and to recorded_
  int64_t count() const;             // events recorded so far

  c10::intrusive_ptr<c10d::Store> store_;
  GlooTransport& transport_;
  const Clock& clock_;
  std::vector<Event> recorded_;  // the kLeave and kJoin events this rank recorded
  Seconds poll_;
  int rank_;
  mutable std::mutex mu_;  // the caches and recorded_ (left() from other threads)
  mutable std::map<int64_t, int64_t> sealed_;  // rounds known sealed: their counts
  mutable std::vector<MemberEvent> events_;    // events read so far
  std::mutex stop_mu_;
  std::condition_variable stop_cv_;
  bool stopping_ = false;
  std::thread watcher_;
};

}  // namespace rv
