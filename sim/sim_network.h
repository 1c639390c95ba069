// The simulator's network between nodes: the model of emu/star_shaper.h, run on SimGrid's links.
//
// Each ordered pair of nodes has one connection, as over TCP, which takes the pair's messages in
// send order. A message sent
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
// Cost, as SimGrid calls per message (timing mode at 1,024 or 10,000 nodes sends millions): no
// actor carries the messages. The kernel itself does, as SimGrid runs activities started by its
// maestro (as SimDAG does): send() arms a kernel timer for the message's start (one simcall, and
// only when the pair's connection is idle; a message queued behind a busy one costs none); the
// timer starts the transfer, a host-to-host Comm (Comm::sendto_init); the end of a transfer, seen
// by a callback on Activity::on_completion, puts the message in the inbox and starts the pair's
// next message or arms the timer for it. So a message costs the receiver's wake-up and, now and
// then, the sender's timer, against a bare mailbox message's four simcalls (the carrier actor per
// pair that this replaced cost six more, and a 256 KB stack per pair). SimGrid keeps such
// transfers in one list, which it searches once when each ends: the cost grows with the
// transfers in flight at once.
//
// Transfers still under way when the last node actor ends are simulated to their end (nobody
// reads them); the runner takes the run's simulated time from its nodes, not from the engine.
//
// Must be used from SimGrid actors of one engine (all calls run one at a time, so there are no
// locks). Units: bytes, seconds.
#pragma once

#include <deque>
#include <optional>
#include <unordered_map>
#include <vector>

#include <simgrid/kernel/Timer.hpp>
#include <simgrid/s4u/Comm.hpp>
#include <simgrid/s4u/Host.hpp>
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
  // SimGrid's kernel keeps them across engines of one process. A transfer still under way (an
  // engine that stopped early) is left to the engine, which frees it.
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
  // otherwise), forgets every connection, so that the network is as a new simulation's.
  void quiesce();

 private:
  struct Queued {
    Seconds starts = 0;  // sent + the route's delay: its bytes may start
    Message msg;
  };
  // One connection. Its state is one of: idle (no transfer, no timer: the queue is empty), armed
  // (`timer` set: the queue's front starts when it fires) or sending (`comm` under way, carrying
  // `carried`). Only the kernel (maestro) moves it out of armed or sending.
  struct Pair {
    SimNetwork* net = nullptr;  // the completion callback finds its way back through the pair
    int src = -1, dst = -1;
    std::deque<Queued> queue;  // sent, not yet started
    simgrid::kernel::timer::Timer* timer = nullptr;
    simgrid::s4u::CommPtr comm;  // the transfer under way (its data: this pair)
    Message carried;             // its message
    // The previous transfer, kept until the next one ends: the kernel still uses it after the
    // completion callback returns.
    simgrid::s4u::CommPtr done;
    Seconds delay = 0;  // delay(src, dst), computed with the pair's first message
  };
  // A node blocks on its semaphore only while it has nothing to do (`waiting`), and is released
  // only then: a message that finds it busy costs no SimGrid call.
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
  // Kernel side (maestro, or inside a simcall): start the queue's front now, or arm the timer for
  // it; and what the end of a transfer does.
  void start(Pair& p);
  void next(Pair& p);
  void arrived(Pair& p);
  static void on_completion(const simgrid::s4u::Activity& a);
  void put_in_inbox(int dst, Message msg);
  Inbox& inbox(int node);
  Sender& sender(int node);

  std::vector<simgrid::s4u::Host*> hosts_;
  NetworkLinks links_;
  bool platform_routes_;
  // Seconds a message from src to dst waits before its bytes start, less SimGrid's sliver (once per
  // pair: a platform file's route is looked up in SimGrid).
  Seconds delay(int src, int dst) const;
  // By src * size() + dst; elements never move (a transfer's data points to its pair).
  std::unordered_map<int64_t, Pair> pairs_;
  Pair& pair(int src, int dst) { return pairs_[static_cast<int64_t>(src) * size() + dst]; }
  std::vector<Inbox> inboxes_;
  std::vector<Sender> senders_;
};

}  // namespace rv
