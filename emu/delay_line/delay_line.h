// A user-space delay line for real runs (real.shaper = "kernel"): this kernel has no netem, so
// nothing on the packet path delays packets by the links' latency. The delay line holds each
// packet the kernel hands it (NFQUEUE) and lets it go on when its delay has passed.
//
// Two parts:
//  - DelayLine, the pure core: packets with their arrival time in, each released at arrival +
//    delay, first in first out (one delay per line, so the order of arrival is the order of
//    release); drop-tail over a limit of held packets or bytes. It never reads a clock: every
//    time is an argument (ns on CLOCK_MONOTONIC's axis in the binding), so tests drive it with
//    made-up times, without root and without the kernel.
//  - NfqueueDelayLine, the binding: one NFQUEUE of the calling thread's network namespace
//    (libnetfilter_queue's libmnl-based API), metadata-only copies, verdicts issued when the
//    packets fall due, woken by a timerfd on CLOCK_MONOTONIC.
//
// Units: times and durations in ns (Nanos), sizes in bytes, lateness reported in µs.
#pragma once

#include <cstdint>
#include <deque>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

struct mnl_socket;  // libmnl
struct nlmsghdr;    // <linux/netlink.h>

namespace rv::delay_line {

using Nanos = std::int64_t;  // a time on CLOCK_MONOTONIC's axis, or a duration, in ns

// Drop-tail limits on what a line holds at once; 0 means no limit.
struct Limits {
  std::uint64_t max_packets = 0;
  std::uint64_t max_bytes = 0;
};

// A packet held by the line: the kernel's packet id, its length in bytes (0 when not known) and
// the time it falls due (its arrival + the line's delay), in ns.
struct Held {
  std::uint32_t id = 0;
  std::uint32_t bytes = 0;
  Nanos due = 0;
};

// Lateness (release time - due time) of released packets: exact count, mean and max, and a
// histogram of 1 µs bins up to kBins µs (later ones fall in the last bin) for percentiles.
class LatenessStats {
 public:
  static constexpr int kBins = 20000;  // 20 ms

  void add(Nanos lateness);  // lateness >= 0, in ns
  std::uint64_t count() const { return count_; }
  double mean_us() const;  // 0 when empty
  double max_us() const { return static_cast<double>(max_) / 1e3; }
  // The q-quantile (0 <= q <= 1) in µs, rounded up to the bin's upper edge (1 µs); 0 when empty.
  double percentile_us(double q) const;

 private:
  std::uint64_t count_ = 0;
  long double sum_ = 0;  // ns
  Nanos max_ = 0;        // ns
  std::vector<std::uint64_t> bins_ = std::vector<std::uint64_t>(kBins, 0);
};

// What a line has done so far.
struct Counts {
  std::uint64_t passed = 0;        // released when due
  std::uint64_t passed_bytes = 0;  // their bytes (known lengths only)
  std::uint64_t dropped = 0;       // refused by push(): over a limit
  std::uint64_t flushed = 0;       // released early by flush()
};

// The core: a FIFO of held packets. Not thread-safe; one owner.
class DelayLine {
 public:
  // `delay` >= 0, in ns; std::invalid_argument otherwise.
  DelayLine(Nanos delay, Limits limits);

  // Takes packet `id` of `bytes` bytes (0: unknown) arriving at `now` (ns; not earlier than the
  // previous push's `now`). Returns true if it is held (due at now + delay), false if holding it
  // would exceed a limit: it is then counted as dropped and the caller drops it.
  bool push(std::uint32_t id, std::uint32_t bytes, Nanos now);

  // The due time of the earliest held packet (ns), or nullopt when nothing is held.
  std::optional<Nanos> next_due() const;

  // Removes every packet due at `now` (due <= now), earliest first, appends them to `out`, counts
  // them as passed and records their lateness now - due. Returns how many it removed.
  std::size_t release(Nanos now, std::vector<Held>& out);

  // Removes every held packet, due or not, earliest first, appends them to `out` and counts them
  // as flushed (no lateness recorded). Returns how many it removed.
  std::size_t flush(std::vector<Held>& out);

