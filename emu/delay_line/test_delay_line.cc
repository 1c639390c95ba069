// Unit tests of the delay line's core (DelayLine, LatenessStats) with made-up times: no root, no
// kernel. Exit status 0 when every check holds; each failed check is printed.
#include <cstdio>
#include <stdexcept>
#include <vector>

#include "delay_line.h"

namespace {

using rv::delay_line::DelayLine;
using rv::delay_line::Held;
using rv::delay_line::LatenessStats;
using rv::delay_line::Limits;
using rv::delay_line::Nanos;

int failures = 0;

#define CHECK(cond)                                                           \
  do {                                                                        \
    if (!(cond)) {                                                            \
      std::fprintf(stderr, "%s:%d: FAILED: %s\n", __FILE__, __LINE__, #cond); \
      ++failures;                                                             \
    }                                                                         \
  } while (0)

constexpr Nanos kMs = 1'000'000;

void release_times_are_exact() {
  DelayLine line(20 * kMs, {});
  CHECK(!line.next_due());
  CHECK(line.push(1, 100, 0));
  CHECK(line.push(2, 100, 1000));
  CHECK(line.next_due() == 20 * kMs);
  std::vector<Held> out;
  CHECK(line.release(20 * kMs - 1, out) == 0);  // 1 ns early: nothing
  CHECK(line.release(20 * kMs, out) == 1);      // exactly due
  CHECK(out.size() == 1 && out[0].id == 1 && out[0].due == 20 * kMs);
  CHECK(line.next_due() == 20 * kMs + 1000);
  CHECK(line.release(20 * kMs + 999, out) == 0);
  CHECK(line.release(20 * kMs + 1000, out) == 1);
  CHECK(line.lateness().count() == 2 && line.lateness().max_us() == 0);
  CHECK(line.counts().passed == 2 && line.counts().passed_bytes == 200);
  CHECK(!line.next_due() && line.held_packets() == 0 && line.held_bytes() == 0);
}

void zero_delay_releases_at_once() {
  DelayLine line(0, {});
  CHECK(line.push(7, 0, 5));
  std::vector<Held> out;
  CHECK(line.release(5, out) == 1 && out[0].id == 7);
}

void order_is_fifo() {
  DelayLine line(10 * kMs, {});
  for (std::uint32_t id = 0; id < 100; ++id) CHECK(line.push(id, 1, id * 1000));
  std::vector<Held> out;
  CHECK(line.release(10 * kMs + 50'000, out) == 51);  // ids 0..50
  CHECK(line.release(1'000 * kMs, out) == 49);
  bool ordered = out.size() == 100;
  for (std::size_t i = 0; ordered && i < out.size(); ++i) ordered = out[i].id == i;
  CHECK(ordered);
  // Lateness of the first batch: now - due, so 50 µs for id 0 down to 0 for id 50.
  CHECK(line.lateness().count() == 100);
}

void an_earlier_time_keeps_the_order() {
  DelayLine line(10 * kMs, {});
  CHECK(line.push(1, 0, 5000));
  CHECK(line.push(2, 0, 1000));  // arrives "before" 1: held behind it, due with it
  std::vector<Held> out;
  CHECK(line.release(10 * kMs + 5000, out) == 2);
  CHECK(out[0].id == 1 && out[1].id == 2 && out[1].due == 10 * kMs + 5000);
}

void packets_over_the_limit_are_dropped() {
  DelayLine line(10 * kMs, Limits{.max_packets = 3, .max_bytes = 0});
  int held = 0;
  for (std::uint32_t id = 0; id < 5; ++id) held += line.push(id, 1500, 0) ? 1 : 0;
  CHECK(held == 3);
  CHECK(line.counts().dropped == 2 && line.held_packets() == 3);
  std::vector<Held> out;
  CHECK(line.release(10 * kMs, out) == 3);
  CHECK(out[0].id == 0 && out[2].id == 2);  // the first ones are kept (drop-tail)
  CHECK(line.push(9, 1500, 10 * kMs));      // room again
  CHECK(line.counts().dropped == 2 && line.counts().passed == 3);
}

void bytes_over_the_limit_are_dropped() {
  DelayLine line(kMs, Limits{.max_packets = 0, .max_bytes = 3000});
  CHECK(line.push(1, 1500, 0));
  CHECK(line.push(2, 1500, 0));
  CHECK(!line.push(3, 1, 0));  // 3001 bytes would be held
  CHECK(line.push(4, 0, 0));   // an unknown length (0) always fits
  CHECK(line.counts().dropped == 1 && line.held_bytes() == 3000);
}

void flush_releases_everything_early() {
  DelayLine line(kMs, {});
  CHECK(line.push(1, 10, 0));
  CHECK(line.push(2, 10, 1));
  std::vector<Held> out;
  CHECK(line.flush(out) == 2 && out[1].id == 2);
  CHECK(line.counts().flushed == 2 && line.counts().passed == 0 && line.lateness().count() == 0);
  CHECK(!line.next_due());
}

void lateness_statistics() {
  LatenessStats s;
  CHECK(s.percentile_us(0.5) == 0 && s.mean_us() == 0);
  for (int us = 1; us <= 100; ++us) s.add(us * 1000 - 1);  // 0.999 µs .. 99.999 µs
  CHECK(s.count() == 100);
  CHECK(s.percentile_us(0.5) == 50);  // the 50th value, 49.999 µs, in bin [49, 50)
  CHECK(s.percentile_us(0.99) == 99);
  CHECK(s.max_us() > 99.99 && s.max_us() < 100);
  CHECK(s.mean_us() > 50.49 && s.mean_us() < 50.5);
  s.add(1'000 * kMs);  // beyond the histogram: the max
  CHECK(s.percentile_us(1.0) == 1e6);
}

void a_negative_delay_is_refused() {
  bool threw = false;
  try {
    DelayLine line(-1, {});
  } catch (const std::invalid_argument&) {
    threw = true;
  }
  CHECK(threw);
}

}  // namespace

int main() {
  release_times_are_exact();
  zero_delay_releases_at_once();
  order_is_fifo();
  an_earlier_time_keeps_the_order();
  packets_over_the_limit_are_dropped();
  bytes_over_the_limit_are_dropped();
  flush_releases_everything_early();
  lateness_statistics();
  a_negative_delay_is_refused();
  if (failures != 0) {
    std::fprintf(stderr, "test_delay_line: %d check(s) failed\n", failures);
    return 1;
  }
  std::printf("test_delay_line: all checks passed\n");
  return 0;
}
