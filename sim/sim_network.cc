#include "sim/sim_network.h"

#include <algorithm>
#include <string>

#include <simgrid/s4u/Actor.hpp>
#include <simgrid/s4u/Comm.hpp>
#include <simgrid/s4u/Engine.hpp>

#include "core/error.h"
#include "sim/platform.h"

namespace sg4 = simgrid::s4u;

namespace rv {

SimNetwork::SimNetwork(std::vector<sg4::Host*> hosts, std::vector<Seconds> latency, double latency_factor)
    : hosts_(std::move(hosts)),
      latency_(std::move(latency)),
      latency_factor_(latency_factor),
      inboxes_(hosts_.size()),
      senders_(hosts_.size()) {
  RV_CHECK(latency_.size() == hosts_.size(), "simulated network: a latency per host");
}

// Semaphores are made on first use, from an actor (SimGrid's synchronisation objects belong to
// the running simulation).
SimNetwork::Inbox& SimNetwork::inbox(int node) {
  Inbox& in = inboxes_.at(static_cast<size_t>(node));
  if (!in.ready) in.ready = sg4::Semaphore::create(0);
  return in;
}

SimNetwork::Sender& SimNetwork::sender(int node) {
  Sender& s = senders_.at(static_cast<size_t>(node));
  if (!s.flushed) s.flushed = sg4::Semaphore::create(0);
  return s;
}

void SimNetwork::send(int src, int dst, Message msg) {
  RV_CHECK(src >= 0 && src < size() && dst >= 0 && dst < size() && src != dst,
           "send to an invalid node " + std::to_string(dst));
  Pair& p = pairs_[{src, dst}];
  const bool first = !p.ready;
  if (first) p.ready = sg4::Semaphore::create(0);
  // The same sum as the emulator's (StarNetwork::delay), so that both give the same times, less
  // the sliver SimGrid charges itself.
  const Seconds delay = std::max(0.0, latency_factor_ * latency_[src] + latency_factor_ * latency_[dst] -
                                          kSimGridLatencyFactor * (latency_[src] + latency_[dst]));
  p.queue.push_back({sg4::Engine::get_clock() + delay, std::move(msg)});
  ++sender(src).in_flight;
  p.ready->release();
  if (first) {
    sg4::ActorPtr a = sg4::Actor::create("n" + std::to_string(src) + ">n" + std::to_string(dst), hosts_[src],
                                         [this, src, dst] { carry(src, dst); });
    a->daemonize();
  }
}

void SimNetwork::carry(int src, int dst) {
  Pair& p = pairs_.at({src, dst});
  for (;;) {
    p.ready->acquire();
    Queued q = std::move(p.queue.front());
    p.queue.pop_front();
    const Seconds wait = q.starts - sg4::Engine::get_clock();
    if (wait > 0) sg4::this_actor::sleep_for(wait);
    const auto bytes = static_cast<uint64_t>(std::max<Bytes>(q.msg.bytes, 1));
    sg4::Comm::sendto(hosts_[src], hosts_[dst], bytes);
    Inbox& in = inbox(dst);
    in.queue.push_back(std::move(q.msg));
    in.ready->release();
    Sender& s = sender(src);
    if (--s.in_flight == 0 && s.waiting) {
      s.waiting = false;
      s.flushed->release();
    }
  }
}

Message SimNetwork::recv(int dst) {
  Inbox& in = inbox(dst);
  in.ready->acquire();
  Message m = std::move(in.queue.front());
  in.queue.pop_front();
  return m;
}

std::optional<Message> SimNetwork::try_recv(int dst) {
  Inbox& in = inbox(dst);
  if (in.ready->would_block()) return std::nullopt;
  return recv(dst);
}

void SimNetwork::flush(int src) {
  Sender& s = sender(src);
  while (s.in_flight > 0) {
    s.waiting = true;
    s.flushed->acquire();
  }
}

}  // namespace rv
