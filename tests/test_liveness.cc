// Heartbeat bookkeeping (real/liveness.h) on an injected clock: a peer is silent only past the
// timeout, a message or heartbeat resets it, a payload in flight earns its transfer time, the
// peer silent longest is named, peers that left are not expected, and a wait wakes in time.
#include "catch.h"
#include "real/liveness.h"

using rv::Liveness;

TEST_CASE("a peer is silent only after the timeout without a word") {
  Liveness l(3, 0, 10.0, 100.0);
  CHECK(l.beat_interval() == 2.5);
  CHECK(l.quietest() == 1);
  CHECK_FALSE(l.silent(110.0));  // exactly the timeout: not yet
  CHECK(l.silent(110.5) == 1);   // both silent as long: the lowest rank
  l.heard(1, 105.0);
  CHECK(l.silent(110.5) == 2);
  l.heard(2, 109.0);
  CHECK_FALSE(l.silent(114.9));
  CHECK(l.silent(115.5) == 1);
  CHECK(l.silent_for(1, 115.5) == Approx(10.5));
  // A late report of an older heartbeat never moves the time back.
  l.heard(2, 101.0);
  CHECK(l.silent_for(2, 115.0) == Approx(6.0));
}

TEST_CASE("this rank and peers that left are never silent") {
  Liveness l(3, 1, 1.0, 0.0);
  l.forget(2);
  CHECK(l.silent(50.0) == 0);
  l.forget(0);
  CHECK_FALSE(l.silent(1e6));
}

TEST_CASE("a payload in flight earns its transfer time at the floor rate") {
  Liveness l(2, 0, 10.0, 0.0);
  l.heard(1, 5.0, 50'000'000);  // 50 MB at 1 MB/s: 50 s more
  CHECK_FALSE(l.silent(64.0));
  CHECK(l.silent(65.5) == 1);
}

TEST_CASE("a wait wakes by the next moment a peer can turn silent") {
  Liveness l(3, 0, 10.0, 0.0);
  l.heard(1, 4.0);
  // Peer 2 can turn silent just after 10 s; but a wait wakes at least every beat interval.
  CHECK(l.next_check(0.0) == Approx(2.5));
  CHECK(l.next_check(9.0) == Approx(10.001));
  l.forget(2);
  CHECK(l.next_check(9.0) == Approx(11.5));
  CHECK(l.next_check(13.9) == Approx(14.001));
}

TEST_CASE("a peer whose rank a replacement took is expected again from its arrival") {
  Liveness l(3, 0, 10.0, 0.0);
  l.forget(1);
  CHECK(l.silent(20.0) == 2);
  l.heard(2, 20.0);
  CHECK_FALSE(l.silent(25.0));
  l.expect(1, 25.0);  // heard at its arrival, not at the start
  l.heard(2, 30.0);
  CHECK_FALSE(l.silent(35.0));
  CHECK(l.silent(35.5) == 1);
  l.expect(0, 0.0);  // this rank itself: never expected
  l.heard(1, 40.0);
  l.heard(2, 40.0);
  CHECK_FALSE(l.silent(49.0));
}
