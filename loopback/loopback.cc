#include "loopback/loopback.h"

#include <ATen/Parallel.h>

#include <chrono>
#include <exception>
#include <iterator>
#include <optional>
#include <thread>

#include "core/error.h"
#include "exec/compute_threads.h"
#include "exec/env_assembly.h"
#include "exec/wall_env.h"

namespace rv {

LoopbackHub::LoopbackHub(int nodes, Seconds timeout) : timeout_(timeout) {
  for (int i = 0; i < nodes; ++i) boxes_.push_back(std::make_unique<Box>());
}

void LoopbackHub::put(int dst, Message m) {
  RV_CHECK(dst >= 0 && dst < size(), "loopback: send to invalid node " + std::to_string(dst));
  Box& b = *boxes_[dst];
  {
    std::lock_guard<std::mutex> lock(b.mu);
    b.queue.push_back(std::move(m));
  }
  b.cv.notify_one();
}

Message LoopbackHub::take(int rank) {
  Box& b = *boxes_[rank];
  std::unique_lock<std::mutex> lock(b.mu);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_);
  while (b.queue.empty()) {
    {
      std::lock_guard<std::mutex> f(fail_mu_);
      if (failed_) throw PeerError("node " + std::to_string(rank) + ": " + failure_);
    }
    if (b.cv.wait_until(lock, deadline) == std::cv_status::timeout && b.queue.empty())
      throw PeerError("node " + std::to_string(rank) + ": no message for " +
                      std::to_string(timeout_) + " s");
  }
  Message m = std::move(b.queue.front());
  b.queue.pop_front();
  return m;
}

std::optional<Message> LoopbackHub::try_take(int rank) {
  Box& b = *boxes_[rank];
  std::lock_guard<std::mutex> lock(b.mu);
  if (b.queue.empty()) return std::nullopt;
  Message m = std::move(b.queue.front());
  b.queue.pop_front();
  return m;
}

void LoopbackHub::fail(const std::string& why) {
  {
    std::lock_guard<std::mutex> f(fail_mu_);
    if (failed_) return;
    failed_ = true;
    failure_ = why;
  }
  for (auto& b : boxes_) {
    std::lock_guard<std::mutex> lock(b->mu);
    b->cv.notify_all();
  }
}

void LoopbackTransport::send(int dst, Message msg) {
  msg.src = rank_;
  hub_.put(dst, std::move(msg));
}

namespace {

// The nodes' first error that is not a PeerError (the root cause, not the losses it caused), or
// else the first PeerError; nothing where no node failed.
void rethrow_root_cause(const std::vector<std::exception_ptr>& errors) {
  std::exception_ptr first;
  for (const auto& e : errors) {
    if (!e) continue;
    try {
      std::rethrow_exception(e);
    } catch (const PeerError&) {
      if (!first) first = e;
    } catch (...) {
      std::rethrow_exception(e);
    }
  }
  if (first) std::rethrow_exception(first);
}

}  // namespace

std::vector<Event> run_loopback(const RunSpec& spec, Seconds timeout, int faulty_node,
                                const FaultSpec* faults, Metrics* observer) {
  const int n = spec.plan->nodes;
  LoopbackHub hub(n, timeout);
  // Every node's transport lives as long as the run: the emulated network may still hand a node's
  // last messages over after its thread is done.
  std::vector<std::unique_ptr<LoopbackTransport>> transports;
  for (int r = 0; r < n; ++r) transports.push_back(std::make_unique<LoopbackTransport>(hub, r));
  std::vector<EventLog> logs(n);
  std::vector<std::exception_ptr> errors(n);
  const int threads = std::max(1u, std::thread::hardware_concurrency());
  set_compute_threads(std::max(1, threads / std::max(1, n)));
  WallClock origin;
  std::mutex observer_mu;
  // real.emulate_network: every send is held for the time the scenario's links take.
  std::optional<EmulatedNetwork> network;
  if (spec.scenario->real.emulate_network == Toggle::kOn) {  // auto: off here
    network.emplace(links_of(*spec.scenario), origin);
    network->start();
  }
  std::vector<std::thread> workers;
  for (int r = 0; r < n; ++r) {
    if (spec.plan->role_of(r).stage < 0) continue;
    workers.emplace_back([&, r] {
      try {
        LoopbackTransport& transport = *transports[r];
        WallClock clock = origin;
        WallCompute compute;
        NodeEnvStack stack(*spec.scenario, r,
                           EnvParts{transport, clock, compute, logs[r], nullptr, observer,
                                    &observer_mu, network ? &*network : nullptr},
                           r == faulty_node ? faults : nullptr);
        run_node(stack.env(), spec, r);
        stack.env().transport.flush();  // every message sent is handed over before the node ends
      } catch (const std::exception& e) {
        errors[r] = std::current_exception();
        hub.fail("node " + std::to_string(r) + " failed: " + e.what());
      }
    });
  }
  for (auto& t : workers) t.join();
  rethrow_root_cause(errors);
  std::vector<Event> all;
  for (auto& l : logs) {
    std::vector<Event> mine = l.take();
    std::move(mine.begin(), mine.end(), std::back_inserter(all));
  }
  return all;
}

}  // namespace rv
