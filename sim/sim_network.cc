#include "sim/sim_network.h"

#include <algorithm>
#include <string>

#include <simgrid/s4u/Actor.hpp>
#include <simgrid/s4u/Comm.hpp>
#include <simgrid/s4u/Engine.hpp>
#include <simgrid/simix.hpp>

#include "core/error.h"
#include "sim/platform.h"

namespace sg4 = simgrid::s4u;

namespace rv {

SimNetwork::SimNetwork(std::vector<sg4::Host*> hosts, NetworkLinks links, bool platform_routes)
    : hosts_(std::move(hosts)),
      links_(std::move(links)),
      platform_routes_(platform_routes),
      inboxes_(hosts_.size()),
      receivers_(hosts_.size()),
      senders_(hosts_.size()) {
  RV_CHECK(links_.nodes.size() == hosts_.size(), "simulated network: links per host");
}

SimNetwork::~SimNetwork() {
  for (auto& [key, p] : pairs_)
    if (p.timer != nullptr) p.timer->remove();
}

// Semaphores are made on first use, from an actor (SimGrid's synchronisation objects belong to
// the running simulation).
SimNetwork::Inbox& SimNetwork::inbox(int node) {
  Inbox& in = inboxes_.at(static_cast<size_t>(node));
  if (!in.wake) in.wake = sg4::Semaphore::create(0);
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
  Pair& p = pair(src, dst);
  const bool first = !p.wake;
  if (first) {
    p.wake = sg4::Semaphore::create(0);
    // The same sum as the emulator's (StarNetwork::delay), so that both give the same times, less
    // the sliver SimGrid charges itself.
    p.delay = delay(src, dst);
  }
  const Seconds starts = sg4::Engine::get_clock() + p.delay;
  p.queue.push_back({starts, std::move(msg)});
  ++sender(src).in_flight;
  if (p.idle) {
    // The carrier is woken when the message may start, by a timer of SimGrid's kernel, rather than
    // woken now to sleep until then: one blocking call fewer per message.
    p.idle = false;
    simgrid::kernel::actor::simcall_answered([&p, starts] {
      p.timer = simgrid::kernel::timer::Timer::set(starts, [&p] {
        p.timer = nullptr;  // the kernel deletes a timer once it has run
        p.wake->release();
      });
    });
  }
  if (first) {
    const std::string name = "n" + std::to_string(src) + ">n" + std::to_string(dst);
    p.wire = sg4::Mailbox::by_name(name);
    p.wire->set_receiver(receiver(dst));
    // A carrier runs only SimGrid calls: a small stack, so that tens of thousands of them fit.
    constexpr unsigned kStack = 256 * 1024;
    sg4::Actor::init(name, hosts_[src])->set_stacksize(kStack)->start([this, src, dst] { carry(src, dst); })->daemonize();
  }
}

Seconds SimNetwork::delay(int src, int dst) const {
  if (platform_routes_) {
    std::vector<sg4::Link*> route;
    double latency = 0;
    hosts_[static_cast<size_t>(src)]->route_to(hosts_[static_cast<size_t>(dst)], route, &latency);
    return std::max(0.0, links_.latency_factor * latency - kSimGridLatencyFactor * latency);
  }
  return std::max(0.0, links_.route_delay(src, dst) - kSimGridLatencyFactor * links_.route_latency(src, dst));
}

void SimNetwork::carry(int src, int dst) {
  Pair& p = pair(src, dst);
  for (;;) {
    while (p.queue.empty()) {
      p.idle = true;
      p.wake->acquire();
      if (p.retired) return;
    }
    Queued q = std::move(p.queue.front());
    p.queue.pop_front();
    // Still to wait: a message that was queued behind another, or the pair's first.
    const Seconds wait = q.starts - sg4::Engine::get_clock();
    if (wait > 0) sg4::this_actor::sleep_for(wait);
    const auto bytes = static_cast<uint64_t>(std::max<Bytes>(q.msg.bytes, 1));
    static char token;  // a transfer carries no data here: the message goes to the inbox below
    p.wire->put(&token, bytes);
    p.wire->get<char>();  // takes the finished transfer off the mailbox's list (no simulated time)
    Inbox& in = inbox(dst);
    in.queue.push_back(std::move(q.msg));
    if (in.waiting) {
      in.waiting = false;
      in.wake->release();
    }
    Sender& s = sender(src);
    if (--s.in_flight == 0 && s.waiting) {
      s.waiting = false;
      s.flushed->release();
    }
  }
}

sg4::ActorPtr SimNetwork::receiver(int dst) {
  sg4::ActorPtr& a = receivers_.at(static_cast<size_t>(dst));
  if (!a) {
    a = sg4::Actor::init("n" + std::to_string(dst) + "<", hosts_[dst])
            ->set_stacksize(64 * 1024)
            ->start([] { sg4::Semaphore::create(0)->acquire(); });  // never runs again
    a->daemonize();
  }
  return a;
}

void SimNetwork::deliver(int dst, Message msg) {
  Inbox& in = inbox(dst);
  in.queue.push_back(std::move(msg));
  if (in.waiting) {
    in.waiting = false;
    in.wake->release();
  }
}

void SimNetwork::quiesce() {
  for (int r = 0; r < size(); ++r) {
    const Inbox& in = inboxes_[static_cast<size_t>(r)];
    const Sender& s = senders_[static_cast<size_t>(r)];
    if (!in.queue.empty() || s.in_flight != 0)
      throw Error("checkpoint: node " + std::to_string(r) + " has messages " +
                  (in.queue.empty() ? "in flight" : "unread") + " at the checkpoint");
  }
  for (auto& [key, p] : pairs_) {
    RV_CHECK(p.idle && p.queue.empty() && p.timer == nullptr, "quiesce: a busy connection");
    p.retired = true;
    p.wake->release();
  }
  retired_.push_back(std::move(pairs_));
  pairs_.clear();
  for (auto& a : receivers_)
    if (a) {
      a->kill();
      a = nullptr;
    }
}

void SimNetwork::clear_inbox(int dst) { inbox(dst).queue.clear(); }

Message SimNetwork::recv(int dst) {
  Inbox& in = inbox(dst);
  while (in.queue.empty()) {
    in.waiting = true;
    in.wake->acquire();
  }
  Message m = std::move(in.queue.front());
  in.queue.pop_front();
  return m;
}

std::optional<Message> SimNetwork::try_recv(int dst) {
  Inbox& in = inbox(dst);
  if (in.queue.empty()) return std::nullopt;
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
