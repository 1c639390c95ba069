// rv-delay-line: delays every packet of one NFQUEUE of the network namespace it runs in.
//
//   rv-delay-line --queue N --delay-ms D [--limit-packets P] [--limit-bytes B] [--rt-priority R]
//
// Serves queue N (0-65535) until SIGTERM or SIGINT, holding each packet D ms (>= 0, fractional
// allowed) before accepting it; packets arriving while P packets (default 10000; 0: no limit) or
// B bytes (default no limit; giving it copies 1 byte of each packet to learn its length) are held
// are dropped. --rt-priority R (1-99) runs it SCHED_FIFO at priority R: on a busy machine its
// wake-ups are then not late by a scheduler's slice (README.md: tens of ms otherwise). Prints
// "rv-delay-line: serving queue N" on stderr once bound, then on exit one line on stdout:
//   rv-delay-line: queue=N delay_ms=D passed=.. dropped=.. flushed=.. passed_bytes=..
//   mean_lateness_us=.. max_lateness_us=.. p50_lateness_us=.. p99_lateness_us=..
//   p999_lateness_us=.. kernel_dropped=.. verdict_errors=.. cpu_user_s=.. cpu_sys_s=..
// (one line). dropped: by the limit; flushed: still held at exit, accepted early; kernel_dropped:
// dropped by the kernel's queue (socket buffer or queue full); lateness: verdict time - due time.
// Exit status: 0 after a signal, 2 on bad arguments or when the queue cannot be bound, 1 on a
// later error.
#include <sched.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>

#include "delay_line.h"

namespace {

namespace dl = rv::delay_line;

constexpr const char* kUsage =
    "usage: rv-delay-line --queue N --delay-ms D [--limit-packets P] [--limit-bytes B]\n"
    "                     [--rt-priority R]\n";

struct Args {
  dl::NfqueueOptions options;
  double delay_ms = 0;
  int rt_priority = 0;  // 0: the default scheduling policy
};

[[noreturn]] void bad_arguments(const std::string& why) {
  std::fprintf(stderr, "rv-delay-line: %s\n%s", why.c_str(), kUsage);
  std::exit(2);
}

// The whole of `text` as a number in [lo, hi], or nullopt.
std::optional<double> number(const char* text, double lo, double hi) {
  errno = 0;
  char* end = nullptr;
  const double v = std::strtod(text, &end);
  if (errno != 0 || end == text || *end != '\0' || !(v >= lo && v <= hi)) return std::nullopt;
  return v;
}

double number_or_exit(const std::string& flag, const char* text, double lo, double hi,
                      bool integer) {
  const auto v = number(text, lo, hi);
  if (!v || (integer && *v != static_cast<double>(static_cast<long long>(*v))))
    bad_arguments(flag + " wants " + (integer ? "an integer" : "a number") + " in [" +
                  std::to_string(static_cast<long long>(lo)) + ", " +
                  std::to_string(static_cast<long long>(hi)) + "], not '" + text + "'");
  return *v;
}

Args parse(int argc, char** argv) {
  Args a;
  a.options.limits.max_packets = 10000;
  bool have_queue = false, have_delay = false;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--help" || flag == "-h") {
      std::fputs(kUsage, stdout);
      std::exit(0);
    }
    if (i + 1 >= argc) bad_arguments("missing value after " + flag);
    const char* value = argv[++i];
    if (flag == "--queue") {
      a.options.queue = static_cast<std::uint16_t>(number_or_exit(flag, value, 0, 65535, true));
      have_queue = true;
    } else if (flag == "--delay-ms") {
      a.delay_ms = number_or_exit(flag, value, 0, 3.6e6, false);
      a.options.delay = static_cast<dl::Nanos>(a.delay_ms * 1e6 + 0.5);
      have_delay = true;
    } else if (flag == "--limit-packets") {
      a.options.limits.max_packets =
          static_cast<std::uint64_t>(number_or_exit(flag, value, 0, 1e9, true));
    } else if (flag == "--limit-bytes") {
      a.options.limits.max_bytes =
          static_cast<std::uint64_t>(number_or_exit(flag, value, 1, 1e12, true));
      a.options.learn_lengths = true;
    } else if (flag == "--rt-priority") {
      a.rt_priority = static_cast<int>(number_or_exit(flag, value, 1, 99, true));
    } else {
      bad_arguments("unknown argument '" + flag + "'");
    }
  }
  if (!have_queue) bad_arguments("--queue is required");
  if (!have_delay) bad_arguments("--delay-ms is required");
  return a;
}

