#include "sim/sim_env.h"

#include <memory>

#include <simgrid/s4u/Actor.hpp>
#include <simgrid/s4u/Engine.hpp>

#include "core/error.h"

namespace sg4 = simgrid::s4u;

namespace rv {

namespace {

sg4::Mailbox* own_mailbox(int r) { return sg4::Mailbox::by_name("n" + std::to_string(r)); }

sg4::Mailbox* pair_mailbox(int src, int dst) {
  return sg4::Mailbox::by_name("n" + std::to_string(src) + ">n" + std::to_string(dst));
}

}  // namespace

SimTransport::SimTransport(int rank, const std::vector<sg4::ActorPtr>& actors)
    : rank_(rank), actors_(actors), contacted_(actors.size(), 0), watching_(actors.size(), 0) {
  sg4::Mailbox* own = own_mailbox(rank_);
  own->set_receiver(actors_[rank_]);
  watch(own);
}

SimTransport::~SimTransport() {
  // Pending receives (always) and sends (after a failure) end with the node.
  for (auto* list : {&gets_, &pending_})
    for (auto& c : *list) {
      try {
        if (c->get_state() != sg4::Activity::State::FINISHED) c->cancel();
      } catch (...) {
      }
    }
  for (auto* m : watched_) m->set_receiver(nullptr);
}

void SimTransport::watch(sg4::Mailbox* mailbox) {
  watched_.push_back(mailbox);
  slots_.push_back(std::make_unique<Message*>(nullptr));
  gets_.push_back(mailbox->get_async<Message>(slots_.back().get()));
}

void SimTransport::send(int dst, Message msg) {
  RV_CHECK(dst >= 0 && dst < size() && dst != rank_, "send to an invalid node " + std::to_string(dst));
  msg.src = rank_;
  const auto bytes = static_cast<uint64_t>(std::max<Bytes>(msg.bytes, 1));
  sg4::Mailbox* box;
  if (!contacted_[dst]) {
    contacted_[dst] = 1;
    box = own_mailbox(dst);
  } else {
    box = pair_mailbox(rank_, dst);
    box->set_receiver(actors_[dst]);
  }
  pending_.push_back(box->put_async(new Message(std::move(msg)), bytes));
  // Reap finished sends so the list stays short.
  while (!pending_.empty()) {
    ssize_t k = sg4::Comm::test_any(pending_);
    if (k < 0) break;
    pending_.erase(pending_.begin() + k);
  }
}

Message SimTransport::take(size_t i) {
  std::unique_ptr<Message> p(*slots_[i]);
  *slots_[i] = nullptr;
  gets_[i] = watched_[i]->get_async<Message>(slots_[i].get());
  // The first message from a peer came through this node's own mailbox: its later ones come
  // through the pair's mailbox, watched from now on (after this one, so FIFO per pair holds).
  if (i == 0 && !watching_[p->src]) {
    watching_[p->src] = 1;
    sg4::Mailbox* pair = pair_mailbox(p->src, rank_);
    pair->set_receiver(actors_[rank_]);
    watch(pair);
  }
  return std::move(*p);
}

Message SimTransport::recv() {
  ssize_t i = sg4::Comm::wait_any(gets_);
  RV_CHECK(i >= 0, "simulated receive failed");
  return take(static_cast<size_t>(i));
}

std::optional<Message> SimTransport::try_recv() {
  ssize_t i = sg4::Comm::test_any(gets_);
  if (i < 0) return std::nullopt;
  return take(static_cast<size_t>(i));
}

void SimTransport::flush() {
  sg4::Comm::wait_all(pending_);
  pending_.clear();
}

Seconds SimClock::now() const { return sg4::Engine::get_clock(); }

void SimClock::sleep_for(Seconds s) {
  if (s > 0) sg4::this_actor::sleep_for(s);
}

void SimCompute::run(const Work& work, const std::function<void()>& maths) {
  if (numeric_) maths();
  const Seconds t = time_of(work, device_);
  if (t > 0) sg4::this_actor::execute(t * device_.peak_flops_per_s);
}

}  // namespace rv
