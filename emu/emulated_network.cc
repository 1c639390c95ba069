#include "emu/emulated_network.h"

#include <chrono>
#include <memory>

#include "core/error.h"

namespace rv {
EmulatedNetwork::EmulatedNetwork(NetworkLinks links, const Clock& clock)
    : clock_(clock), net_(links), in_flight_(links.size(), 0) {}

EmulatedNetwork::~EmulatedNetwork() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  changed_.notify_all();
  if (pump_thread_.joinable()) pump_thread_.join();
}

void EmulatedNetwork::submit(Transport& inner, int src, int dst, Message msg) {
  const Bytes bytes = msg.bytes;
  auto held = std::make_shared<Message>(std::move(msg));
  submit(src, dst, bytes, [&inner, dst, held] { inner.send(dst, std::move(*held)); });
}

void EmulatedNetwork::submit(int src, int dst, Bytes bytes, std::function<void()> deliver) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (error_) std::rethrow_exception(error_);
    RV_CHECK(src >= 0 && static_cast<size_t>(src) < in_flight_.size() && dst >= 0 &&
                 static_cast<size_t>(dst) < in_flight_.size(),
             "emulated network: no such node");
    const uint64_t token = next_token_++;
    net_.send(src, dst, bytes, token, clock_.now());
    held_.emplace(token, Held{src, std::move(deliver)});
    ++in_flight_[static_cast<size_t>(src)];
  }
  changed_.notify_all();
}

int64_t EmulatedNetwork::submitted() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int64_t>(next_token_);
}

Seconds EmulatedNetwork::pump() {
  std::vector<Held> due;
  Seconds next = kNever;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const Delivery& d : net_.advance(clock_.now())) {
      auto it = held_.find(d.token);
      RV_CHECK(it != held_.end(), "emulated network: a delivery of no message");
      due.push_back(std::move(it->second));
      held_.erase(it);
    }
    next = net_.next_event();
  }
  // Hand over outside the lock, in delivery order (per pair: send order).
  for (Held& h : due) {
    try {
      h.deliver();
    } catch (...) {
      std::lock_guard<std::mutex> lock(mu_);
      if (!error_) error_ = std::current_exception();
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      --in_flight_[static_cast<size_t>(h.src)];
    }
  }
  if (!due.empty()) changed_.notify_all();
  return next;
}

void EmulatedNetwork::start() {
  RV_CHECK(!pump_thread_.joinable(), "emulated network: started twice");
  pump_thread_ = std::thread([this] { run(); });
}

void EmulatedNetwork::run() {
  for (;;) {
    pump();
    std::unique_lock<std::mutex> lock(mu_);
    if (stopping_) return;
    // Sleep until the next delivery is due, or until a submit changes the schedule. The next event
    // is read under the lock that submit() takes: one submitted since pump() is not missed.
    const Seconds next = net_.next_event();
    const Seconds wait = next == kNever ? 1.0 : std::max(0.0, next - clock_.now());
    if (wait > kSpinSeconds) {
      // A timed wait wakes late by up to a millisecond or more on a busy machine: wake early...
      changed_.wait_for(lock, std::chrono::duration<double>(std::min(wait - kSpinSeconds, 1.0)));
      if (stopping_) return;
      continue;
    }
    // ...and spend the last stretch yielding, so deliveries are on time.
    const uint64_t seen = next_token_;
    while (clock_.now() < next && next_token_ == seen && !stopping_) {
      lock.unlock();
      std::this_thread::yield();
      lock.lock();
    }
    if (stopping_) return;
  }
}

void EmulatedNetwork::drain(int src) {
  std::unique_lock<std::mutex> lock(mu_);
  changed_.wait(
      lock, [&] { return in_flight_.at(static_cast<size_t>(src)) == 0 || error_ || stopping_; });
  if (error_) std::rethrow_exception(error_);
}

}  // namespace rv
