#include "sim/sim_network.h"

#include <algorithm>
#include <simgrid/s4u/Activity.hpp>
#include <simgrid/s4u/Comm.hpp>
#include <simgrid/s4u/Engine.hpp>
#include <simgrid/simix.hpp>
#include <string>

#include "core/error.h"
#include "sim/platform.h"

namespace sg4 = simgrid::s4u;

namespace rv {

int SimNetwork::kernel_transfers_limit_ = SimNetwork::kKernelTransfers;
int64_t SimNetwork::kernel_messages_ = 0;
int64_t SimNetwork::carrier_messages_ = 0;

SimNetwork::SimNetwork(std::vector<sg4::Host*> hosts, NetworkLinks links, bool platform_routes)
    : hosts_(std::move(hosts)),
      links_(std::move(links)),
      platform_routes_(platform_routes),
      inboxes_(hosts_.size()),
      senders_(hosts_.size()),
      receivers_(hosts_.size()) {
  RV_CHECK(links_.nodes.size() == hosts_.size(), "simulated network: links per host");
  // SimGrid's signals are the process's, not an engine's, and keep their callbacks: one callback
  // for every network of the process, which finds its pair through the transfer's data.
  static const bool connected = [] {
    sg4::Activity::on_completion_cb(&SimNetwork::on_completion);
    return true;
  }();
  (void)connected;
}

SimNetwork::~SimNetwork() {
  for (auto& [key, p] : pairs_) {
    if (p.timer != nullptr) p.timer->remove();
    if (p.hold_timer != nullptr) p.hold_timer->remove();
    // Under way only where the engine stopped early: it frees the transfer itself, so the handle
    // is let go without the release that would report it unfinished.
    if (p.comm) {
      p.comm->set_data(nullptr);
      (void)p.comm.detach();
    }
  }
}

// Semaphores are made on first use (SimGrid's synchronisation objects belong to the running
// simulation).
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
  if (p.net == nullptr) {
    p.net = this;
    p.src = src;
    p.dst = dst;
    // The same sum as the emulator's (StarNetwork::delay), so that both give the same times, less
    // the sliver SimGrid charges itself.
    p.delay = delay(src, dst);
    // A platform file's routes are SimGrid's own: the links' figures do not describe them.
    if (!platform_routes_) p.pacing = links_.pacing(src, dst);
  }
  const bool idle = p.idle();
  const Seconds now = sg4::Engine::get_clock();
  const Seconds floor = p.pacing.hand_over(now, static_cast<double>(msg.bytes));
  p.queue.push_back({now + p.delay, floor, std::move(msg)});
  ++sender(src).in_flight;
  // A busy connection takes the message up when the one before it is through (arrived()).
  if (idle) simgrid::kernel::actor::simcall_answered([this, &p] { next(p); });
}

Seconds SimNetwork::delay(int src, int dst) const {
  if (platform_routes_) {
    std::vector<sg4::Link*> route;
    double latency = 0;
    hosts_[static_cast<size_t>(src)]->route_to(hosts_[static_cast<size_t>(dst)], route, &latency);
    return std::max(0.0, links_.latency_factor * latency - kSimGridLatencyFactor * latency);
  }
  return std::max(
      0.0, links_.route_delay(src, dst) - kSimGridLatencyFactor * links_.route_latency(src, dst));
}

// Kernel side: the queue's front starts now if its delay is over, else when a timer fires.
void SimNetwork::next(Pair& p) {
  if (p.queue.empty()) return;  // idle
  const Seconds starts = p.queue.front().starts;
  if (starts <= sg4::Engine::get_clock()) {
    start(p);
    return;
  }
  p.timer = simgrid::kernel::timer::Timer::set(starts, [&p] {
    p.timer = nullptr;  // the kernel deletes a timer once it has run
    p.net->start(p);
  });
}

void SimNetwork::start(Pair& p) {
  Queued q = std::move(p.queue.front());
  p.queue.pop_front();
  p.carried = std::move(q.msg);
  p.carried_floor = q.floor;
  if (kernel_transfers_ >= kernel_transfers_limit_) {  // the carrier's way (see the header)
    p.by_carrier = true;
    ++carrier_messages_;
    if (!p.wake) {
      p.wake = sg4::Semaphore::create(0);
      const std::string name = "n" + std::to_string(p.src) + ">n" + std::to_string(p.dst);
      p.wire = sg4::Mailbox::by_name(name);
      p.wire->set_receiver(receiver(p.dst));
      // A carrier runs only SimGrid calls: a small stack, so that tens of thousands of them fit.
      constexpr unsigned kStack = 256 * 1024;
      sg4::Actor::init(name, hosts_[static_cast<size_t>(p.src)])
          ->set_stacksize(kStack)
          ->start([this, &p] { carry(p); })
          ->daemonize();
    }
    p.wake->release();
    return;
  }
  ++kernel_transfers_;
  ++kernel_messages_;
  // Made in the kernel, the transfer is the maestro's: the kernel reports its end through
  // Activity::on_completion.
  p.comm = sg4::Comm::sendto_init(hosts_[static_cast<size_t>(p.src)],
                                  hosts_[static_cast<size_t>(p.dst)]);
  p.comm->set_payload_size(p.carried_bytes());
  p.comm->set_data(&p);
  p.comm->start();
}

