// The simulator's network between nodes: the model of emu/star_shaper.h, run on SimGrid's links.
//
// Each ordered pair of nodes has one connection, as over TCP, which takes the pair's messages in
// send order. A message sent at a waits until a + L (L: the route's latency, L_s + L_d, each times
// the network model's latency factor), or until the message before it is through if that is
// later, then its bytes cross the sender's uplink and the receiver's downlink as one SimGrid
// transfer, which shares the links with every other transfer under the model SimGrid is
// configured with (CM02 or LV08: their weights, bandwidth factor and window cap); when its last
// byte is through it is in the receiver's inbox. So the latency is paid once per stream, not per
// message, and a message queued behind another follows that one's last byte at once. SimGrid itself
// charges only a sliver of the latency (kSimGridLatencyFactor, sim/platform.h), so that it weighs
// flows by their route's latency as CM02 does; this class charges the rest (a message queued behind
// another pays that sliver again: 1e-6 of its route's latency).
//
// Cost, as SimGrid calls per message (timing mode at 1,024 or 10,000 nodes sends millions). No
// actor need carry a message: the kernel can, as SimGrid runs activities started by its maestro
// (as SimDAG does). send() arms a kernel timer for the message's start (one simcall, and only when
// the pair's connection is idle: a message queued behind a busy one costs none); the timer starts
// the transfer, a host-to-host Comm (Comm::sendto_init); its end, seen by a callback on
// Activity::on_completion, puts the message in the inbox and starts the pair's next message or
// arms the timer for it. A message then costs the receiver's wake-up and, now and then, the
// sender's timer, against a bare mailbox message's four simcalls. But SimGrid 3.32 keeps the
// maestro's transfers in one list, searched from end to end as each one ends: with thousands in
// flight at once (an averaging round of 1,024 nodes) that search costs more than an actor would.
// So beyond kKernelTransfers (256) under way at once, a message goes as it did before: a daemon
// carrier actor of its pair (on the sender's host, started at the pair's first such message,
// woken by the same timer) puts it on the pair's own mailbox, whose permanent receiver (an actor
// on the receiver's host that never runs) lets the transfer start at once, takes it off the
// mailbox's list of finished transfers, and puts the message in the inbox (six simcalls more
// than the kernel's way, and a 256 KB stack per carrier). Both ways cross the same links at the
// same times.
//
// Transfers still under way when the last node actor ends are simulated to their end (nobody
// reads them); the runner takes the run's simulated time from its nodes, not from the engine.
//
// Must be used from SimGrid actors of one engine (all calls, and the kernel's callbacks, run one at
// a time, so there are no locks). Units: bytes, seconds.
#pragma once

#include <algorithm>
#include <cstdint>
#include <deque>
#include <optional>
#include <simgrid/kernel/Timer.hpp>
#include <simgrid/s4u/Actor.hpp>
#include <simgrid/s4u/Comm.hpp>
#include <simgrid/s4u/Host.hpp>
#include <simgrid/s4u/Mailbox.hpp>
#include <simgrid/s4u/Semaphore.hpp>
#include <unordered_map>
#include <vector>

#include "core/env.h"
#include "core/network/links.h"
#include "core/units.h"

namespace rv {

class SimNetwork {
 public:
  // `hosts[r]` is node r's host; `links` the scenario's (links_of): routes' latencies and the
  // network model's latency factor (the rates are the platform's links'). With
  // `platform_routes` (network.platform), a route's latency is SimGrid's for the two hosts.
  SimNetwork(std::vector<simgrid::s4u::Host*> hosts, NetworkLinks links,
             bool platform_routes = false);
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

  // The kernel's transfers under way at once, at most, beyond which the carriers take messages.
  static constexpr int kKernelTransfers = 256;
  // For tests: another limit, for every network of this process (0: carriers only); and how many
  // messages went each way in this process.
  static void limit_kernel_transfers(int n) { kernel_transfers_limit_ = n; }
  static int64_t kernel_messages() { return kernel_messages_; }
  static int64_t carrier_messages() { return carrier_messages_; }

