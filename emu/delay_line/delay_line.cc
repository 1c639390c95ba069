#include "delay_line.h"

#include <arpa/inet.h>
#include <libmnl/libmnl.h>
#include <linux/netfilter.h>
#include <linux/netfilter/nfnetlink.h>
#include <linux/netfilter/nfnetlink_queue.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

// After the kernel's headers: libnetfilter_queue.h re-declares some of their names otherwise.
#include <libnetfilter_queue/libnetfilter_queue.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <sstream>

namespace rv::delay_line {

// ---- LatenessStats ----

void LatenessStats::add(Nanos lateness) {
  lateness = std::max<Nanos>(lateness, 0);
  ++count_;
  sum_ += lateness;
  max_ = std::max(max_, lateness);
  ++bins_[static_cast<std::size_t>(std::min<Nanos>(lateness / 1000, kBins - 1))];
}

double LatenessStats::mean_us() const {
  return count_ == 0 ? 0.0 : static_cast<double>(sum_ / count_) / 1e3;
}

double LatenessStats::percentile_us(double q) const {
  if (count_ == 0) return 0.0;
  const auto rank = std::max<std::uint64_t>(
      1, static_cast<std::uint64_t>(std::ceil(std::clamp(q, 0.0, 1.0) * count_)));
  std::uint64_t seen = 0;
  for (int b = 0; b < kBins - 1; ++b) {
    seen += bins_[static_cast<std::size_t>(b)];
    if (seen >= rank) return std::min(static_cast<double>(b + 1), max_us());
  }
  return max_us();  // in the last, open-ended bin
}

// ---- DelayLine ----

DelayLine::DelayLine(Nanos delay, Limits limits) : delay_(delay), limits_(limits) {
  if (delay < 0) throw std::invalid_argument("delay line: the delay must be >= 0 ns");
}

bool DelayLine::over_limit(std::uint32_t bytes) const {
  if (limits_.max_packets != 0 && held_.size() + 1 > limits_.max_packets) return true;
  return limits_.max_bytes != 0 && held_bytes_ + bytes > limits_.max_bytes;
}

bool DelayLine::push(std::uint32_t id, std::uint32_t bytes, Nanos now) {
  if (over_limit(bytes)) {
    ++counts_.dropped;
    return false;
  }
  // A `now` earlier than the last push's is taken as arriving with it: the order stays FIFO.
  const Nanos due = held_.empty() ? now + delay_ : std::max(now + delay_, held_.back().due);
  held_.push_back({id, bytes, due});
  held_bytes_ += bytes;
  return true;
}

std::optional<Nanos> DelayLine::next_due() const {
  if (held_.empty()) return std::nullopt;
  return held_.front().due;
}

Held DelayLine::pop_front() {
  const Held h = held_.front();
  held_.pop_front();
  held_bytes_ -= h.bytes;
  return h;
}

std::size_t DelayLine::release(Nanos now, std::vector<Held>& out) {
  std::size_t n = 0;
  while (!held_.empty() && held_.front().due <= now) {
    const Held h = pop_front();
    lateness_.add(now - h.due);
    ++counts_.passed;
    counts_.passed_bytes += h.bytes;
    out.push_back(h);
    ++n;
  }
  return n;
}

std::size_t DelayLine::flush(std::vector<Held>& out) {
  const std::size_t n = held_.size();
  while (!held_.empty()) out.push_back(pop_front());
  counts_.flushed += n;
  return n;
}

// ---- the NFQUEUE binding ----

namespace {

constexpr int kRecvBatch = 64;   // messages per recvmmsg
constexpr int kRecvSlot = 8192;  // bytes per message: metadata (and 1 payload byte) fit
constexpr int kSendBuf = 512;    // bytes for one config or verdict message
constexpr std::uint32_t kKernelHeadroom = 4096;  // the kernel's queue length over the line's

std::string system_error(const std::string& what, int err) {
  return what + ": " + std::strerror(err);
}

std::uint32_t kernel_queue_len(const Limits& limits) {
  if (limits.max_packets == 0) return 1u << 20;  // no line limit: the kernel's bounds memory
  return static_cast<std::uint32_t>(
      std::min<std::uint64_t>(limits.max_packets + kKernelHeadroom, UINT32_MAX));
}

bool is_queue_packet(const nlmsghdr* nlh) {
  return NFNL_SUBSYS_ID(nlh->nlmsg_type) == NFNL_SUBSYS_QUEUE &&
         NFNL_MSG_TYPE(nlh->nlmsg_type) == NFQNL_MSG_PACKET;
}

// The packet's length in bytes from its attributes: NFQA_CAP_LEN when the copy was cut short,
// the copied payload's length otherwise, 0 when nothing of it was copied (metadata only).
std::uint32_t packet_length(nlattr* const* attr) {
  if (attr[NFQA_CAP_LEN] != nullptr) return ntohl(mnl_attr_get_u32(attr[NFQA_CAP_LEN]));
  if (attr[NFQA_PAYLOAD] != nullptr) return mnl_attr_get_payload_len(attr[NFQA_PAYLOAD]);
  return 0;
}

}  // namespace

Nanos monotonic_now() {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<Nanos>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

KernelQueueCounts read_kernel_queue_counts(std::uint16_t queue) {
  // Each line: queue peer_portid waiting copy_mode copy_range queue_dropped user_dropped id_seq 1
  std::ifstream in("/proc/net/netfilter/nfnetlink_queue");
  KernelQueueCounts c;
  for (std::string line; std::getline(in, line);) {
    std::istringstream f(line);
    std::uint64_t num = 0, port = 0, mode = 0, range = 0;
    if (!(f >> num >> port >> c.waiting >> mode >> range >> c.queue_dropped >> c.user_dropped))
      continue;
    if (num == queue) {
      c.found = true;
      return c;
    }
  }
  return KernelQueueCounts{};
}

NfqueueDelayLine::NfqueueDelayLine(const NfqueueOptions& options)
    : line_(options.delay, options.limits),
      queue_(options.queue),
      recv_buf_(static_cast<std::size_t>(kRecvBatch) * kRecvSlot) {
  try {
    configure(options);
  } catch (...) {
    if (nl_ != nullptr) mnl_socket_close(nl_);
    if (timer_fd_ >= 0) ::close(timer_fd_);
    throw;
  }
}

NfqueueDelayLine::~NfqueueDelayLine() {
  mnl_socket_close(nl_);  // the kernel unbinds the queue and drops what it still holds
  ::close(timer_fd_);
}

void NfqueueDelayLine::configure(const NfqueueOptions& options) {
  // Timers of this thread expire when asked, not up to 50 µs later (the default slack).
  ::prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);
  timer_fd_ = ::timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
  if (timer_fd_ < 0) throw BindError(system_error("timerfd_create", errno));
  nl_ = mnl_socket_open(NETLINK_NETFILTER);
  if (nl_ == nullptr)
    throw BindError(system_error("cannot open a netfilter netlink socket", errno));
  if (mnl_socket_bind(nl_, 0, MNL_SOCKET_AUTOPID) < 0)
    throw BindError(system_error("cannot bind the netlink socket", errno));
  port_id_ = mnl_socket_get_portid(nl_);
  const int fd = mnl_socket_get_fd(nl_);
  const int size = options.socket_buffer_bytes;
  if (::setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &size, sizeof size) < 0)
    ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &size, sizeof size);  // capped by rmem_max
  const int on = 1;  // overflows drop packets (counted by the kernel), not fail our recv
  ::setsockopt(fd, SOL_NETLINK, NETLINK_NO_ENOBUFS, &on, sizeof on);

  char buf[kSendBuf];
  nlmsghdr* nlh = nfq_nlmsg_put(buf, NFQNL_MSG_CONFIG, queue_);
  nfq_nlmsg_cfg_put_cmd(nlh, AF_INET, NFQNL_CFG_CMD_BIND);
  request(nlh, "bind");

  nlh = nfq_nlmsg_put(buf, NFQNL_MSG_CONFIG, queue_);
  if (options.learn_lengths)
    nfq_nlmsg_cfg_put_params(nlh, NFQNL_COPY_PACKET, 1);  // 1 byte: NFQA_CAP_LEN gives the length
  else
    nfq_nlmsg_cfg_put_params(nlh, NFQNL_COPY_META, 0);
  // GSO packets whole (not segmented to be queued), and no checksum work for the copy.
  mnl_attr_put_u32(nlh, NFQA_CFG_FLAGS, htonl(NFQA_CFG_F_GSO));
  mnl_attr_put_u32(nlh, NFQA_CFG_MASK, htonl(NFQA_CFG_F_GSO));
  nfq_nlmsg_cfg_put_qmaxlen(nlh, kernel_queue_len(options.limits));
  request(nlh, "configure");
}

