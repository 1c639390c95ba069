// FaultyTransport: a Transport wrapper that injects faults (in the manner of LevelDB's
// EnvWrapper/fault_injection_test): delay every send by a fixed time, drop every k-th message, or
// crash (throw) after n sends. For tests of failure handling in every executor.
#pragma once

#include <string>

#include "core/env.h"
#include "core/error.h"
#include "core/scenario/scenario.h"

namespace rv {

struct FaultSpec {
  Seconds delay = 0;               // added before each send (through the node's Clock)
  int64_t drop_every = 0;          // drop every k-th message sent (0: none)
  int64_t crash_after_sends = -1;  // throw rv::Error at this send (-1: never)
};

// The scenario's faults for node `node`, or nothing to inject.
inline FaultSpec faults_for(const FaultsSpec& f, int node) {
  FaultSpec s;
  if (f.node != node) return s;
  s.delay = f.delay_ms * 1e-3;
  s.drop_every = f.drop_every;
  s.crash_after_sends = f.crash_after_sends;
  return s;
}

class FaultyTransport : public Transport {
 public:
  FaultyTransport(Transport& inner, Clock& clock, FaultSpec spec)
      : inner_(inner), clock_(clock), spec_(spec) {}
  int rank() const override { return inner_.rank(); }
  int size() const override { return inner_.size(); }
  void send(int dst, Message msg) override {
    ++sent_;
    if (spec_.crash_after_sends >= 0 && sent_ > spec_.crash_after_sends)
      throw Error("node " + std::to_string(rank()) + ": injected crash at send " +
                  std::to_string(sent_));
    if (spec_.delay > 0) clock_.sleep_for(spec_.delay);
    if (spec_.drop_every > 0 && sent_ % spec_.drop_every == 0) return;
    inner_.send(dst, std::move(msg));
  }
  Message recv() override { return inner_.recv(); }
  std::optional<Message> try_recv() override { return inner_.try_recv(); }
  void offer(int src, const MessageMatch& match, at::Tensor into) override {
    inner_.offer(src, match, std::move(into));
  }
  void withdraw(int src, const MessageMatch& match) override { inner_.withdraw(src, match); }
  void flush() override { inner_.flush(); }
  int64_t sent() const { return sent_; }

 private:
  Transport& inner_;
  Clock& clock_;
  FaultSpec spec_;
  int64_t sent_ = 0;
};

}  // namespace rv
