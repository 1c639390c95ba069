// The kernel shaper's latency (emu/arrival_latency.h), on a clock moved by hand: a message is
// handed over its route's latency after its last byte arrived, a pair's messages in order, several
// senders' in the order they fall due.
#include <deque>

#include "catch.h"
#include "emu/arrival_latency.h"
#include "emu_support.h"

using namespace rv;

namespace {

// A transport whose messages "arrive" when the test puts them in, stamped with the clock's time.
class Inbox : public Transport {
 public:
  explicit Inbox(test::ManualClock& clock) : clock_(clock) {}
  int rank() const override { return 0; }
  int size() const override { return 3; }
  void send(int, Message) override { ++sent; }
  Message recv() override {
    REQUIRE(!queue_.empty());  // the test never lets a recv wait on an empty transport
    Message m = std::move(queue_.front());
    queue_.pop_front();
    return m;
  }
  std::optional<Message> try_recv() override {
    if (queue_.empty()) return std::nullopt;
    return recv();
  }
  void flush() override {}
  void arrive(int src, int64_t id, bool stamped = true) {
    Message m = test::sized(id, 1000);
    m.src = src;
    m.arrived = stamped ? clock_.now() : -1;
    queue_.push_back(std::move(m));
  }
  int sent = 0;

 private:
  test::ManualClock& clock_;
  std::deque<Message> queue_;
};

}  // namespace

TEST_CASE("the kernel shaper's latency comes after a message's arrival", "[emu]") {
  test::ManualClock clock;
  Inbox inbox(clock);
  // Node 0 receives; node 1 is 30 ms away from the core, node 2 5 ms; node 0 itself 10 ms.
  ArrivalLatency net(0, {0.010, 0.030, 0.005}, clock);
  net.submit(inbox, 0, 1, test::sized(9, 10));
  CHECK(inbox.sent == 1);  // sent at once: the kernel shapes its bytes

  clock.set(1.0);
  inbox.arrive(1, 1);  // due at 1.040
  clock.set(1.010);
  inbox.arrive(1, 2);  // due at 1.050
  inbox.arrive(2, 3);  // due at 1.025
  CHECK_FALSE(net.try_recv(inbox).has_value());
  // recv() sleeps on the clock until each falls due, the nearer sender's first.
  Message a = net.recv(inbox);
  CHECK(a.id == 3);
  CHECK(clock.now() == Approx(1.025).margin(1e-9));
  Message b = net.recv(inbox);
  CHECK(b.id == 1);
  CHECK(clock.now() == Approx(1.040).margin(1e-9));
  clock.set(1.2);
  Message c = net.try_recv(inbox).value();
  CHECK(c.id == 2);  // long due: handed over at once
  CHECK_FALSE(net.try_recv(inbox).has_value());
  // A message without an arrival stamp counts from when it is taken.
  clock.set(1.9);
  inbox.arrive(2, 4, false);
  clock.set(2.0);
  Message d = net.recv(inbox);
  CHECK(d.id == 4);
  CHECK(clock.now() == Approx(2.015).margin(1e-9));
}