 private:
  struct Queued {
    Seconds starts = 0;  // sent + the route's delay: its bytes may start
    Seconds floor = 0;   // the warm floor (StartupPacing::hand_over): not delivered before
    Message msg;
  };
  // One connection. Its state is one of: idle (no transfer, no timer: the queue is empty), armed
  // (`timer` set: the queue's front starts when it fires) or sending `carried`, by the kernel
  // (`comm` under way) or by the carrier (`by_carrier`). Only the kernel (maestro) moves it from
  // one state to the next.
  struct Pair {
    SimNetwork* net = nullptr;  // the completion callback finds its way back through the pair
    int src = -1, dst = -1;
    std::deque<Queued> queue;  // sent, not yet started
    simgrid::kernel::timer::Timer* timer = nullptr;
    Message carried;             // the message under way
    Seconds carried_floor = 0;   // its warm floor
    simgrid::s4u::CommPtr comm;  // its transfer, when the kernel's (its data: this pair)
    // The kernel's previous transfer, kept until the next one ends: the kernel still uses it after
    // the completion callback returns.
    simgrid::s4u::CommPtr done;
    Seconds delay = 0;  // delay(src, dst), computed with the pair's first message
    // The carrier: released once per message it is to carry (`by_carrier` while it does).
    simgrid::s4u::SemaphorePtr wake;
    bool by_carrier = false;
    simgrid::s4u::Mailbox* wire = nullptr;  // its transfers: put, then taken, by carry()
    bool retired = false;                   // quiesce(): the carrier ends when it wakes
    // The warm floor (core/network/tcp_pacing.h), and the messages through but held by it (their
    // floor, in order), the front's delivery armed on `hold_timer`.
    StartupPacing pacing;
    std::deque<Queued> held;
    simgrid::kernel::timer::Timer* hold_timer = nullptr;
    // Nothing to send (held messages are through: they wait for no transfer).
    bool idle() const { return queue.empty() && timer == nullptr && !comm && !by_carrier; }
    // The transfer's size: SimGrid does not move an empty payload.
    uint64_t carried_bytes() const {
      return static_cast<uint64_t>(std::max<Bytes>(carried.bytes, 1));
    }
  };
  // A node blocks on its semaphore only while it has nothing to do (`waiting`), and is released
  // only then: a message that finds it busy costs no SimGrid call.
  struct Inbox {
    std::deque<Message> queue;
    simgrid::s4u::SemaphorePtr wake;  // released when a message comes while recv() waits
    bool waiting = false;
  };
  struct Sender {
    int64_t in_flight = 0;               // messages sent and not yet in an inbox
    simgrid::s4u::SemaphorePtr flushed;  // released when in_flight drops to 0 while flush() waits
    bool waiting = false;
  };
  // The kernel's transfers under way at most (kKernelTransfers, or what
  // limit_kernel_transfers() set); beyond, the pairs' carriers take the messages.
  static int kernel_transfers_limit_;
  static int64_t kernel_messages_, carrier_messages_;
  // Kernel side (maestro, or inside a simcall): start the queue's front now, or arm the timer for
  // it; and what the end of a transfer does.
  void start(Pair& p);
  void next(Pair& p);
  void arrived(Pair& p);
  void deliver_held(Pair& p);  // the held front's floor has come
  // The message is in dst's inbox now: the pacing's arrival, the sender's count.
  void hand_to_receiver(Pair& p, Message msg);
  static void on_completion(const simgrid::s4u::Activity& a);
  void carry(Pair& p);  // the pair's carrier actor, on the sender's host
  // The receiver's host's actor that the pairs into `dst` name as their mailboxes' permanent
  // receiver, so that a put starts its transfer at once; it never runs.
  simgrid::s4u::ActorPtr receiver(int dst);
  void put_in_inbox(int dst, Message msg);
  Inbox& inbox(int node);
  Sender& sender(int node);

  std::vector<simgrid::s4u::Host*> hosts_;
  NetworkLinks links_;
  bool platform_routes_;
  // Seconds a message from src to dst waits before its bytes start, less SimGrid's sliver (once per
  // pair: a platform file's route is looked up in SimGrid).
  Seconds delay(int src, int dst) const;
  // By src * size() + dst; elements never move (a transfer's data and a carrier point to the pair).
  std::unordered_map<int64_t, Pair> pairs_;
  std::vector<std::unordered_map<int64_t, Pair>> retired_;  // quiesce()d pairs, whose carriers end
  int kernel_transfers_ = 0;                                // under way
  Pair& pair(int src, int dst) { return pairs_[static_cast<int64_t>(src) * size() + dst]; }
  std::vector<Inbox> inboxes_;
  std::vector<Sender> senders_;
  std::vector<simgrid::s4u::ActorPtr> receivers_;
};

}  // namespace rv