void NfqueueDelayLine::request(nlmsghdr* nlh, const char* step) {
  nlh->nlmsg_flags |= NLM_F_ACK;
  nlh->nlmsg_seq = ++seq_;
  send(nlh);
  // Packets may come before the ack: they are handled as in serve().
  for (;;) {
    const ssize_t n = mnl_socket_recvfrom(nl_, recv_buf_.data(), recv_buf_.size());
    if (n < 0) throw BindError(system_error(std::string("queue ") + step + ": recv", errno));
    const Nanos now = monotonic_now();
    int left = static_cast<int>(n);
    for (auto* m = reinterpret_cast<nlmsghdr*>(recv_buf_.data()); mnl_nlmsg_ok(m, left);
         m = mnl_nlmsg_next(m, &left)) {
      if (m->nlmsg_type == NLMSG_ERROR && m->nlmsg_seq == seq_) {
        const auto* e = static_cast<const nlmsgerr*>(mnl_nlmsg_get_payload(m));
        if (e->error == 0) return;
        // The kernel answers EPERM both to a process without CAP_NET_ADMIN and for a queue that
        // another socket has bound.
        const bool taken = e->error == -EPERM && ::geteuid() == 0;
        throw BindError(system_error(std::string("queue ") + step, -e->error) +
                        (taken ? " (is another process serving this queue?)" : ""));
      }
      handle_message(m, now);
    }
  }
}

