// rv-msg-pattern: seeded message patterns between two nodes over real TCP (README.md).
//
// One process serves both nodes: a thread that enters a node's network namespace (setns) opens
// that node's sockets there, so both ends are real kernel TCP stacks in their own namespaces, and
// every timestamp is CLOCK_MONOTONIC of one host (all namespaces share it). Two persistent TCP
// connections, one per direction (a->b carries a's messages, b->a b's), default socket options
// plus TCP_NODELAY (as Gloo). A message is a 16-byte header (payload bytes, id) and its payload.
//
//   rv-msg-pattern --ns-a PATH --ns-b PATH --addr-b IP [--port P] --out FILE [--seed N]
//                  [--jitter F] [--cc NAME] PATTERN ...
//   oneway   --size S --gaps G1,G2,... [--sizes S0,S1,...]   a->b: message 0 on the fresh
//            connection, then message i after the previous one has fully arrived and then G_i
//            seconds of idle; message i has S_i bytes where --sizes names it, else S
//   exchange --size S [--size-ba S2] --rounds R [--gap G]   both ends send at once; each end
//            starts its next round when its own send is written and the peer's message arrived
//   pipeline --act S --grad S2 --microbatches N --inflight K --fa s --ba s --fb s
//            a: forward fa, send act; b: on act, compute fb, send grad; a: on grad, backward ba;
//            at most K micro-batches in flight; a's one device does fa and ba one at a time
// --jitter F multiplies each gap/compute time by a seeded uniform factor in [1-F, 1+F].
//
// Output JSON: params, and per message: dir, id, bytes, tag, enqueue (the application hands it
// over), start (its first write), written (last write returned), arrive (last byte read by the
// receiver), all ns CLOCK_MONOTONIC; cwnd/rtt_us/retrans: the sender's tcp_info at start.
#include <arpa/inet.h>
#include <fcntl.h>
#include <linux/tcp.h>
#include <netinet/in.h>
#include <sched.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace {

[[noreturn]] void die(const std::string& why) {
  std::fprintf(stderr, "rv-msg-pattern: %s (%s)\n", why.c_str(), std::strerror(errno));
  std::exit(1);
}

int64_t now_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

void sleep_s(double s) {
  if (s <= 0) return;
  const int64_t until = now_ns() + int64_t(s * 1e9);
  timespec ts{time_t(until / 1000000000), long(until % 1000000000)};
  while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, nullptr) == EINTR) {
  }
}

struct Rec {
  std::string dir, tag;
  uint64_t id = 0, bytes = 0;
  int64_t enqueue = 0, start = 0, written = 0, arrive = 0;
  uint32_t cwnd = 0, rtt_us = 0, retrans = 0;
  double gap_s = -1;
};

std::mutex rec_mu;
std::map<std::pair<std::string, uint64_t>, Rec> recs;

Rec& rec(const std::string& dir, uint64_t id) { return recs[{dir, id}]; }

struct Header {
  uint64_t bytes, id;
};

// One direction: a sender thread writes queued messages in order; a receiver thread reads them
// and calls on_arrive(id) after each one's last byte.
class Conn {
 public:
  Conn(std::string dir, int send_fd, int recv_fd)
      : dir_(std::move(dir)), sfd_(send_fd), rfd_(recv_fd) {}
  std::function<void(uint64_t)> on_arrive;
  std::function<void(uint64_t)> on_written;

  void start() {
    sender_ = std::thread([this] { send_loop(); });
    receiver_ = std::thread([this] { recv_loop(); });
  }
  void send(uint64_t id, uint64_t bytes, const std::string& tag, double gap_s = -1) {
    {
      std::lock_guard<std::mutex> g(rec_mu);
      Rec& r = rec(dir_, id);
      r.dir = dir_;
      r.id = id;
      r.bytes = bytes;
      r.tag = tag;
      r.gap_s = gap_s;
      r.enqueue = now_ns();
    }
    std::lock_guard<std::mutex> g(mu_);
    q_.push_back({bytes, id});
    cv_.notify_one();
  }
  void stop() {
    {
      std::lock_guard<std::mutex> g(mu_);
      done_ = true;
      cv_.notify_one();
    }
    sender_.join();
    ::shutdown(sfd_, SHUT_WR);
    receiver_.join();
  }
  tcp_info info() const {
    tcp_info ti{};
    socklen_t len = sizeof ti;
    getsockopt(sfd_, IPPROTO_TCP, TCP_INFO, &ti, &len);
    return ti;
  }
  const std::string& dir() const { return dir_; }

