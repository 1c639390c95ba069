// GlooTransport between real processes on 127.0.0.1: ordered delivery with payloads, try_recv,
// peer death, timeouts, malformed headers and the orderly close. Every rank is a child process
// forked before it touches LibTorch or Gloo; the test process itself never does, so forking stays
// safe. A child reports through its exit status (0 = every expectation held) and stderr.
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Parallel.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <optional>
#include <string>
#include <thread>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <vector>

#include "algo/ring_averager.h"
#include "catch.h"
#include "core/error.h"
#include "core/output/metrics.h"
#include "exec/wall_env.h"
#include "planner/planner.h"
#include "real/gloo_collectives.h"
#include "real/gloo_transport.h"
#include "real/wire_format.h"

namespace {

using rv::GlooOptions;
using rv::GlooTransport;
using rv::Message;
using rv::MsgKind;

// Child-side expectation: on failure, say where and leave with status 10.
#define EXPECT_OR_EXIT(cond)                                                                       \
  do {                                                                                             \
    if (!(cond)) {                                                                                 \
      std::fprintf(stderr, "rank %d: expectation failed at line %d: %s\n", rank, __LINE__, #cond); \
      return 10;                                                                                   \
    }                                                                                              \
  } while (0)

constexpr int kKilled = -1000;  // status of a child killed at the deadline

// Runs body(rank, port) in `world` child processes; returns each rank's exit status (or
// -signal, or kKilled if it had not finished within `limit_s` seconds).
std::vector<int> run_ranks(int world, double limit_s, const std::function<int(int, int)>& body) {
  const int port = rv::free_loopback_port();
  std::vector<pid_t> pids;
  for (int r = 0; r < world; ++r) {
    std::fflush(nullptr);
    const pid_t pid = fork();
    if (pid == 0) {
      int code = 0;
      try {
        at::set_num_threads(1);
        code = body(r, port);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "rank %d: uncaught exception: %s\n", r, e.what());
        code = 100;
      }
      std::fflush(nullptr);
      _exit(code);
    }
    pids.push_back(pid);
  }
  std::vector<int> status(world, kKilled);
  std::vector<bool> done(world, false);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(limit_s);
  int left = world;
  while (left > 0 && std::chrono::steady_clock::now() < deadline) {
    for (int r = 0; r < world; ++r) {
      int st = 0;
      if (!done[r] && waitpid(pids[r], &st, WNOHANG) == pids[r]) {
        done[r] = true;
        --left;
        status[r] = WIFEXITED(st) ? WEXITSTATUS(st) : -WTERMSIG(st);
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  for (int r = 0; r < world; ++r) {
    if (!done[r]) {
      kill(pids[r], SIGKILL);
      waitpid(pids[r], nullptr, 0);
    }
  }
  return status;
}

GlooOptions options(int rank, int world, int port, double timeout_s) {
  GlooOptions o;
  o.rank = rank;
  o.world_size = world;
  o.master_port = port;
  o.timeout = timeout_s;
  o.secret = "a test secret of 32 bytes, fixed";
  return o;
}

// CPU time of this process, all threads, in seconds.
double cpu_seconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         1e-6 * static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

// {300, 257} travels inside the header, {513, 513} (beyond kInlineFloats) split in a lead and a
// body.
const std::vector<std::vector<int64_t>> kShapes = {
    {}, {3}, {2, 5}, {4, 1, 3, 2}, {0}, {7, 0, 2}, {300, 257}, {1, 2, 1, 2, 1, 2}, {513, 513}};

float value(int src, int i, int k) { return static_cast<float>(src * 100000 + i * 10 + k); }

// Message i's size in the two-thread test: on both sides of the inline limit, odd and even.
int64_t size_of(int i) {
  if (i % 3 == 0) return GlooTransport::kInlineFloats + 1000 + i;
  return i % 3 == 1 ? 1 + i : GlooTransport::kInlineFloats - i;
}

// Rank 1 of a malformed-message test: `raw` int64 tensors, one message each, straight through
// c10d to rank 0 (none of the transport's framing); then it waits until rank 0 has read them and
// left (which ends the wait with a PeerError).
void send_raw(GlooTransport& t, const std::vector<at::Tensor>& raw) {
  for (const at::Tensor& r : raw) {
    std::vector<at::Tensor> one{r};
    t.group().send(one, 0, 0)->wait();
  }
  try {
    t.recv_for(2);
  } catch (const rv::PeerError&) {
  }
}

// Rank 0 of such a test: 0 if its next recv() raises rv::InputError whose text holds every one of
// `parts`; 11 if recv() returns a message, 10 if the text lacks a part (printed).
int recv_malformed(GlooTransport& t, const std::vector<std::string>& parts) {
  try {
    t.recv();
    return 11;
  } catch (const rv::InputError& e) {
    for (const std::string& part : parts) {
      if (!contains(e.what(), part)) {
        std::fprintf(stderr, "rank 0: '%s' lacks '%s'\n", e.what(), part.c_str());
        return 10;
      }
    }
  }
  return 0;
}

}  // namespace

TEST_CASE("gloo transport: messages arrive intact and in order from every peer", "[gloo]") {
  constexpr int kWorld = 3, kMessages = 40;
  const auto status = run_ranks(kWorld, 30, [](int rank, int port) -> int {
    GlooTransport t(options(rank, kWorld, port, 10));
    EXPECT_OR_EXIT(t.rank() == rank && t.size() == kWorld);
    t.barrier();
    for (int i = 0; i < kMessages; ++i) {
      for (int dst = 0; dst < kWorld; ++dst) {
        if (dst == rank) continue;
        if (i == 2) {  // executor-level: goes to recv_control(), never to recv()
          Message c;
          c.kind = MsgKind::kControl;
          c.id = 9;
          c.aux = rank;
          t.send(dst, std::move(c));
        }
        Message m;
        m.kind = static_cast<MsgKind>(1 + i % 6);
        m.id = i;
        m.step = rank * 1000 + dst;
        m.aux = -i;
        m.scalar = i * 0.25 + rank;
        m.bytes = 64 + i;
        for (int k = 0; k < i % 4; ++k) {
          m.payload.push_back(at::full(kShapes[(i + k) % kShapes.size()], value(rank, i, k)));
        }
        if (i == 5) m.payload = {at::arange(12, at::kFloat).view({3, 4}).t()};  // not contiguous
        at::Tensor kept;
        if (i == 6) {  // the sender keeps (and then changes) its tensor: the message is a copy
          kept = at::full({4, 4}, value(rank, i, 0));
          m.payload = {kept};
        }
        t.send(dst, std::move(m));
        if (kept.defined()) kept.fill_(-1.0f);
      }
    }
    std::vector<int> next(kWorld, 0);
    int polled = 0;
    for (int got = 0; got < kMessages * (kWorld - 1); ++got) {
      std::optional<Message> o = got % 2 == 0 ? t.try_recv() : std::nullopt;
      if (!o) {
        ++polled;
        o = t.recv();
      }
      const Message& m = *o;
      EXPECT_OR_EXIT(m.kind != MsgKind::kControl);
      EXPECT_OR_EXIT(m.src >= 0 && m.src < kWorld && m.src != rank);
      const int i = next[m.src]++;
      EXPECT_OR_EXIT(m.id == i);  // FIFO per pair
      EXPECT_OR_EXIT(m.kind == static_cast<MsgKind>(1 + i % 6));
      EXPECT_OR_EXIT(m.step == m.src * 1000 + rank);
      EXPECT_OR_EXIT(m.aux == -i);
      EXPECT_OR_EXIT(m.scalar == i * 0.25 + m.src);
      EXPECT_OR_EXIT(m.bytes == 64 + i);
      if (i == 5) {
        EXPECT_OR_EXIT(m.payload.size() == 1);
        EXPECT_OR_EXIT(at::equal(m.payload[0], at::arange(12, at::kFloat).view({3, 4}).t()));
        continue;
      }
      if (i == 6) {
        EXPECT_OR_EXIT(m.payload.size() == 1);
        EXPECT_OR_EXIT(at::equal(m.payload[0], at::full({4, 4}, value(m.src, i, 0))));
        continue;
      }
      EXPECT_OR_EXIT(static_cast<int>(m.payload.size()) == i % 4);
      for (size_t k = 0; k < m.payload.size(); ++k) {
        const at::Tensor& p = m.payload[k];
        EXPECT_OR_EXIT(p.sizes().vec() == kShapes[(i + k) % kShapes.size()]);
        EXPECT_OR_EXIT(p.scalar_type() == at::kFloat);
        EXPECT_OR_EXIT(at::equal(p, at::full(p.sizes(), value(m.src, i, static_cast<int>(k)))));
      }
    }
    EXPECT_OR_EXIT(!t.try_recv().has_value());
    for (int k = 0; k < kWorld - 1; ++k) {
      const std::optional<Message> c = t.recv_control(5);
      EXPECT_OR_EXIT(c.has_value() && c->kind == MsgKind::kControl && c->id == 9);
      EXPECT_OR_EXIT(c->aux == c->src && c->src != rank);
    }
    Message self;
    self.kind = MsgKind::kForward;
    self.id = 77;
    self.payload = {at::ones({2})};
    t.send(rank, std::move(self));
    const Message back = t.recv();
    EXPECT_OR_EXIT(back.id == 77 && back.src == rank && back.payload.size() == 1);
    t.flush();
    t.close();
    t.close();  // idempotent
    try {
      t.recv();
      return 11;
    } catch (const rv::PeerError&) {
    }
    return 0;
  });
  CHECK(status == std::vector<int>(kWorld, 0));
}

TEST_CASE("gloo transport: a peer that dies raises PeerError naming it long before the timeout",
          "[gloo]") {
  constexpr int kWorld = 3;
  const auto status = run_ranks(kWorld, 25, [](int rank, int port) -> int {
    GlooTransport t(options(rank, kWorld, port, 60));  // far longer than the test's limit
    t.barrier();
    if (rank == 2) {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      _exit(3);  // dies without a word
    }
    try {
      t.recv();
      return 11;
    } catch (const rv::PeerError& e) {
      EXPECT_OR_EXIT(contains(e.what(), "lost peer 2"));
    }
    try {  // failures are sticky
      t.try_recv();
      return 12;
    } catch (const rv::PeerError&) {
    }
    try {  // sending to the dead peer fails too (at once, or at the latest in flush())
      for (int i = 0; i < 3; ++i) {
        Message m;
        m.kind = MsgKind::kForward;
        m.payload = {at::ones({1000})};
        t.send(2, std::move(m));
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
      t.flush();
      return 13;
    } catch (const rv::PeerError& e) {
      EXPECT_OR_EXIT(contains(e.what(), "peer 2"));
    }
    try {  // the survivors still close in order, and close() reports the loss
      t.close();
      return 14;
    } catch (const rv::PeerError& e) {
      EXPECT_OR_EXIT(contains(e.what(), "peer 2"));
    }
    return 0;
  });
  CHECK(status[0] == 0);
  CHECK(status[1] == 0);
  CHECK(status[2] == 3);
}

TEST_CASE(
    "gloo transport: a replacement process takes a lost rank's place and talks to every survivor",
    "[gloo][recover][join]") {
  constexpr int kWorld = 3;
  // Children 0-2 are the ranks; child 3 replaces rank 2 once the survivors have lost it.
  const auto status = run_ranks(kWorld + 1, 40, [](int child, int port) -> int {
    const int rank = child;
    if (child == kWorld) {
      GlooOptions o = options(2, kWorld, port, 20);
      o.join = true;
      o.peer_lost = [](int, int) {};
      std::optional<GlooTransport> t;
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(15);
      while (!t) {  // refused while rank 2 is still in the run
        try {
          t.emplace(o);
        } catch (const rv::InputError& e) {
          EXPECT_OR_EXIT(contains(e.what(), "still in the run"));
          EXPECT_OR_EXIT(std::chrono::steady_clock::now() < deadline);
          std::this_thread::sleep_for(std::chrono::milliseconds(50));
        }
      }
      EXPECT_OR_EXIT(t->incarnation(2) == 1 && t->incarnation(0) == 0 && t->lost_peers().empty());
      try {  // a second replacement of the same rank: it is in the run again
        GlooTransport again(o);
        return 11;
      } catch (const rv::InputError& e) {
        EXPECT_OR_EXIT(contains(e.what(), "still in the run"));
      }
      GlooOptions zero = options(0, kWorld, port, 20);
      zero.join = true;
      zero.peer_lost = [](int, int) {};
      try {
        GlooTransport never(zero);
        return 12;
      } catch (const rv::InputError& e) {
        EXPECT_OR_EXIT(contains(e.what(), "rank 0 cannot be replaced"));
      }
      for (int p = 0; p < 2; ++p) {
        Message m;
        m.kind = MsgKind::kForward;
        m.id = 70 + p;
        m.payload = {at::full({5000}, 2.5f)};  // more than a header holds: a payload of its own
        t->send(p, std::move(m));
      }
      bool from[2] = {false, false};
      for (int k = 0; k < 2; ++k) {
        const Message r = t->recv();
        EXPECT_OR_EXIT((r.src == 0 || r.src == 1) && r.id == 80 + r.src &&
                       r.payload.at(0)[0].item<float>() == r.src);
        from[r.src] = true;
      }
      EXPECT_OR_EXIT(from[0] && from[1]);
      bool refused = false;
      try {
        t->barrier();
      } catch (const rv::Error& e) {
        refused = contains(e.what(), "no world group");
      }
      EXPECT_OR_EXIT(refused);
      t->flush();
      t->close();
      return 0;
    }
    GlooOptions o = options(rank, kWorld, port, 20);
    std::atomic<int> reports{0};
    o.peer_lost = [&](int peer, int incarnation) {
      if (peer == 2 && incarnation == 0)
        ++reports;
      else
        reports = 100;
    };
    GlooTransport t(o);
    t.barrier();
    if (rank == 2) {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      _exit(3);  // dies without a word
    }
    // The replacement arrives: rank 2 is open again, as its incarnation 1.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (t.incarnation(2) != 1 && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    EXPECT_OR_EXIT(t.incarnation(2) == 1);
    EXPECT_OR_EXIT(reports == 1);
    EXPECT_OR_EXIT(t.lost_peers().empty());
    Message m;
    m.kind = MsgKind::kForward;
    m.id = 80 + rank;
    m.payload = {at::full({7}, static_cast<float>(rank))};
    t.send(2, std::move(m));
    const Message r = t.recv();
    EXPECT_OR_EXIT(r.src == 2 && r.id == 70 + rank && r.payload.at(0).numel() == 5000 &&
                   r.payload.at(0)[4999].item<float>() == 2.5f);
    t.flush();
    t.close();  // byes with both the other survivor and the replacement
    EXPECT_OR_EXIT(reports == 1);
    return 0;
  });
  CHECK(status[0] == 0);
  CHECK(status[1] == 0);
  CHECK(status[2] == 3);
  CHECK(status[3] == 0);
}

TEST_CASE("gloo transport: a tolerant rank takes a dead peer for lost and goes on with the others",
          "[gloo][recover]") {
  constexpr int kWorld = 3;
  const auto status = run_ranks(kWorld, 25, [](int rank, int port) -> int {
    GlooOptions o = options(rank, kWorld, port, 60);
    std::atomic<int> reports{0}, lost{-1};
    o.peer_lost = [&](int peer, int incarnation) {
      ++reports;
      lost = incarnation == 0 ? peer : -2;
    };
    GlooTransport t(o);
    t.barrier();
    if (rank == 2) {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      _exit(3);  // dies without a word
    }
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (lost != 2 && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    EXPECT_OR_EXIT(lost == 2);
    EXPECT_OR_EXIT(t.lost_peers() == std::vector<int>{2});
    for (int i = 0; i < 3; ++i) {  // to the lost peer: dropped, no failure
      Message m;
      m.kind = MsgKind::kForward;
      m.payload = {at::ones({1000})};
      t.send(2, std::move(m));
    }
    // The two survivors still exchange messages, and an executor's notice reaches the inbox.
    Message m;
    m.kind = MsgKind::kForward;
    m.id = 40 + rank;
    m.payload = {at::full({3}, static_cast<float>(rank))};
    t.send(1 - rank, std::move(m));
    Message notice;
    notice.kind = MsgKind::kMember;
    t.notify(std::move(notice));
    bool got_peer = false, got_notice = false;
    for (int k = 0; k < 2; ++k) {
      const Message r = t.recv();
      if (r.kind == MsgKind::kMember) {
        EXPECT_OR_EXIT(r.src == -1);
        got_notice = true;
      } else {
        EXPECT_OR_EXIT(r.src == 1 - rank && r.id == 41 - rank &&
                       r.payload.at(0)[0].item<float>() == 1 - rank);
        got_peer = true;
      }
    }
    EXPECT_OR_EXIT(got_peer && got_notice);
    t.flush();
    t.close();  // no failure: the lost peer's bye is not awaited
    EXPECT_OR_EXIT(reports == 1);
    return 0;
  });
  CHECK(status[0] == 0);
  CHECK(status[1] == 0);
  CHECK(status[2] == 3);
}

TEST_CASE("gloo transport: a rank that fails without close() releases its peers at once",
          "[gloo]") {
  const auto status = run_ranks(2, 25, [](int rank, int port) -> int {
    try {
      GlooTransport t(options(rank, 2, port, 60));
      t.barrier();
      if (rank == 1) throw rv::Error("simulated failure");  // unwinds: the transport aborts
      t.recv();
      return 11;
    } catch (const rv::PeerError& e) {
      EXPECT_OR_EXIT(rank == 0 && contains(e.what(), "lost peer 1"));
      return 0;
    } catch (const rv::Error&) {
      return rank == 1 ? 0 : 12;
    }
  });
  CHECK(status == std::vector<int>{0, 0});
}

TEST_CASE("gloo transport: close() is orderly and recv() after every bye fails at once", "[gloo]") {
  const auto status = run_ranks(2, 25, [](int rank, int port) -> int {
    GlooTransport t(options(rank, 2, port, 60));
    t.barrier();
    if (rank == 1) {
      Message m;
      m.kind = MsgKind::kStop;
      m.payload = {at::ones({5, 5})};
      t.send(0, std::move(m));
      t.close();  // waits for rank 0's bye
      return 0;
    }
    const Message m = t.recv();  // sent before the bye: delivered
    EXPECT_OR_EXIT(m.kind == MsgKind::kStop && m.payload.size() == 1);
    try {
      t.recv();  // rank 1 said bye: nothing can arrive; no wait for the 60 s timeout
      return 11;
    } catch (const rv::PeerError& e) {
      EXPECT_OR_EXIT(contains(e.what(), "bye"));
    }
    t.close();
    return 0;
  });
  CHECK(status == std::vector<int>{0, 0});
}

TEST_CASE("gloo transport: a silent peer makes an idle recv() throw PeerError after the timeout",
          "[gloo]") {
  const auto status = run_ranks(2, 25, [](int rank, int port) -> int {
    GlooTransport t(options(rank, 2, port, 3.0));  // also bounds the rendezvous: not too short
    t.barrier();
    if (rank == 0) {
      const double cpu0 = cpu_seconds();
      try {
        t.recv();
        return 11;
      } catch (const rv::PeerError& e) {
        EXPECT_OR_EXIT(contains(e.what(), "no message"));
      }
      // The whole process (receiver threads, Gloo's loop) sleeps while recv() waits: a polling
      // loop would burn about the 3 s of the wait.
      EXPECT_OR_EXIT(cpu_seconds() - cpu0 < 0.5);
      EXPECT_OR_EXIT(!t.recv_for(0.1).has_value());
      Message m;
      m.kind = MsgKind::kForward;
      m.id = 5;
      t.send(1, std::move(m));
    } else {
      const std::optional<Message> m = t.recv_for(20);  // outlasts rank 0's timeout
      EXPECT_OR_EXIT(m.has_value() && m->id == 5);
    }
    t.close();
    return 0;
  });
  CHECK(status == std::vector<int>{0, 0});
}

TEST_CASE("gloo transport: a malformed header raises InputError", "[gloo]") {
  const auto status = run_ranks(2, 25, [](int rank, int port) -> int {
    GlooTransport t(options(rank, 2, port, 10));
    t.barrier();
    if (rank == 1) {
      // A header with the right size and magic word but an unknown kind.
      at::Tensor h = at::zeros({GlooTransport::kHeaderWords}, at::kLong);
      h[0] = rv::wire::kMagic;
      h[1] = 42;
      send_raw(t, {h});
      return 0;
    }
    return recv_malformed(t, {"malformed message header from peer 1", "kind 42"});
  });
  CHECK(status == std::vector<int>{0, 0});
}

TEST_CASE("gloo transport: a header cut short raises InputError, not an earlier message's fields",
          "[gloo]") {
  const auto status = run_ranks(2, 25, [](int rank, int port) -> int {
    GlooTransport t(options(rank, 2, port, 10));
    t.barrier();
    if (rank == 1) {
      // A whole message first, so that the next header may land in the memory this one used.
      Message m;
      m.kind = MsgKind::kForward;
      m.id = 3;
      m.payload = {at::ones({1000})};
      t.send(0, std::move(m));
      t.flush();
      t.recv_for(5);  // rank 0's go-ahead
      // Then only the magic word: the fields after it never come.
      send_raw(t, {at::full({1}, rv::wire::kMagic, at::kLong)});
      return 0;
    }
    const Message first = t.recv();
    EXPECT_OR_EXIT(first.id == 3 && first.payload.size() == 1 && first.payload[0].numel() == 1000);
    Message go;
    go.kind = MsgKind::kForward;
    t.send(1, std::move(go));
    return recv_malformed(t, {"malformed message header from peer 1", "kind 0"});
  });
  CHECK(status == std::vector<int>{0, 0});
}

TEST_CASE(
    "wire format: a payload beyond the inline size is split in a lead that checks its place and a "
    "body",
    "[gloo]") {
  using namespace rv::wire;
  const int64_t n = 2 * kInlineFloats + 7;
  const at::Tensor flat = at::arange(n, at::kFloat);
  Message m;
  m.kind = MsgKind::kReduce;
  m.id = 5;
  const at::Tensor header = encode_header(m, {flat}, n, flat);
  CHECK(is_split(n));
  CHECK_FALSE(is_split(kInlineFloats));
  CHECK(header.numel() == kWInlineData);  // no floats: they follow in the lead and the body
  const Decoded d =
      decode_header(header.data_ptr<int64_t>(), static_cast<size_t>(header.numel()), 1);
  CHECK(d.split);
  CHECK_FALSE(d.inline_payload);
  CHECK(d.elems == n);
  CHECK(d.lead == kLeadFloats);
  const at::Tensor lead = encode_lead(flat.data_ptr<float>(), n, d.lead);
  CHECK(lead.numel() == kWInlineData + kLeadFloats / 2);
  const float* f = decode_lead(lead.data_ptr<int64_t>(), static_cast<size_t>(lead.numel()), 1, d);
  CHECK(std::equal(f, f + d.lead, flat.data_ptr<float>()));
  auto refused = [](const std::function<void()>& fn, const std::string& what) {
    try {
      fn();
    } catch (const rv::InputError& e) {
      if (contains(e.what(), "from peer 1") && contains(e.what(), what)) return true;
      std::fprintf(stderr, "'%s' lacks '%s'\n", e.what(), what.c_str());
    }
    return false;
  };
  // A lead of another payload, a header where the lead belongs, or a lead in too little room.
  const at::Tensor other = encode_lead(flat.data_ptr<float>(), n + 1, d.lead);
  CHECK(refused(
      [&] { decode_lead(other.data_ptr<int64_t>(), static_cast<size_t>(other.numel()), 1, d); },
      "a lead of 65536 floats and a body of " + std::to_string(n + 1 - kLeadFloats)));
  CHECK(refused(
      [&] { decode_lead(header.data_ptr<int64_t>(), static_cast<size_t>(header.numel()), 1, d); },
      "malformed payload lead"));
  CHECK(refused([&] { decode_lead(lead.data_ptr<int64_t>(), kWInlineData, 1, d); },
                "in " + std::to_string(kWInlineData) + " words"));
  // The inline flag must say how the payload travels: whole in the header, or split.
  at::Tensor wrong = header.clone();
  wrong.data_ptr<int64_t>()[kWInline] = 1;
  CHECK(refused(
      [&] { decode_header(wrong.data_ptr<int64_t>(), static_cast<size_t>(wrong.numel()), 1); },
      "inline payload flag 1"));
  const at::Tensor small = at::ones({10});
  at::Tensor inline_header = encode_header(m, {small}, 10, small);
  inline_header.data_ptr<int64_t>()[kWInline] = 2;
  CHECK(refused(
      [&] {
        decode_header(inline_header.data_ptr<int64_t>(), static_cast<size_t>(inline_header.numel()),
                      1);
      },
      "inline payload flag 2"));
  // And a split payload's lead must be 1..kInlineFloats floats.
  for (int64_t bad_lead : {int64_t{0}, kInlineFloats + 1, int64_t{-3}}) {
    at::Tensor bad = header.clone();
    bad.data_ptr<int64_t>()[kWLead] = bad_lead;
    CHECK(refused(
        [&] { decode_header(bad.data_ptr<int64_t>(), static_cast<size_t>(bad.numel()), 1); },
        bad_lead == 0 ? "without a lead" : "a lead of " + std::to_string(bad_lead) + " floats"));
  }
}

TEST_CASE(
    "gloo transport: a header announcing a split payload and then anything but its lead is "
    "malformed",
    "[gloo]") {
  const auto status = run_ranks(2, 25, [](int rank, int port) -> int {
    GlooTransport t(options(rank, 2, port, 10));
    t.barrier();
    if (rank == 1) {
      // A header that announces a split payload, then another header where its lead belongs.
      const int64_t n = GlooTransport::kInlineFloats + 10;
      const at::Tensor flat = at::ones({n});
      Message m;
      m.kind = MsgKind::kForward;
      send_raw(t, {rv::wire::encode_header(m, {flat}, n, flat), rv::wire::encode_header(m, {}, 0)});
      return 0;
    }
    return recv_malformed(t,
                          {"malformed payload lead from peer 1", "where the lead of a payload of"});
  });
  CHECK(status == std::vector<int>{0, 0});
}

TEST_CASE(
    "gloo transport: a split payload sent without a copy is read where it was, and a payload held "
    "elsewhere "
    "is copied before send() returns",
    "[gloo]") {
  constexpr int64_t kN = 3 * GlooTransport::kInlineFloats + 5;
  const auto status = run_ranks(2, 30, [](int rank, int port) -> int {
    GlooTransport t(options(rank, 2, port, 20));
    if (rank == 0) {
      // Frozen: sent from where it is (the sender keeps its promise not to write it).
      at::Tensor frozen = at::arange(kN, at::kFloat);
      Message a;
      a.kind = MsgKind::kForward;
      a.id = 1;
      a.payload = {frozen};
      a.payload_frozen = true;
      t.send(1, std::move(a));
      // Not frozen and held by the caller too: copied, so that writing it at once changes nothing.
      at::Tensor mine = at::full({kN}, 2.f);
      Message b;
      b.kind = MsgKind::kForward;
      b.id = 2;
      b.payload = {mine};
      t.send(1, std::move(b));
      mine.fill_(-1.f);
      // Several tensors: one flat copy of them, whatever the sender does next.
      at::Tensor x = at::full({2, GlooTransport::kInlineFloats}, 3.f), y = at::full({7}, 4.f);
      Message c;
      c.kind = MsgKind::kForward;
      c.id = 3;
      c.payload = {x, y};
      t.send(1, std::move(c));
      x.fill_(-1.f);
      y.fill_(-1.f);
      t.flush();
    } else {
      const Message a = t.recv();
      EXPECT_OR_EXIT(a.id == 1 && a.payload.size() == 1 && a.payload[0].numel() == kN);
      EXPECT_OR_EXIT(a.payload[0].equal(at::arange(kN, at::kFloat)));
      const Message b = t.recv();
      EXPECT_OR_EXIT(b.id == 2 && b.payload[0].eq(2.f).all().item<bool>());
      const Message c = t.recv();
      EXPECT_OR_EXIT(c.id == 3 && c.payload.size() == 2 &&
                     c.payload[0].sizes() == at::IntArrayRef({2, GlooTransport::kInlineFloats}));
      EXPECT_OR_EXIT(c.payload[0].eq(3.f).all().item<bool>() &&
                     c.payload[1].eq(4.f).all().item<bool>());
    }
    t.close();
    return 0;
  });
  CHECK(status == std::vector<int>{0, 0});
}

TEST_CASE("gloo transport: two threads sending at once deliver every message intact, each in order",
          "[gloo]") {
  constexpr int kWorld = 2, kEach = 150;
  const auto status = run_ranks(kWorld, 60, [](int rank, int port) -> int {
    GlooTransport t(options(rank, kWorld, port, 20));
    t.barrier();
    if (rank == 0) {
      // Sizes on both sides of the inline limit: some messages are split.
      auto sender = [&t](int thread) {
        for (int i = 0; i < kEach; ++i) {
          Message m;
          m.kind = MsgKind::kForward;
          m.id = thread * 1000 + i;
          m.payload = {at::full({size_of(i)}, static_cast<float>(m.id))};
          t.send(1, std::move(m));
        }
      };
      std::thread other(sender, 1);
      sender(0);
      other.join();
      t.flush();
    } else {
      std::vector<int64_t> last = {-1, -1};
      for (int k = 0; k < 2 * kEach; ++k) {
        Message m = t.recv();
        const int thread = static_cast<int>(m.id / 1000), i = static_cast<int>(m.id % 1000);
        EXPECT_OR_EXIT(thread == 0 || thread == 1);
        EXPECT_OR_EXIT(i > last[thread]);
        last[thread] = i;
        EXPECT_OR_EXIT(m.payload.size() == 1);
        EXPECT_OR_EXIT(m.payload[0].numel() == size_of(i));
        EXPECT_OR_EXIT(m.payload[0].eq(static_cast<float>(m.id)).all().item<bool>());
      }
      EXPECT_OR_EXIT(last[0] == kEach - 1 && last[1] == kEach - 1);
    }
    t.close();
    return 0;
  });
  for (int r = 0; r < kWorld; ++r) {
    INFO("rank " << r);
    CHECK(status[r] == 0);
  }
}

// c10d sums in its own order, our rings in theirs: neither is "the" answer. Every order's sum of p
// floats is within gamma_(p-1) * sum |x_i| of the exact sum, gamma_k = k u / (1 - k u) with
// u = 2^-24 (Higham, Accuracy and Stability of Numerical Algorithms, 4.2). Hold c10d's
// all-reduce, through the executor's Collectives, to that bound element by element.
TEST_CASE("c10d all-reduce sums within the float error bound of any summation order",
          "[gloo][collectives]") {
  constexpr int kWorld = 4;
  constexpr int64_t kN = 20000;
  // Every rank can regenerate every rank's data: values of mixed signs and magnitudes.
  auto data_of = [](int rank) {
    auto gen = at::make_generator<at::CPUGeneratorImpl>(1000 + rank);
    return at::randn({kN}, gen, at::kFloat) *
           at::pow(10.0, at::randint(-3, 4, {kN}, gen, at::kFloat));
  };
  const auto status = run_ranks(kWorld, 60, [&](int rank, int port) -> int {
    GlooTransport t(options(rank, kWorld, port, 20));
    rv::GlooCollectives c(t);
    std::vector<int> all = {0, 1, 2, 3};
    c.join(all);
    at::Tensor mine = data_of(rank);
    at::Tensor sum = mine.clone();
    c.allreduce_sum(all, sum)->wait();
    at::Tensor exact = at::zeros({kN}, at::kDouble), magnitude = at::zeros({kN}, at::kDouble);
    for (int r = 0; r < kWorld; ++r) {
      at::Tensor x = data_of(r).to(at::kDouble);
      exact += x;
      magnitude += x.abs();
    }
    const double u = std::ldexp(1.0, -24), k = kWorld - 1;
    const double gamma = k * u / (1 - k * u);
    at::Tensor err = (sum.to(at::kDouble) - exact).abs();
    EXPECT_OR_EXIT((err <= gamma * magnitude).all().item<bool>());
    // Not trivially exact: the data does make some sums round.
    EXPECT_OR_EXIT(err.max().item<double>() > 0);
    t.close();
    return 0;
  });
  for (int r = 0; r < kWorld; ++r) {
    INFO("rank " << r);
    CHECK(status[r] == 0);
  }
}

TEST_CASE("gloo transport: a second group of the same members is a group of its own",
          "[gloo][auth]") {
  // Each make_group() of one member list gets its own store keys and proofs: the second neither
  // collides with the first's rendezvous nor accepts the first's proofs, and both work.
  constexpr int kWorld = 3;
  const auto status = run_ranks(kWorld, 60, [&](int rank, int port) -> int {
    GlooTransport t(options(rank, kWorld, port, 20));
    if (rank == 2) {  // not a member: makes nothing, and the members do not wait for it
      t.close();
      return 0;
    }
    auto first = t.make_group({0, 1});
    auto second = t.make_group({0, 1});
    for (auto* g : {first.get(), second.get()}) {
      std::vector<at::Tensor> x = {at::full({4}, static_cast<float>(rank + 1), at::kFloat)};
      g->allreduce(x)->wait();
      EXPECT_OR_EXIT(x[0].eq(3.0f).all().item<bool>());
    }
    t.close();
    return 0;
  });
  for (int r = 0; r < kWorld; ++r) {
    INFO("rank " << r);
    CHECK(status[r] == 0);
  }
}

TEST_CASE(
    "gloo transport: a stopped peer is reported within the timeout, named, even by a long wait",
    "[gloo]") {
  // Rank 2 stops after 3 s (SIGSTOP: its connections stay open, so no socket error tells the
  // others) while rank 0 waits as the final gather does, for an hour, and rank 1 computes without
  // a word for longer than the 2 s timeout first. Heartbeats keep rank 1 alive and name rank 2
  // within the timeout; before them, rank 0 waited for good.
  constexpr int kWorld = 3;
  const auto status = run_ranks(kWorld, 15, [](int rank, int port) -> int {
    GlooTransport t(options(rank, kWorld, port, 2));
    t.barrier();
    if (rank == 2) {
      std::this_thread::sleep_for(std::chrono::seconds(3));
      raise(SIGSTOP);
      return 0;
    }
    if (rank == 1) {
      const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(2500);
      while (std::chrono::steady_clock::now() < until) {
      }
      Message m;
      m.kind = MsgKind::kControl;
      m.id = 7;
      t.send(0, std::move(m));
      t.flush();
    }
    bool got = false;
    try {
      while (true) {
        const std::optional<Message> m = t.recv_control(3600);
        EXPECT_OR_EXIT(rank == 0 && m && m->id == 7 && !got);  // rank 1's message, then the failure
        got = true;
      }
    } catch (const rv::PeerError& e) {
      EXPECT_OR_EXIT(contains(e.what(), "peer 2 silent for"));
    }
    EXPECT_OR_EXIT(got || rank == 1);
    // Both survivors see it at about the same moment; leaving at once could make the other see
    // this rank's exit first.
    std::this_thread::sleep_for(std::chrono::seconds(1));
    return 0;
  });
  CHECK(status[0] == 0);
  CHECK(status[1] == 0);
  CHECK(status[2] == kKilled);  // stopped to the end
}

TEST_CASE("gloo transport: a rank without the run's secret is refused, with a message",
          "[gloo][auth]") {
  const auto status = run_ranks(2, 25, [](int rank, int port) -> int {
    GlooOptions o = options(rank, 2, port, 3.0);
    if (rank == 1) o.secret = "another run's secret, 32 bytes!!";
    try {
      GlooTransport t(o);
      return 11;
    } catch (const rv::InputError& e) {
      // The impostor: the store refused its proof.
      EXPECT_OR_EXIT(rank == 1 && contains(e.what(), "refused this rank"));
      return 0;
    } catch (const rv::PeerError& e) {
      // Rank 0: nobody with the secret joined within the timeout, and the store it hosts says
      // whom it refused, and why.
      EXPECT_OR_EXIT(rank == 0 && contains(e.what(), "rank 0"));
      EXPECT_OR_EXIT(contains(e.what(), "the store refused ") &&
                     contains(e.what(), "connection(s), the last: wrong run secret"));
      return 0;
    }
  });
  CHECK(status == std::vector<int>{0, 0});
}

TEST_CASE("gloo transport: a header announcing more than the plan can send is malformed",
          "[gloo]") {
  const auto status = run_ranks(2, 25, [](int rank, int port) -> int {
    GlooOptions o = options(rank, 2, port, 10);
    o.max_payload_elems = rank == 1 ? 1000 : 1 << 20;
    GlooTransport t(o);
    t.barrier();
    if (rank == 0) {
      Message m;
      m.kind = MsgKind::kForward;
      m.payload = {at::ones({1001})};
      t.send(1, std::move(m));
      t.flush();
      // Rank 1 leaves without a bye; this rank sees it go.
      try {
        t.recv();
      } catch (const rv::PeerError&) {
      }
      return 0;
    }
    try {
      t.recv();
      return 11;
    } catch (const rv::InputError& e) {
      EXPECT_OR_EXIT(contains(e.what(), "peer 0") && contains(e.what(), "more than 1000 elements"));
    }
    // And a sender refuses to send what its own bound forbids.
    try {
      Message m;
      m.kind = MsgKind::kForward;
      m.payload = {at::ones({1001})};
      t.send(0, std::move(m));
      return 12;
    } catch (const rv::Error& e) {
      EXPECT_OR_EXIT(contains(e.what(), "more than the 1000"));
    }
    return 0;
  });
  CHECK(status == std::vector<int>{0, 0});
}

TEST_CASE("gloo transport: a full inbox holds back its peers (bounded queues), and nothing is lost",
          "[gloo]") {
  constexpr int kMessages = 24;
  constexpr int64_t kFloats = GlooTransport::kInlineFloats + 4096;  // 1 MiB and a bit: not inline
  const auto status = run_ranks(2, 60, [](int rank, int port) -> int {
    GlooOptions o = options(rank, 2, port, 20);
    o.queue_bytes = size_t{4} << 20;  // 4 MiB: about 3 of the messages
    GlooTransport t(o);
    t.barrier();
    if (rank == 0) {
      for (int i = 0; i < kMessages; ++i) {
        Message m;
        m.kind = MsgKind::kForward;
        m.id = i;
        m.payload = {at::full({kFloats}, static_cast<float>(i))};
        t.send(1, std::move(m));  // waits for room once 4 MiB are in flight
      }
      t.flush();
    } else {
      // Rank 1 reads nothing for 2 s: its inbox fills to the bound and stays there.
      std::this_thread::sleep_for(std::chrono::seconds(2));
      const size_t held = t.inbox_bytes();
      EXPECT_OR_EXIT(held > 0);
      EXPECT_OR_EXIT(held <= o.queue_bytes + 2 * sizeof(float) * kFloats);
      for (int i = 0; i < kMessages; ++i) {
        const Message m = t.recv();
        EXPECT_OR_EXIT(m.id == i && m.payload.size() == 1 && m.payload[0].numel() == kFloats);
        EXPECT_OR_EXIT(m.payload[0][kFloats - 1].item<float>() == static_cast<float>(i));
        EXPECT_OR_EXIT(t.inbox_bytes() <= o.queue_bytes + 2 * sizeof(float) * kFloats);
      }
    }
    t.close();
    return 0;
  });
  CHECK(status == std::vector<int>{0, 0});
}

TEST_CASE(
    "gloo transport: after drain() a full inbox no longer holds back control messages or byes",
    "[gloo]") {
  constexpr int kMessages = 12;
  constexpr int64_t kFloats = GlooTransport::kInlineFloats + 4096;
  const auto status = run_ranks(2, 60, [](int rank, int port) -> int {
    GlooOptions o = options(rank, 2, port, 20);
    o.queue_bytes = size_t{2} << 20;
    GlooTransport t(o);
    t.barrier();
    if (rank == 0) {
      // More than rank 1's bound, never read by it, then a control message behind them.
      for (int i = 0; i < kMessages; ++i) {
        Message m;
        m.kind = MsgKind::kForward;
        m.payload = {at::ones({kFloats})};
        t.send(1, std::move(m));
      }
      Message c;
      c.kind = MsgKind::kControl;
      c.id = 4;
      t.send(1, std::move(c));
      t.flush();
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
      t.drain();  // the algorithm is done: its unread messages stay unread
      const std::optional<Message> c = t.recv_control(15);
      EXPECT_OR_EXIT(c.has_value() && c->id == 4);
    }
    t.close();
    return 0;
  });
  CHECK(status == std::vector<int>{0, 0});
}

TEST_CASE(
    "gloo transport: a payload offered a place arrives in it - other sizes or messages and "
    "withdrawn "
    "offers arrive as usual",
    "[gloo]") {
  constexpr int64_t kN = GlooTransport::kInlineFloats + 1000;  // beyond the inline limit
  const auto status = run_ranks(2, 30, [](int rank, int port) -> int {
    GlooTransport t(options(rank, 2, port, 20));
    auto message = [](MsgKind kind, int64_t step, int64_t n, float v) {
      Message m;
      m.kind = kind;
      m.id = 7;
      m.step = step;
      m.aux = 3;
      m.payload = {at::full({1, n}, v)};
      return m;
    };
    if (rank == 0) {
      t.barrier();                                        // rank 1's offers are made
      t.send(1, message(MsgKind::kForward, 0, kN, 1.f));  // the offer's fields but another kind
      t.send(1, message(MsgKind::kGather, 0, kN, 2.f));   // the offer's message
      t.send(1, message(MsgKind::kGather, 1, kN, 3.f));   // matches an offer of another size
      EXPECT_OR_EXIT(t.recv().kind == MsgKind::kStop);    // rank 1 withdrew its third offer
      t.send(1, message(MsgKind::kGather, 2, kN, 4.f));
      t.flush();
    } else {
      at::Tensor into = at::full({3 * kN}, -1.f);
      const rv::MessageMatch first{MsgKind::kGather, 7, 0, 3}, second{MsgKind::kGather, 7, 1, 3},
          third{MsgKind::kGather, 7, 2, 3};
      t.offer(0, first, into.narrow(0, kN / 2, kN));
      t.offer(0, second, into.narrow(0, 2 * kN, kN - 1));  // one element short
      t.offer(0, third, into.narrow(0, 2 * kN, kN));
      t.barrier();
      const Message other = t.recv();
      EXPECT_OR_EXIT(other.kind == MsgKind::kForward &&
                     other.payload[0].data_ptr() != into.data_ptr());
      EXPECT_OR_EXIT(other.payload[0].eq(1.f).all().item<bool>());
      const Message in_place = t.recv();
      EXPECT_OR_EXIT(in_place.kind == MsgKind::kGather && in_place.step == 0);
      EXPECT_OR_EXIT(in_place.payload.size() == 1 &&
                     in_place.payload[0].sizes() == at::IntArrayRef({1, kN}));
      EXPECT_OR_EXIT(in_place.payload[0].data_ptr<float>() == into.data_ptr<float>() + kN / 2);
      EXPECT_OR_EXIT(into.narrow(0, kN / 2, kN).eq(2.f).all().item<bool>());
      EXPECT_OR_EXIT(into.narrow(0, 0, kN / 2).eq(-1.f).all().item<bool>());
      EXPECT_OR_EXIT(into.narrow(0, kN + kN / 2, 3 * kN - kN - kN / 2).eq(-1.f).all().item<bool>());
      const Message short_place = t.recv();
      EXPECT_OR_EXIT(short_place.step == 1 && short_place.payload[0].eq(3.f).all().item<bool>());
      EXPECT_OR_EXIT(into.narrow(0, 2 * kN, kN).eq(-1.f).all().item<bool>());
      t.withdraw(0, second);  // already dropped: nothing to take back
      t.withdraw(0, third);
      Message go;
      go.kind = MsgKind::kStop;
      t.send(0, std::move(go));
      const Message withdrawn = t.recv();
      EXPECT_OR_EXIT(withdrawn.step == 2 && withdrawn.payload[0].eq(4.f).all().item<bool>());
      EXPECT_OR_EXIT(withdrawn.payload[0].data_ptr() != into.data_ptr());
      EXPECT_OR_EXIT(into.narrow(0, 2 * kN, kN).eq(-1.f).all().item<bool>());
    }
    t.close();
    return 0;
  });
  CHECK(status == std::vector<int>{0, 0});
}

TEST_CASE(
    "gloo transport: the direct channel moves tensors in order per tag, beside messages, and "
    "refuses "
    "what it cannot send",
    "[gloo][direct]") {
  constexpr int64_t kLarge = GlooTransport::kInlineFloats + 777;
  // Over the one connection between the ranks, and with the second one for rank 1 to rank 0
  // (GlooOptions::direct_reverse).
  for (const bool reverse : {false, true}) {
    INFO("direct_reverse = " << reverse);
    const auto status = run_ranks(2, 60, [reverse](int rank, int port) -> int {
      GlooOptions o = options(rank, 2, port, 20);
      o.direct_reverse = reverse;
      GlooTransport t(o);
      rv::DirectChannel& d = t.direct();
      const int peer = 1 - rank;
      auto values = [](int from, int k, int64_t n) {
        return at::arange(n, at::kFloat) + static_cast<float>(1000 * from + k);
      };
      // Receives posted first (tag 0: two, in order; tag 7: one), then the sends in another order
      // across tags, a message among them.
      at::Tensor a = at::zeros({5}), b = at::zeros({kLarge}), c = at::zeros({3});
      auto ra = d.recv(peer, 0, a), rb = d.recv(peer, 0, b), rc = d.recv(peer, 7, c);
      t.barrier();
      at::Tensor sa = values(rank, 1, 5), sb = values(rank, 2, kLarge), sc = values(rank, 3, 3);
      auto tc = d.send(peer, 7, sc);
      auto ta = d.send(peer, 0, sa);
      Message m;
      m.kind = MsgKind::kForward;
      m.id = 42;
      m.payload = {at::full({4}, 9.f)};
      t.send(peer, std::move(m));
      auto tb = d.send(peer, 0, sb);
      for (auto* w : {&ra, &rb, &rc, &ta, &tb, &tc}) (*w)->wait();
      EXPECT_OR_EXIT(at::equal(a, values(peer, 1, 5)));
      EXPECT_OR_EXIT(at::equal(b, values(peer, 2, kLarge)));
      EXPECT_OR_EXIT(at::equal(c, values(peer, 3, 3)));
      const Message got = t.recv();
      EXPECT_OR_EXIT(got.kind == MsgKind::kForward && got.id == 42 &&
                     got.payload[0].eq(9.f).all().item<bool>());
      EXPECT_OR_EXIT(ra->done() && tb->done());
      // What it refuses, with rv::Error: itself, no rank, a tag out of range, a tensor not
      // contiguous float32.
      auto refused = [&](const std::function<void()>& f) {
        try {
          f();
        } catch (const rv::Error&) {
          return true;
        }
        return false;
      };
      at::Tensor x = at::zeros({4});
      EXPECT_OR_EXIT(refused([&] { d.send(rank, 0, x); }));
      EXPECT_OR_EXIT(refused([&] { d.recv(2, 0, x); }));
      EXPECT_OR_EXIT(refused([&] { d.send(peer, -1, x); }));
      EXPECT_OR_EXIT(refused([&] { d.recv(peer, rv::DirectChannel::kMaxTag + 1, x); }));
      EXPECT_OR_EXIT(refused([&] { d.send(peer, 0, at::zeros({4, 4}).t()); }));
      EXPECT_OR_EXIT(refused([&] { d.recv(peer, 0, at::zeros({4}, at::kDouble)); }));
      t.close();
      return 0;
    });
    CHECK(status == std::vector<int>{0, 0});
  }
}

TEST_CASE("gloo transport: a direct receive from a peer that dies fails with PeerError, not a hang",
          "[gloo][direct]") {
  for (const bool reverse : {false, true}) {  // from rank 1 to 0 over the second connection too
    INFO("direct_reverse = " << reverse);
    const auto status = run_ranks(2, 60, [reverse](int rank, int port) -> int {
      GlooOptions o = options(rank, 2, port, 15);
      o.direct_reverse = reverse;
      GlooTransport t(o);
      if (rank == 1) {
        t.barrier();
        _exit(0);  // gone without close(): its connections drop
      }
      at::Tensor into = at::zeros({1000});
      auto w = t.direct().recv(1, 3, into);
      t.barrier();
      try {
        w->wait();
      } catch (const rv::PeerError& e) {
        std::fprintf(stderr, "rank 0: %s\n", e.what());
        EXPECT_OR_EXIT(contains(e.what(), "direct receive from peer 1"));
        return 0;
      }
      return 11;
    });
    CHECK(status == std::vector<int>{0, 0});
  }
}

TEST_CASE(
    "multi-ring over the direct channel: every cluster holds the mean, no ring message goes "
    "through the "
    "transport, rounds and pieces do not mix, and an overlapped averaging keeps to messages",
    "[gloo][direct][rings]") {
  // Three clusters cut at different layers (6 ranks): rings of several lengths, nodes in several
  // rings with different neighbours; whole segments, then pieces of at most 64 bytes (many lanes).
  const std::string toml = R"(
name = "rings"
[model]
head = "linear"
kind = "cnn"
channels = [4, 8]
hidden = [16]
[data]
kind = "synthetic"
side = 8
[planner]
method = "manual"
[[planner.cluster]]
nodes = [0]
stage_layers = [12]
[[planner.cluster]]
nodes = [1, 2]
stage_layers = [5, 7]
[[planner.cluster]]
nodes = [3, 4, 5]
stage_layers = [3, 3, 6]
[[devices]]
count = 6
)";
  constexpr int kWorld = 6;
  const auto status = run_ranks(kWorld, 240, [&](int rank, int port) -> int {
    const rv::Scenario sc = rv::parse_scenario(toml, "rings.toml");
    const rv::ModelDesc model = rv::build_model(sc);
    const rv::Plan plan = rv::make_plan(sc, model);
    const int64_t total = model.state_offset(model.layer_count());
    auto full = [&](int cluster) {  // cluster c's state: its own values
      auto gen = at::make_generator<at::CPUGeneratorImpl>(500 + cluster);
      return at::randn({total}, gen, at::kFloat) * (cluster + 1) + cluster;
    };
    const rv::NodeRole role = plan.role_of(rank);
    const int64_t lo = model.state_offset(role.layer_begin),
                  hi = model.state_offset(role.layer_end);
    const at::Tensor mean = (full(0) + full(1) + full(2)).div(3).narrow(0, lo, hi - lo);
    GlooOptions o = options(rank, kWorld, port, 60);
    o.direct_reverse = true;  // as real runs offering the channel
    GlooTransport t(o);
    rv::WallClock clock;
    rv::WallCompute compute;
    rv::EventLog log;
    rv::NodeEnv env{t, clock, compute, log, nullptr, nullptr, nullptr, &t.direct()};
    auto no_message = [&]() -> Message {
      throw rv::Error("a ring waited for a message: not on the direct channel");
    };
    auto unexpected = [](Message) { throw rv::Error("an unexpected message"); };
    int64_t round = 0;
    for (int64_t piece : {int64_t{0}, int64_t{64}}) {
      rv::RingAverager avg(env, plan, model, rank, rv::RingTopology::kMulti, piece);
      at::Tensor mine = full(role.cluster).narrow(0, lo, hi - lo).clone();
      // A state its caller holds (must come back unchanged), then one handed over (a no-op on the
      // means: the rounds must not mix).
      const at::Tensor before = mine.clone();
      at::Tensor got = avg.average(mine, 1, round++, no_message, unexpected);
      EXPECT_OR_EXIT(at::equal(mine, before));
      EXPECT_OR_EXIT(at::allclose(got, mean, 1e-5, 1e-5));
      got = avg.average(got.clone(), 1, round++, no_message, unexpected);
      EXPECT_OR_EXIT(at::allclose(got, mean, 1e-5, 1e-5));
    }
    // Overlapped (start(), then progress() as messages come): over messages, the channel there
    // all the same (its works complete only in a wait, which progress() may not do).
    {
      rv::RingAverager avg(env, plan, model, rank, rv::RingTopology::kMulti, 0);
      avg.start(full(role.cluster).narrow(0, lo, hi - lo).clone(), 1, round++);
      while (!avg.progress()) {
        Message m = t.recv();
        EXPECT_OR_EXIT(avg.hold(m));
      }
      EXPECT_OR_EXIT(at::allclose(avg.result(), mean, 1e-5, 1e-5));
      avg.clear();
    }
    // The exchanges are recorded as the messages they replace: a send and a receive per round.
    int64_t sends = 0, recvs = 0;
    for (const rv::Event& e : log.events()) {
      sends += e.kind == rv::EventKind::kSend;
      recvs += e.kind == rv::EventKind::kRecv;
    }
    EXPECT_OR_EXIT(sends > 0 && sends == recvs);
    t.close();
    return 0;
  });
  CHECK(status == std::vector<int>(kWorld, 0));
}
