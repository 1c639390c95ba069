// The network emulator of one process: every message its nodes send goes through the star model
// (star_shaper.h) on a clock, and is handed to the sender's own transport only when the model
// delivers it, so a run on one machine takes the time the scenario's links take. ShapedTransport
// is the Transport wrapper that a node's NodeEnv stack applies (exec/env_assembly.h).
//
// Clock: the wall clock for runs (start() runs a thread that hands messages over on time), or a
// test's clock, advanced by hand, with pump() called after each step (deterministic).
// Thread-safety: submit(), pump() and drain() may be called from any thread.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "core/env.h"
#include "core/scenario/scenario.h"
#include "emu/star_shaper.h"

namespace rv {

// Where a node's messages wait until the star model delivers them. In this process
// (EmulatedNetwork): the sender's message is held, and handed to its transport on delivery. Across
// processes (EmulatorClient, emu/emulator_service.h): the message travels at once, and the
// receiver holds it until the model has delivered it, so the machine's own copy overlaps the
// emulated transfer instead of adding to it.
class NetworkEmulator {
 public:
  virtual ~NetworkEmulator() = default;
  // `msg` from `src` to `dst`, sent now, through `inner` (src's transport), which outlives it.
  // Rethrows the first error an inner send raised.
  virtual void submit(Transport& inner, int src, int dst, Message msg) = 0;
  // Blocks until every message `src` submitted has left it (handed over, or on its way).
  virtual void drain(int src) = 0;
  // The next message for `inner`'s rank that the model has delivered, in delivery order; waits as
  // `inner` waits (and fails as it fails). By default what `inner` has: held at the sender.
  virtual Message recv(Transport& inner) { return inner.recv(); }
  virtual std::optional<Message> try_recv(Transport& inner) { return inner.try_recv(); }
  // real.on_peer_loss = "recover": `src` is lost; what the model still delivers from it will never
  // come, so it is waited for no longer. Any thread may call it. Nothing to do by default.
  virtual void forget(int src) { (void)src; }
};

class EmulatedNetwork : public NetworkEmulator {
 public:
  // `links` of every node of the run; `clock` outlives this object.
  EmulatedNetwork(NetworkLinks links, const Clock& clock);
  ~EmulatedNetwork();
  EmulatedNetwork(const EmulatedNetwork&) = delete;
  EmulatedNetwork& operator=(const EmulatedNetwork&) = delete;

  // NetworkEmulator; inner.send() runs on the pumping thread.
  void submit(Transport& inner, int src, int dst, Message msg) override;
  // A message of `bytes` from `src` to `dst`, sent now: `deliver` runs (on the pumping thread,
  // outside any lock) when the model delivers it. An exception it throws is kept and rethrown by
  // submit(), pump() and drain().
  void submit(int src, int dst, Bytes bytes, std::function<void()> deliver);
  // Hands over every message delivered by the clock's now; returns when the next one is due
  // (kNever if none is in flight). An error of an inner send is rethrown here (and to drain()).
  Seconds pump();
  // Runs pump() on a thread of its own, on time, until destruction.
  void start();
  void drain(int src) override;
  // How many messages have been submitted so far (tests: wait for a remote node's sends).
  int64_t submitted() const;

 private:
  struct Held {
    int src;
    std::function<void()> deliver;
  };
  void run();

  const Clock& clock_;
  mutable std::mutex mu_;
  std::condition_variable changed_;
  StarNetwork net_;                 // guarded by mu_
  std::map<uint64_t, Held> held_;   // guarded by mu_
  std::vector<int64_t> in_flight_;  // per source, guarded by mu_
  uint64_t next_token_ = 0;         // guarded by mu_
  bool stopping_ = false;           // guarded by mu_
  std::exception_ptr error_;        // the first inner send's error, guarded by mu_
  std::thread pump_thread_;
};

// A node's transport through the emulated network: what it sends and receives passes the emulator.
class ShapedTransport : public Transport {
 public:
  ShapedTransport(Transport& inner, NetworkEmulator& net) : inner_(inner), net_(net) {}
  int rank() const override { return inner_.rank(); }
  int size() const override { return inner_.size(); }
  void send(int dst, Message msg) override {
    net_.submit(inner_, inner_.rank(), dst, std::move(msg));
  }
  Message recv() override { return net_.recv(inner_); }
  std::optional<Message> try_recv() override { return net_.try_recv(inner_); }
  // The inner transport receives into the offer; the message is handed over at its modeled time.
  void offer(int src, const MessageMatch& match, at::Tensor into) override {
    inner_.offer(src, match, std::move(into));
  }
  void withdraw(int src, const MessageMatch& match) override { inner_.withdraw(src, match); }
  void flush() override {
    net_.drain(inner_.rank());
    inner_.flush();
  }

 private:
  Transport& inner_;
  NetworkEmulator& net_;
};

}  // namespace rv