 private:
  void send_loop() {
    static std::vector<char> buf(1 << 20, 0);
    for (;;) {
      Header h;
      {
        std::unique_lock<std::mutex> g(mu_);
        cv_.wait(g, [&] { return done_ || !q_.empty(); });
        if (q_.empty()) return;
        h = q_.front();
        q_.pop_front();
      }
      const tcp_info ti = info();
      {
        std::lock_guard<std::mutex> g(rec_mu);
        Rec& r = rec(dir_, h.id);
        r.start = now_ns();
        r.cwnd = ti.tcpi_snd_cwnd;
        r.rtt_us = ti.tcpi_rtt;
        r.retrans = ti.tcpi_total_retrans;
      }
      write_all(reinterpret_cast<const char*>(&h), sizeof h);
      for (uint64_t left = h.bytes; left > 0;) {
        const size_t n = std::min<uint64_t>(left, buf.size());
        write_all(buf.data(), n);
        left -= n;
      }
      {
        std::lock_guard<std::mutex> g(rec_mu);
        rec(dir_, h.id).written = now_ns();
      }
      if (on_written) on_written(h.id);
    }
  }
  void write_all(const char* p, size_t n) {
    while (n > 0) {
      const ssize_t k = ::send(sfd_, p, n, MSG_NOSIGNAL);
      if (k < 0) {
        if (errno == EINTR) continue;
        die("send on " + dir_);
      }
      p += k;
      n -= size_t(k);
    }
  }
  bool read_all(char* p, size_t n) {
    while (n > 0) {
      const ssize_t k = ::recv(rfd_, p, n, 0);
      if (k == 0) return false;
      if (k < 0) {
        if (errno == EINTR) continue;
        die("recv on " + dir_);
      }
      p += k;
      n -= size_t(k);
    }
    return true;
  }
  void recv_loop() {
    std::vector<char> buf(1 << 20);
    for (;;) {
      Header h;
      if (!read_all(reinterpret_cast<char*>(&h), sizeof h)) return;
      for (uint64_t left = h.bytes; left > 0;) {
        const ssize_t k = ::recv(rfd_, buf.data(), std::min<uint64_t>(left, buf.size()), 0);
        if (k == 0) die("eof inside a message on " + dir_);
        if (k < 0) {
          if (errno == EINTR) continue;
          die("recv on " + dir_);
        }
        left -= uint64_t(k);
      }
      const int64_t t = now_ns();
      {
        std::lock_guard<std::mutex> g(rec_mu);
        rec(dir_, h.id).arrive = t;
      }
      if (on_arrive) on_arrive(h.id);
    }
  }

  std::string dir_;
  int sfd_, rfd_;
  std::thread sender_, receiver_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Header> q_;
  bool done_ = false;
};

// A queue of ids with blocking pop (arrivals handed to a node's logic).
class Events {
 public:
  void push(uint64_t v) {
    std::lock_guard<std::mutex> g(mu_);
    q_.push_back(v);
    cv_.notify_all();
  }
  uint64_t pop() {
    std::unique_lock<std::mutex> g(mu_);
    cv_.wait(g, [&] { return !q_.empty(); });
    const uint64_t v = q_.front();
    q_.pop_front();
    return v;
  }
  bool try_pop(uint64_t& v) {
    std::lock_guard<std::mutex> g(mu_);
    if (q_.empty()) return false;
    v = q_.front();
    q_.pop_front();
    return true;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<uint64_t> q_;
};

int open_ns(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) die("open " + path);
  return fd;
}

void enter(int nsfd, const std::string& what) {
  if (::setns(nsfd, CLONE_NEWNET) != 0) die("setns " + what);
}

void nodelay(int fd) {
  int one = 1;
  if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one) != 0) die("TCP_NODELAY");
}

// --cc NAME: this socket's congestion control (TCP_CONGESTION), for a cross-check only; without
// it each namespace's default applies.
void congestion(int fd, const std::string& cc) {
  if (cc.empty()) return;
  if (setsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, cc.data(), socklen_t(cc.size())) != 0)
    die("TCP_CONGESTION " + cc);
}

std::vector<double> list_of(const std::string& s) {
  std::vector<double> v;
  std::stringstream in(s);
  for (std::string x; std::getline(in, x, ',');)
    if (!x.empty()) v.push_back(std::atof(x.c_str()));
  return v;
}

std::string esc(const std::string& s) { return s; }  // only our own plain tags

}  // namespace