void SimNetwork::on_completion(const sg4::Activity& a) {
  // Every activity's end comes here (each exec's too): only a transfer of a pair carries data.
  auto* p = a.get_data<Pair>();
  if (p == nullptr || p->comm.get() != &a) return;
  if (a.get_state() != sg4::Activity::State::FINISHED) return;  // cancelled by the engine's end
  --p->net->kernel_transfers_;
  p->done = std::move(p->comm);  // its completion is still running: freed with the next one's
  p->done->set_data(nullptr);
  p->net->arrived(*p);
}

void SimNetwork::carry(Pair& p) {
  static char token;  // a transfer carries no data here: the message goes to the inbox
  for (;;) {
    p.wake->acquire();
    if (p.retired) return;
    p.wire->put(&token, p.carried_bytes());
    p.wire->get<char>();  // takes the finished transfer off the mailbox's list (no simulated time)
    simgrid::kernel::actor::simcall_answered([&p] {
      p.by_carrier = false;
      p.net->arrived(p);
    });
  }
}

sg4::ActorPtr SimNetwork::receiver(int dst) {
  sg4::ActorPtr& a = receivers_.at(static_cast<size_t>(dst));
  if (!a) {
    a = sg4::Actor::init("n" + std::to_string(dst) + "<", hosts_[static_cast<size_t>(dst)])
            ->set_stacksize(64 * 1024)
            ->start([] { sg4::Semaphore::create(0)->acquire(); });  // never runs again
    a->daemonize();
  }
  return a;
}

// Kernel side: the message under way is through. It is delivered now, or held until its warm
// floor (behind any held before it: their floors come first); the connection goes on at once.
void SimNetwork::arrived(Pair& p) {
  const Seconds now = sg4::Engine::get_clock();
  if (p.held.empty() && p.carried_floor <= now) {
    hand_to_receiver(p, std::move(p.carried));
  } else {
    p.held.push_back({0, std::max(p.carried_floor, now), std::move(p.carried)});
    if (p.hold_timer == nullptr)
      p.hold_timer = simgrid::kernel::timer::Timer::set(p.held.front().floor, [&p] {
        p.hold_timer = nullptr;
        p.net->deliver_held(p);
      });
  }
  next(p);
}

void SimNetwork::hand_to_receiver(Pair& p, Message msg) {
  p.pacing.arrived(sg4::Engine::get_clock());
  put_in_inbox(p.dst, std::move(msg));
  Sender& s = sender(p.src);
  if (--s.in_flight == 0 && s.waiting) {
    s.waiting = false;
    s.flushed->release();
  }
}

void SimNetwork::deliver_held(Pair& p) {
  const Seconds now = sg4::Engine::get_clock();
  while (!p.held.empty() && p.held.front().floor <= now) {
    hand_to_receiver(p, std::move(p.held.front().msg));
    p.held.pop_front();
  }
  if (!p.held.empty())
    p.hold_timer = simgrid::kernel::timer::Timer::set(p.held.front().floor, [&p] {
      p.hold_timer = nullptr;
      p.net->deliver_held(p);
    });
}

void SimNetwork::put_in_inbox(int dst, Message msg) {
  Inbox& in = inbox(dst);
  in.queue.push_back(std::move(msg));
  if (in.waiting) {
    in.waiting = false;
    in.wake->release();
  }
}

void SimNetwork::deliver(int dst, Message msg) { put_in_inbox(dst, std::move(msg)); }

void SimNetwork::quiesce() {
  for (int r = 0; r < size(); ++r) {
    const Inbox& in = inboxes_[static_cast<size_t>(r)];
    const Sender& s = senders_[static_cast<size_t>(r)];
    if (!in.queue.empty() || s.in_flight != 0)
      throw Error("checkpoint: node " + std::to_string(r) + " has messages " +
                  (in.queue.empty() ? "in flight" : "unread") + " at the checkpoint");
  }
  for (auto& [key, p] : pairs_) {
    RV_CHECK(p.idle() && p.held.empty(), "quiesce: a busy connection");
    if (p.wake) {
      p.retired = true;
      p.wake->release();
    }
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
