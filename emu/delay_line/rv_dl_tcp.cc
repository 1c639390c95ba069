// rv-dl-tcp: a tiny TCP bulk sender and receiver for the delay line's root test and bench (no
// iperf3 needed).
//
//   rv-dl-tcp serve PORT         accepts one connection on 0.0.0.0:PORT, reads it to its end and
//                                prints "rv-dl-tcp: received bytes=B seconds=S gbit_s=G"
//                                (S: from the first byte to the end)
//   rv-dl-tcp send HOST PORT S   connects to HOST (IPv4):PORT, writes zeros for S seconds, closes
//                                and prints "rv-dl-tcp: sent bytes=B seconds=S rtt_us=R" (R: the
//                                kernel's smoothed RTT, TCP_INFO's tcpi_rtt, before closing)
//
// Exit status 0 on success, 1 on a socket error, 2 on bad arguments.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

constexpr std::size_t kChunk = 1 << 20;  // bytes per read or write

double now_s() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<double>(ts.tv_sec) + ts.tv_nsec / 1e9;
}

[[noreturn]] void fail(const char* what) {
  std::fprintf(stderr, "rv-dl-tcp: %s: %s\n", what, std::strerror(errno));
  std::exit(1);
}

int serve(int port) {
  const int ls = socket(AF_INET, SOCK_STREAM, 0);
  const int on = 1;
  setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<std::uint16_t>(port));
  if (bind(ls, reinterpret_cast<sockaddr*>(&addr), sizeof addr) < 0) fail("bind");
  if (listen(ls, 1) < 0) fail("listen");
  const int s = accept(ls, nullptr, nullptr);
  if (s < 0) fail("accept");
  std::vector<char> buf(kChunk);
  unsigned long long bytes = 0;
  double first = 0;
  for (;;) {
    const ssize_t n = read(s, buf.data(), buf.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) fail("read");
    if (n == 0) break;
    if (bytes == 0) first = now_s();
    bytes += static_cast<unsigned long long>(n);
  }
  const double secs = bytes == 0 ? 0 : now_s() - first;
  std::printf("rv-dl-tcp: received bytes=%llu seconds=%.3f gbit_s=%.3f\n", bytes, secs,
              secs > 0 ? bytes * 8 / secs / 1e9 : 0.0);
  return 0;
}

int send_for(const char* host, int port, double seconds) {
  const int s = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<std::uint16_t>(port));
  if (inet_pton(AF_INET, host, &addr.sin_addr) != 1) {
    std::fprintf(stderr, "rv-dl-tcp: '%s' is not an IPv4 address\n", host);
    return 2;
  }
  if (connect(s, reinterpret_cast<sockaddr*>(&addr), sizeof addr) < 0) fail("connect");
  std::vector<char> buf(kChunk, 0);
  unsigned long long bytes = 0;
  const double start = now_s();
  while (now_s() - start < seconds) {
    const ssize_t n = write(s, buf.data(), buf.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) fail("write");
    bytes += static_cast<unsigned long long>(n);
  }
  tcp_info info{};
  socklen_t len = sizeof info;
  getsockopt(s, IPPROTO_TCP, TCP_INFO, &info, &len);
  close(s);
  std::printf("rv-dl-tcp: sent bytes=%llu seconds=%.3f rtt_us=%u\n", bytes, now_s() - start,
              info.tcpi_rtt);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "serve" && argc == 3) return serve(std::atoi(argv[2]));
  if (mode == "send" && argc == 5) return send_for(argv[2], std::atoi(argv[3]), std::atof(argv[4]));
  std::fprintf(stderr, "usage: rv-dl-tcp serve PORT | rv-dl-tcp send HOST PORT SECONDS\n");
  return 2;
}
