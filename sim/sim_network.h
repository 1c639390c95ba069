// The simulator's network between nodes: the model of emu/star_shaper.h, run on SimGrid's links.
//
// Each ordered pair of nodes has one connection, as over TCP: a daemon actor on the sender's host
// (started with the pair's first message) takes the pair's messages in send order. A message sent
// at a waits until a + L (L: the route's latency, L_s + L_d, each times the network model's
// latency factor), or until the message before it is through if that is later, then its bytes
// cross the sender's uplink and the receiver's downlink as one SimGrid transfer, which
// shares the links with every other transfer under the model SimGrid is configured with (CM02 or
// LV08: their weights, bandwidth factor and window cap); when its last byte is through it is in
// the receiver's inbox. So the latency is paid once per stream, not per message, and a message
// queued behind another follows that one's last byte at once. SimGrid itself charges only a
// sliver of the latency (kSimGridLatencyFactor, sim/platform.h), so that it weighs flows by their
// route's latency as CM02 does; this class charges the rest (a message queued behind another
// pays that sliver again: 1e-6 of its route's latency).
//
// Cost, as SimGrid calls per message (timing mode at 1,024 or 10,000 nodes sends millions): the
// transfer is a put on the pair's own mailbox, whose permanent receiver (an actor on the
// receiver's host that never runs) lets it start at once, and the carrier then takes it off the
// mailbox's list of finished transfers. Not Comm::sendto: SimGrid 3.32 keeps every detached
// transfer in one list and removes each, when it ends, by a linear search, so a round in which
// 1,024 nodes send at once spent a fifth of the 1,024-node scenario's wall time there. An idle
// carrier is woken by a kernel timer when its next message may start (not woken at once to sleep
// until then); carriers and receivers block only when they have nothing to do, and are released
// only then.
//
// Must be used from SimGrid actors of one engine (all calls run one at a time, so there are no
// locks). Units: bytes, seconds.
#pragma once

#include <deque>
#include <optional>
#include <unordered_map>
#include <vector>

#include <simgrid/kernel/Timer.hpp>
#include <simgrid/s4u/Actor.hpp>
#include <simgrid/s4u/Host.hpp>
#include <simgrid/s4u/Mailbox.hpp>
#include <simgrid/s4u/Semaphore.hpp>

#include "core/env.h"
#include "core/network/links.h"
#include "core/units.h"

namespace rv {

class SimNetwork {
 public:
  // `hosts[r]` is node r's host; `links` the scenario's (links_of): routes' latencies and the
  // network model's latency factor (the rates are the platform's links'). With
  // `platform_routes` (network.platform), a route's latency is SimGrid's for the two hosts.
  SimNetwork(std::vector<simgrid::s4u::Host*> hosts, NetworkLinks links, bool platform_routes = false);
  // Removes the timers still pending (a run that ended before a message it sent could start):
  // SimGrid's kernel keeps them across engines of one process.
  ~SimNetwork();
  SimNetwork(const SimNetwork&) = delete;
  SimNetwork& operator=(const SimNetwork&) = delete;

  int size() const { return static_cast<int>(hosts_.size()); }
  // Queues `msg` (of msg.bytes modeled bytes) on the pair's connection; returns at once.
  void send(int src, int dst, Message msg);
  // The next message in dst's inbox, waiting for one if there is none.
  Message recv(int dst);
  // Puts `msg` in `dst`'s queue now, without the network (the executor's own notices).
  void deliver(int dst, Message msg);
  // Forgets what waits in `dst`'s queue (a node that comes back starts with new connections).
  void clear_inbox(int dst);
  std::optional<Message> try_recv(int dst);
  // Until every message src has sent is in its receiver's inbox.
  void flush(int src);
  // Checkpoints (sim/sim_checkpoint.h): with nothing in flight and every inbox empty (rv::Error
  // otherwise), retires every connection (its carrier ends, the next message makes a new one) and
  // every receiver, so that the network is as a new simulation's.
  void quiesce();

 private:
  struct Queued {
    Seconds starts = 0;  // sent + the route's delay: its bytes may start
    Message msg;
  };
  // A carrier or a node blocks on its semaphore only while it has nothing to do (`idle`,
  // `waiting`), and is released only then: a message that finds it busy costs no SimGrid call.
  struct Pair {
    std::deque<Queued> queue;
    simgrid::s4u::SemaphorePtr wake;  // released when a message comes while carry() is idle
    bool idle = false;
    simgrid::kernel::timer::Timer* timer = nullptr;  // set while a timer is to wake the carrier
    simgrid::s4u::Mailbox* wire = nullptr;  // the pair's transfers: put, then taken, by carry()
    Seconds delay = 0;  // delay(src, dst), computed with the pair's first message
    bool retired = false;  // quiesce(): the carrier ends when it wakes
  };
  struct Inbox {
    std::deque<Message> queue;
    simgrid::s4u::SemaphorePtr wake;  // released when a message comes while recv() waits
    bool waiting = false;
  };
  struct Sender {
    int64_t in_flight = 0;                // messages sent and not yet in an inbox
    simgrid::s4u::SemaphorePtr flushed;  // released when in_flight drops to 0 while flush() waits
    bool waiting = false;
  };
  void carry(int src, int dst);  // the pair's actor on the sender's host
  // The receiver's host's actor that the pairs into `dst` name as their mailboxes' permanent
  // receiver, so that a put starts its transfer at once; it never runs.
  simgrid::s4u::ActorPtr receiver(int dst);
  Inbox& inbox(int node);
  Sender& sender(int node);

  std::vector<simgrid::s4u::Host*> hosts_;
  NetworkLinks links_;
  bool platform_routes_;
  // Seconds a message from src to dst waits before its bytes start, less SimGrid's sliver (once per
  // pair: a platform file's route is looked up in SimGrid).
  Seconds delay(int src, int dst) const;
  // By src * size() + dst; elements never move (carry() keeps a reference to its pair).
  std::unordered_map<int64_t, Pair> pairs_;
  std::vector<std::unordered_map<int64_t, Pair>> retired_;  // quiesce()d pairs, whose carriers end
  Pair& pair(int src, int dst) { return pairs_[static_cast<int64_t>(src) * size() + dst]; }
  std::vector<Inbox> inboxes_;
  std::vector<Sender> senders_;
  std::vector<simgrid::s4u::ActorPtr> receivers_;
};

}  // namespace rv