int main(int argc, char** argv) {
  std::map<std::string, std::string> a;
  std::string pattern;
  for (int i = 1; i < argc; ++i) {
    std::string f = argv[i];
    if (f.rfind("--", 0) == 0 && i + 1 < argc) {
      a[f.substr(2)] = argv[++i];
    } else if (pattern.empty()) {
      pattern = f;
    } else {
      std::fprintf(stderr, "rv-msg-pattern: unexpected argument %s\n", f.c_str());
      return 2;
    }
  }
  auto get = [&](const std::string& k, const std::string& dflt = "") {
    auto it = a.find(k);
    if (it != a.end()) return it->second;
    if (dflt.empty()) {
      std::fprintf(stderr, "rv-msg-pattern: --%s is needed\n", k.c_str());
      std::exit(2);
    }
    return dflt;
  };
  if (pattern != "oneway" && pattern != "exchange" && pattern != "pipeline") {
    std::fprintf(stderr, "rv-msg-pattern: pattern oneway|exchange|pipeline\n");
    return 2;
  }
  const std::string out_path = get("out");
  const uint64_t seed = std::stoull(get("seed", "1"));
  const double jitter = std::atof(get("jitter", "0").c_str());
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> uni(1 - jitter, 1 + jitter);
  std::mutex rng_mu;
  auto jit = [&](double s) {
    std::lock_guard<std::mutex> g(rng_mu);
    return jitter > 0 ? s * uni(rng) : s;
  };

  // Sockets: the listener in b's namespace, both connections from a's.
  const int self = open_ns("/proc/thread-self/ns/net");
  const int nsa = open_ns(get("ns-a")), nsb = open_ns(get("ns-b"));
  const int port = std::stoi(get("port", "7300"));
  const std::string cc = a.count("cc") ? a["cc"] : "";
  enter(nsb, "b");
  const int lst = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int one = 1;
  setsockopt(lst, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(uint16_t(port));
  congestion(lst, cc);
  if (::bind(lst, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0) die("bind");
  if (::listen(lst, 4) != 0) die("listen");
  enter(nsa, "a");
  if (inet_pton(AF_INET, get("addr-b").c_str(), &sa.sin_addr) != 1) die("--addr-b");
  int a_fd[2], b_fd[2];  // [0]: the a->b connection, [1]: the b->a connection
  const int64_t t_connect = now_ns();
  for (int k = 0; k < 2; ++k) {
    a_fd[k] = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    congestion(a_fd[k], cc);
    if (::connect(a_fd[k], reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0) die("connect");
    b_fd[k] = ::accept(lst, nullptr, nullptr);
    if (b_fd[k] < 0) die("accept");
    nodelay(a_fd[k]);
    nodelay(b_fd[k]);
    congestion(b_fd[k], cc);
  }
  const int64_t t_connected = now_ns();
  enter(self, "self");
  ::close(lst);

  Conn ab("ab", a_fd[0], b_fd[0]), ba("ba", b_fd[1], a_fd[1]);
  Events at_b, at_a, written_a, written_b;  // arrivals at b (from a), at a (from b); writes done
  ab.on_arrive = [&](uint64_t id) { at_b.push(id); };
  ba.on_arrive = [&](uint64_t id) { at_a.push(id); };
  ab.on_written = [&](uint64_t id) { written_a.push(id); };
  ba.on_written = [&](uint64_t id) { written_b.push(id); };
  ab.start();
  ba.start();

  std::ostringstream params;
  std::vector<int64_t> done_times;  // pipeline: a's backward completions
  if (pattern == "oneway") {
    const uint64_t size = std::stoull(get("size"));
    const std::vector<double> gaps = list_of(get("gaps", "0"));
    const std::string listed = a.count("sizes") ? a["sizes"] : "";
    const std::vector<double> sizes = list_of(listed);
    auto size_of = [&](size_t i) { return i < sizes.size() ? uint64_t(sizes[i]) : size; };
    params << "\"size\":" << size << ",\"gaps\":\"" << get("gaps", "0") << "\",\"sizes\":\""
           << listed << "\"";
    ab.send(0, size_of(0), "fresh");
    at_b.pop();
    for (size_t i = 0; i < gaps.size(); ++i) {
      const double g = jit(gaps[i]);
      sleep_s(g);
      ab.send(i + 1, size_of(i + 1), "gap", g);
      at_b.pop();
    }
  } else if (pattern == "exchange") {
    const uint64_t s_ab = std::stoull(get("size"));
    const uint64_t s_ba = std::stoull(get("size-ba", std::to_string(s_ab)));
    const int rounds = std::stoi(get("rounds"));
    const double gap = std::atof(get("gap", "0").c_str());
    params << "\"size\":" << s_ab << ",\"size_ba\":" << s_ba << ",\"rounds\":" << rounds
           << ",\"gap\":" << gap;
    auto node = [&](Conn& out, uint64_t bytes, Events& arrivals, Events& written) {
      for (int r = 0; r < rounds; ++r) {
        out.send(uint64_t(r), bytes, r == 0 ? "fresh" : "round", r == 0 ? -1 : gap);
        written.pop();
        arrivals.pop();
        if (r + 1 < rounds) sleep_s(jit(gap));
      }
    };
    std::thread ta([&] { node(ab, s_ab, at_a, written_a); });
    std::thread tb([&] { node(ba, s_ba, at_b, written_b); });
    ta.join();
    tb.join();
  } else {
    const uint64_t act = std::stoull(get("act")), grad = std::stoull(get("grad"));
    const int n = std::stoi(get("microbatches")), k = std::stoi(get("inflight"));
    const double fa = std::atof(get("fa").c_str()), ba_s = std::atof(get("ba").c_str()),
                 fb = std::atof(get("fb").c_str());
    params << "\"act\":" << act << ",\"grad\":" << grad << ",\"microbatches\":" << n
           << ",\"inflight\":" << k << ",\"fa\":" << fa << ",\"ba\":" << ba_s << ",\"fb\":" << fb;
    std::thread tb([&] {
      for (int i = 0; i < n; ++i) {
        const uint64_t id = at_b.pop();
        sleep_s(jit(fb));
        ba.send(id, grad, "grad");
      }
    });
    int inflight = 0, next = 0, done = 0;
    while (done < n) {
      uint64_t id;
      if (at_a.try_pop(id)) {
        sleep_s(jit(ba_s));
        done_times.push_back(now_ns());
        ++done;
        --inflight;
      } else if (inflight < k && next < n) {
        sleep_s(jit(fa));
        ab.send(uint64_t(next), act, "act");
        ++next;
        ++inflight;
      } else {
        id = at_a.pop();
        sleep_s(jit(ba_s));
        done_times.push_back(now_ns());
        ++done;
        --inflight;
      }
    }
    tb.join();
  }
  const tcp_info ti_ab = ab.info(), ti_ba = ba.info();
  ab.stop();
  ba.stop();

  FILE* f = std::fopen(out_path.c_str(), "w");
  if (!f) die("open " + out_path);
  char ca[16] = {0};
  socklen_t calen = sizeof ca - 1;
  getsockopt(a_fd[0], IPPROTO_TCP, TCP_CONGESTION, ca, &calen);
  std::fprintf(f, "{\"cc\":\"%s\",", ca);
  std::fprintf(
      f, "\"pattern\":\"%s\",\"seed\":%llu,\"jitter\":%g,%s,\"connect\":%lld,\"connected\":%lld,\n",
      pattern.c_str(), (unsigned long long)seed, jitter, params.str().c_str(), (long long)t_connect,
      (long long)t_connected);
  auto tinfo = [&](const char* name, const tcp_info& t) {
    std::fprintf(f,
                 "\"tcp_end_%s\":{\"cwnd\":%u,\"rtt_us\":%u,\"rttvar_us\":%u,\"min_rtt_us\":%u,"
                 "\"total_retrans\":%u,\"snd_mss\":%u,\"delivery_rate\":%llu,\"ca_state\":%u},\n",
                 name, t.tcpi_snd_cwnd, t.tcpi_rtt, t.tcpi_rttvar, t.tcpi_min_rtt,
                 t.tcpi_total_retrans, t.tcpi_snd_mss, (unsigned long long)t.tcpi_delivery_rate,
                 t.tcpi_ca_state);
  };
  tinfo("ab", ti_ab);
  tinfo("ba", ti_ba);
  std::fprintf(f, "\"done\":[");
  for (size_t i = 0; i < done_times.size(); ++i)
    std::fprintf(f, "%s%lld", i ? "," : "", (long long)done_times[i]);
  std::fprintf(f, "],\n\"messages\":[\n");
  bool first = true;
  for (const auto& [key, r] : recs) {
    std::fprintf(f,
                 "%s{\"dir\":\"%s\",\"id\":%llu,\"bytes\":%llu,\"tag\":\"%s\",\"gap_s\":%.6f,"
                 "\"enqueue\":%lld,\"start\":%lld,\"written\":%lld,\"arrive\":%lld,\"cwnd\":%u,"
                 "\"rtt_us\":%u,\"retrans\":%u}",
                 first ? "" : ",\n", r.dir.c_str(), (unsigned long long)r.id,
                 (unsigned long long)r.bytes, esc(r.tag).c_str(), r.gap_s, (long long)r.enqueue,
                 (long long)r.start, (long long)r.written, (long long)r.arrive, r.cwnd, r.rtt_us,
                 r.retrans);
    first = false;
  }
  std::fprintf(f, "\n]}\n");
  std::fclose(f);
  return 0;
}