void NfqueueDelayLine::send(const nlmsghdr* nlh) {
  if (mnl_socket_sendto(nl_, nlh, nlh->nlmsg_len) < 0)
    throw std::runtime_error(system_error("delay line: netlink send", errno));
}

void NfqueueDelayLine::handle_message(const nlmsghdr* nlh, Nanos now) {
  // An error message here is the kernel refusing a verdict (only request() asks for acks).
  if (nlh->nlmsg_type == NLMSG_ERROR) {
    const auto* e = static_cast<const nlmsgerr*>(mnl_nlmsg_get_payload(nlh));
    if (e->error != 0) ++verdict_errors_;
    return;
  }
  if (!is_queue_packet(nlh)) return;
  nlattr* attr[NFQA_MAX + 1] = {};
  if (nfq_nlmsg_parse(nlh, attr) < 0 || attr[NFQA_PACKET_HDR] == nullptr) return;
  const auto* ph =
      static_cast<const nfqnl_msg_packet_hdr*>(mnl_attr_get_payload(attr[NFQA_PACKET_HDR]));
  const std::uint32_t id = ntohl(ph->packet_id);
  if (!line_.push(id, packet_length(attr), now)) verdict(id, NF_DROP);
}

void NfqueueDelayLine::read_packets() {
  mmsghdr msgs[kRecvBatch];
  iovec iov[kRecvBatch];
  for (int i = 0; i < kRecvBatch; ++i) {
    iov[i] = {recv_buf_.data() + static_cast<std::size_t>(i) * kRecvSlot, kRecvSlot};
    msgs[i] = {};
    msgs[i].msg_hdr.msg_iov = &iov[i];
    msgs[i].msg_hdr.msg_iovlen = 1;
  }
  const int n = ::recvmmsg(mnl_socket_get_fd(nl_), msgs, kRecvBatch, MSG_DONTWAIT, nullptr);
  if (n < 0) {
    if (errno == EAGAIN || errno == EINTR || errno == ENOBUFS) return;
    throw std::runtime_error(system_error("delay line: netlink recv", errno));
  }
  const Nanos now = monotonic_now();
  for (int i = 0; i < n; ++i) {
    int left = static_cast<int>(msgs[i].msg_len);
    for (auto* m = static_cast<nlmsghdr*>(iov[i].iov_base); mnl_nlmsg_ok(m, left);
         m = mnl_nlmsg_next(m, &left))
      handle_message(m, now);
  }
}

void NfqueueDelayLine::verdict(std::uint32_t id, int verdict) {
  char buf[kSendBuf];
  nlmsghdr* nlh = nfq_nlmsg_put(buf, NFQNL_MSG_VERDICT, queue_);
  nfq_nlmsg_verdict_put(nlh, static_cast<int>(id), verdict);
  send(nlh);
}

void NfqueueDelayLine::accept_through(std::uint32_t id) {
  // A batch verdict covers every queued id up to `id`. Ids rise in the order the kernel queues
  // and sends packets, the line is FIFO and dropped packets already had their verdict: the ids
  // up to `id` still queued are exactly the packets just released.
  char buf[kSendBuf];
  nlmsghdr* nlh = nfq_nlmsg_put(buf, NFQNL_MSG_VERDICT_BATCH, queue_);
  nfq_nlmsg_verdict_put(nlh, static_cast<int>(id), NF_ACCEPT);
  send(nlh);
}

void NfqueueDelayLine::release_due() {
  released_.clear();
  if (line_.release(monotonic_now(), released_) > 0) accept_through(released_.back().id);
}

void NfqueueDelayLine::flush() {
  released_.clear();
  if (line_.flush(released_) > 0) accept_through(released_.back().id);
}

void NfqueueDelayLine::arm_timer() {
  const Nanos due = line_.next_due().value_or(0);  // 0 disarms
  if (due == armed_for_) return;
  itimerspec spec{};
  spec.it_value.tv_sec = due / 1'000'000'000;
  spec.it_value.tv_nsec = due % 1'000'000'000;
  if (::timerfd_settime(timer_fd_, TFD_TIMER_ABSTIME, &spec, nullptr) < 0)
    throw std::runtime_error(system_error("delay line: timerfd_settime", errno));
  armed_for_ = due;
}

void NfqueueDelayLine::serve(int stop_fd) {
  pollfd fds[3] = {
      {mnl_socket_get_fd(nl_), POLLIN, 0}, {timer_fd_, POLLIN, 0}, {stop_fd, POLLIN, 0}};
  for (;;) {
    release_due();
    arm_timer();
    if (::poll(fds, 3, -1) < 0) {
      if (errno == EINTR) continue;
      throw std::runtime_error(system_error("delay line: poll", errno));
    }
    if (fds[2].revents != 0) return;
    if (fds[1].revents & POLLIN) {
      std::uint64_t expirations = 0;
      if (::read(timer_fd_, &expirations, sizeof expirations) > 0) armed_for_ = 0;
    }
    if (fds[0].revents & (POLLIN | POLLERR)) read_packets();
  }
}

}  // namespace rv::delay_line
