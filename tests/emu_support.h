// Helpers shared by the emulator's tests: a clock moved by hand, and messages of a given size.
#pragma once

#include <atomic>
#include <cstdint>

#include "core/env.h"

namespace rv::test {

// A clock the test moves by hand; safe to read from an emulator's threads.
class ManualClock : public Clock {
 public:
  Seconds now() const override { return t_.load(); }
  void sleep_for(Seconds s) override { t_ = t_.load() + s; }
  void set(Seconds t) { t_ = t; }

 private:
  std::atomic<double> t_{0};
};

// A payload-free message that the network models as `bytes` long.
inline Message sized(int64_t id, Bytes bytes) {
  Message m;
  m.kind = MsgKind::kForward;
  m.id = id;
  m.bytes = bytes;
  return m;
}

}  // namespace rv::test