  Nanos delay() const { return delay_; }
  std::size_t held_packets() const { return held_.size(); }
  std::uint64_t held_bytes() const { return held_bytes_; }
  const Counts& counts() const { return counts_; }
  const LatenessStats& lateness() const { return lateness_; }

 private:
  bool over_limit(std::uint32_t bytes) const;
  Held pop_front();

  Nanos delay_;
  Limits limits_;
  std::deque<Held> held_;  // in arrival order, so in due order
  std::uint64_t held_bytes_ = 0;
  Counts counts_;
  LatenessStats lateness_;
};

// The binding's failures to set up (no root, no NFQUEUE in the kernel, the queue already bound
// by another process): the message names the step and the system's reason.
class BindError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct NfqueueOptions {
  std::uint16_t queue = 0;  // the NFQUEUE number (iptables -j NFQUEUE --queue-num N)
  Nanos delay = 0;          // ns
  Limits limits;            // drop-tail limits of the line
  // Learn each packet's length (needed for limits.max_bytes and the passed bytes) by copying at
  // most one byte of its payload; otherwise copies are metadata only and lengths are unknown (0).
  bool learn_lengths = false;
  int socket_buffer_bytes = 16 << 20;  // netlink receive buffer (SO_RCVBUFFORCE, root)
};

// The kernel's own counters for a queue (/proc/net/netfilter/nfnetlink_queue).
struct KernelQueueCounts {
  bool found = false;
  std::uint64_t queue_dropped = 0;  // the kernel's queue was full (its maxlen)
  std::uint64_t user_dropped = 0;   // the netlink socket's buffer was full
  std::uint64_t waiting = 0;        // queued, no verdict yet
};

// Reads the counters of queue `queue` in the calling thread's network namespace.
KernelQueueCounts read_kernel_queue_counts(std::uint16_t queue);

// One NFQUEUE served by a DelayLine. Each packet the kernel queues is pushed at the time it is
// read from the netlink socket (the time it spent queued before that is not counted as lateness);
// a packet over the limit gets an NF_DROP verdict at once; held packets get NF_ACCEPT (one batch
// verdict for each run of packets falling due together) when they fall due. Single-threaded.
class NfqueueDelayLine {
 public:
  // Binds `options.queue` in the calling thread's network namespace. The kernel's own queue
  // length is set above the line's packet limit so that the line's drop-tail, not the kernel's,
  // decides. BindError if a step fails.
  explicit NfqueueDelayLine(const NfqueueOptions& options);
  // Unbinds; the kernel drops whatever is still queued (call flush() before to let it through).
  ~NfqueueDelayLine();
  NfqueueDelayLine(const NfqueueDelayLine&) = delete;
  NfqueueDelayLine& operator=(const NfqueueDelayLine&) = delete;

  // Serves the queue until `stop_fd` becomes readable (e.g. a signalfd for SIGTERM); it is not
  // read. std::runtime_error on a socket error.
  void serve(int stop_fd);
  // Accepts every held packet now (early; counted as flushed).
  void flush();

  const DelayLine& line() const { return line_; }
  std::uint64_t verdict_errors() const { return verdict_errors_; }  // the kernel refused a verdict

 private:
  void configure(const NfqueueOptions& options);
  void request(::nlmsghdr* nlh, const char* step);  // sends and waits for the kernel's ack
  void read_packets();
  void handle_message(const ::nlmsghdr* nlh, Nanos now);
  void release_due();
  void accept_through(std::uint32_t id);  // one batch verdict: every id up to `id`
  void verdict(std::uint32_t id, int verdict);
  void send(const ::nlmsghdr* nlh);
  void arm_timer();

  DelayLine line_;
  std::uint16_t queue_;
  ::mnl_socket* nl_ = nullptr;
  unsigned port_id_ = 0;
  int timer_fd_ = -1;
  Nanos armed_for_ = 0;  // the timer's expiry, 0 when disarmed
  std::uint64_t verdict_errors_ = 0;
  std::vector<Held> released_;  // scratch for release()
  std::vector<char> recv_buf_;  // kRecvBatch slots of kRecvSlot bytes for recvmmsg
  std::uint32_t seq_ = 0;       // the last request's sequence number
};

// Now on CLOCK_MONOTONIC, in ns.
Nanos monotonic_now();

}  // namespace rv::delay_line
