// The in-process executor: every node is a thread of this process, messages are handed over
// through in-memory queues (no sockets), time is the wall clock. Used by the unit and conformance
// tests (in the manner of Gloo's HashStore tests) and by `ravnest sim --executor loopback`.
//
// LoopbackHub owns one inbox per node; a LoopbackTransport is one node's view. When a node fails,
// fail() wakes every waiting receiver with rv::PeerError, so no thread hangs.
#pragma once

#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "algo/algorithm.h"
#include "core/env.h"
#include "core/fault_transport.h"

namespace rv {

class LoopbackHub {
 public:
  LoopbackHub(int nodes, Seconds timeout);
  int size() const { return static_cast<int>(boxes_.size()); }
  void put(int dst, Message m);
  Message take(int rank);  // blocks; throws PeerError after fail() or the timeout
  std::optional<Message> try_take(int rank);
  void fail(const std::string& why);

 private:
  struct Box {
    std::mutex mu;
    std::condition_variable cv;
    std::deque<Message> queue;
  };
  std::vector<std::unique_ptr<Box>> boxes_;
  Seconds timeout_;
  std::mutex fail_mu_;
  std::string failure_;  // guarded by fail_mu_ (read under each box's mutex after notify)
  bool failed_ = false;
};

class LoopbackTransport : public Transport {
 public:
  LoopbackTransport(LoopbackHub& hub, int rank) : hub_(hub), rank_(rank) {}
  int rank() const override { return rank_; }
  int size() const override { return hub_.size(); }
  void send(int dst, Message msg) override;
  Message recv() override { return hub_.take(rank_); }
  std::optional<Message> try_recv() override { return hub_.try_take(rank_); }
  void flush() override {}

 private:
  LoopbackHub& hub_;
  int rank_;
};

// Runs every node of `spec` as a thread; returns all events (times in seconds from the start).
// Rethrows the first node's own error (not the PeerErrors it caused in the others).
// `faults`, if given, wraps node `faulty_node`'s transport (tests of failure handling).
// `observer`, if given, sees every event (from one thread at a time).
std::vector<Event> run_loopback(const RunSpec& spec, Seconds timeout = 60, int faulty_node = -1,
                                const FaultSpec* faults = nullptr, Metrics* observer = nullptr);

}  // namespace rv