// A signalfd readable once SIGTERM or SIGINT arrives (both blocked for the process).
int stop_signal_fd() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  sigprocmask(SIG_BLOCK, &set, nullptr);
  const int fd = signalfd(-1, &set, SFD_CLOEXEC);
  if (fd < 0) {
    std::fprintf(stderr, "rv-delay-line: signalfd: %s\n", std::strerror(errno));
    std::exit(1);
  }
  return fd;
}

double seconds(const timeval& t) { return static_cast<double>(t.tv_sec) + t.tv_usec / 1e6; }

void print_counts(const Args& a, const dl::NfqueueDelayLine& q, const dl::KernelQueueCounts& k) {
  const dl::Counts& c = q.line().counts();
  const dl::LatenessStats& l = q.line().lateness();
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  std::printf(
      "rv-delay-line: queue=%u delay_ms=%g passed=%llu dropped=%llu flushed=%llu "
      "passed_bytes=%llu mean_lateness_us=%.1f max_lateness_us=%.1f p50_lateness_us=%.0f "
      "p99_lateness_us=%.0f p999_lateness_us=%.0f kernel_dropped=%llu verdict_errors=%llu "
      "cpu_user_s=%.3f cpu_sys_s=%.3f\n",
      a.options.queue, a.delay_ms, static_cast<unsigned long long>(c.passed),
      static_cast<unsigned long long>(c.dropped), static_cast<unsigned long long>(c.flushed),
      static_cast<unsigned long long>(c.passed_bytes), l.mean_us(), l.max_us(),
      l.percentile_us(0.5), l.percentile_us(0.99), l.percentile_us(0.999),
      static_cast<unsigned long long>(k.queue_dropped + k.user_dropped),
      static_cast<unsigned long long>(q.verdict_errors()), seconds(ru.ru_utime),
      seconds(ru.ru_stime));
  std::fflush(stdout);
}

}  // namespace

// SCHED_FIFO at `priority` for the process; exits 2 if it is refused.
void run_realtime(int priority) {
  sched_param param{};
  param.sched_priority = priority;
  if (sched_setscheduler(0, SCHED_FIFO, &param) == 0) return;
  std::fprintf(stderr, "rv-delay-line: --rt-priority %d: sched_setscheduler: %s\n", priority,
               std::strerror(errno));
  std::exit(2);
}

int main(int argc, char** argv) {
  const Args a = parse(argc, argv);
  if (a.rt_priority > 0) run_realtime(a.rt_priority);
  const int stop_fd = stop_signal_fd();
  std::optional<dl::NfqueueDelayLine> q;
  try {
    q.emplace(a.options);
  } catch (const dl::BindError& e) {
    std::fprintf(stderr, "rv-delay-line: cannot bind NFQUEUE %u: %s%s\n", a.options.queue, e.what(),
                 geteuid() != 0 ? " (it needs root: CAP_NET_ADMIN)" : "");
    return 2;
  }
  std::fprintf(stderr, "rv-delay-line: serving queue %u\n", a.options.queue);
  int status = 0;
  try {
    q->serve(stop_fd);
    q->flush();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rv-delay-line: %s\n", e.what());
    status = 1;
  }
  print_counts(a, *q, dl::read_kernel_queue_counts(a.options.queue));
  return status;
}
