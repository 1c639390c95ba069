// The network emulator itself, measured end to end on the wall clock through the path real runs
// use: the launcher's EmulatorServer on a WallClock, one EmulatorClient per node, and each node's
// ShapedTransport over its own GlooTransport (here every node is a thread of this process, on
// 127.0.0.1). A message carries a float32 payload of its modeled size (Message.bytes = header +
// payload, as real code counts it), so Gloo's copies are part of what is measured. A message's
// delivery time is when its receiver's recv() returned minus when its sender called send() (one
// steady clock, one process).
//
//   bandwidth  one message of S bytes from node 0 (uplink B) to node 1 (unlimited downlink), no
//              latency: achieved S / delivery time against B; target within 5% of B.
//   latency    1 kB messages, 1000 Mbit/s links, route latency L_s + L_d: delivery time against
//              L_s + L_d + S / B, one message at a time; target |error| <= 1 ms + 5%.
//   fairness   N flows of 4 MB from node 0 (uplink 100 Mbit/s) to N receivers (unlimited
//              downlinks), sent together: each flow's achieved rate S / delivery time as a share
//              of B, against 1/N; target each within 10% of 1/N.
//   gloo_only  (for reading the above) the same messages straight over GlooTransport, no
//              emulator: what Gloo's transfer and copies add to any emulated delivery.
//   latency_breakdown  (for reading the latency part) the layers below Gloo alone: a plain timed
//              wait on this machine, when EmulatedNetwork's pumping thread delivers, and when the
//              EmulatorClient hands over.
//
//   bench_emulator [--part all|bandwidth|latency|fairness] [--quick] [--out FILE]
// (--quick drops 64 MB at 10 Mbit/s, ~54 s of the ~2 minutes.)
#include <ATen/ATen.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "bench/bench_common.h"
#include "core/env.h"
#include "core/error.h"
#include "core/units.h"
#include "emu/emulator_service.h"
#include "exec/wall_env.h"
#include "loopback/loopback.h"
#include "real/gloo_transport.h"

using namespace rv;
using nlohmann::json;

namespace {

constexpr int kWorld = 9;              // node 0 sends; nodes 1..8 receive
constexpr Seconds kGlooTimeout = 300;  // beyond the slowest transfer (64 MB at 10 Mbit/s: 54 s)
constexpr double kMB = 1e6;            // message sizes are decimal, like Mbit/s

// A link too fast to matter; a node's links unless a case says otherwise.
const NodeLinks kFastNode{kUnlimitedRate, kUnlimitedRate, 0};

double mbps(double mbit_per_s) { return mbit_per_s * kMbpsToBytesPerSecond; }  // -> bytes/s

// Runs fn(0) .. fn(n - 1) on a thread each; rethrows the first exception once all have ended.
void on_threads(int n, const std::function<void(int)>& fn) {
  std::vector<std::exception_ptr> errors(static_cast<size_t>(n));
  std::vector<std::thread> threads;
  for (int i = 0; i < n; ++i) {
    threads.emplace_back([&, i] {
      try {
        fn(i);
      } catch (...) {
        errors[static_cast<size_t>(i)] = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (auto& e : errors) {
    if (e) std::rethrow_exception(e);
  }
}

// Every node's GlooTransport, one rank per thread of this process (a transport's constructor and
// close() block until every rank has joined them, so each runs on a thread of its own).
class Nodes {
 public:
  Nodes() : t_(kWorld) {
    const int port = free_loopback_port();
    on_threads(kWorld, [&](int r) {
      GlooOptions o;
      o.secret = "a bench secret of 32 bytes, fixed";
      o.rank = r;
      o.world_size = kWorld;
      o.master_port = port;
      o.timeout = kGlooTimeout;
      t_[static_cast<size_t>(r)] = std::make_unique<GlooTransport>(o);
    });
  }
  void close() {
    on_threads(kWorld, [&](int r) { t_[static_cast<size_t>(r)]->close(); });
  }
  GlooTransport& operator[](int r) { return *t_[static_cast<size_t>(r)]; }

 private:
  std::vector<std::unique_ptr<GlooTransport>> t_;
};

std::string socket_path() {
  static int cases = 0;
  return (std::filesystem::temp_directory_path() /
          ("rv-bench-emu-" + std::to_string(getpid()) + "-" + std::to_string(cases++) + ".sock"))
      .string();
}

// One case's emulated network, set up as `ravnest real` sets it up: the launcher's EmulatorServer
// on a wall clock (delivering on time), one EmulatorClient per node, and each node's transport
// through it (ShapedTransport over the node's GlooTransport). Members are destroyed in reverse:
// transports, clients, then the server.
class Emulated {
 public:
  Emulated(Nodes& nodes, std::vector<NodeLinks> links)
      : server_(socket_path(), std::move(links), clock_) {
    server_.start();
    for (int r = 0; r < kWorld; ++r) {
      clients_.push_back(std::make_unique<EmulatorClient>(server_.path(), r, kGlooTimeout));
      shaped_.push_back(std::make_unique<ShapedTransport>(nodes[r], *clients_.back()));
    }
  }
  Transport& operator[](int r) { return *shaped_[static_cast<size_t>(r)]; }
  void check() const { RV_CHECK(server_.error().empty(), server_.error()); }

 private:
  WallClock clock_;
  EmulatorServer server_;
  std::vector<std::unique_ptr<EmulatorClient>> clients_;
  std::vector<std::unique_ptr<ShapedTransport>> shaped_;
};

// Size on the wire (bytes) of the message sized_message(bytes) makes: a header and whole floats.
Bytes wire_bytes(double bytes) {
  return kHeaderBytes + 4 * std::max<int64_t>(0, static_cast<int64_t>((bytes - kHeaderBytes) / 4));
}

// A message of wire_bytes(bytes) with a float32 payload of that size, as real code sizes one.
Message sized_message(double bytes, int64_t id) {
  Message m;
  m.kind = MsgKind::kForward;
  m.id = id;
  m.bytes = wire_bytes(bytes);
  m.payload.push_back(at::full({(m.bytes - kHeaderBytes) / 4}, 1.0f));
  return m;
}

// Sends one message of `bytes` from node 0 to each of `dsts` (distinct nodes), back to back, and
// returns each one's delivery time in seconds: when its receiver's recv() returned minus when
// node 0 called send(). Each receiver waits in recv() on a thread of its own. Flushes node 0.
std::vector<Seconds> transfer(const std::function<Transport&(int)>& node,
                              const std::vector<int>& dsts, double bytes) {
  const size_t n = dsts.size();
  std::vector<Message> msgs;
  for (size_t i = 0; i < n; ++i) msgs.push_back(sized_message(bytes, static_cast<int64_t>(i)));
  const int64_t floats = msgs[0].payload[0].numel();
  std::vector<double> sent(n), got(n);
  std::vector<std::exception_ptr> errors(n);
  std::vector<std::thread> receivers;
  for (size_t i = 0; i < n; ++i) {
    receivers.emplace_back([&, i] {
      try {
        Message m = node(dsts[i]).recv();
        got[i] = bench::wall_now();
        RV_CHECK(m.src == 0 && m.id == static_cast<int64_t>(i) && m.payload.size() == 1 &&
                     m.payload[0].numel() == floats,
                 "bench_emulator: node " + std::to_string(dsts[i]) + " received the wrong message");
      } catch (...) {
        errors[i] = std::current_exception();
      }
    });
  }
  for (size_t i = 0; i < n; ++i) {
    sent[i] = bench::wall_now();
    node(0).send(dsts[i], std::move(msgs[i]));
  }
  for (auto& t : receivers) t.join();
  for (auto& e : errors) {
    if (e) std::rethrow_exception(e);
  }
  node(0).flush();
  std::vector<Seconds> delivery(n);
  for (size_t i = 0; i < n; ++i) delivery[i] = got[i] - sent[i];
  return delivery;
}

std::vector<Seconds> transfer(Emulated& net, const std::vector<int>& dsts, double bytes) {
  std::vector<Seconds> d = transfer([&](int r) -> Transport& { return net[r]; }, dsts, bytes);
  net.check();
  return d;
}

// One message of S bytes, node 0 (uplink B) -> node 1 (unlimited downlink), latency 0 on both:
// achieved bandwidth S / delivery time (Mbit/s) against B.
json part_bandwidth(Nodes& nodes, bool quick) {
  std::vector<std::pair<double, double>> cases;  // {MB, Mbit/s}
  for (double b : {10.0, 100.0, 1000.0}) {
    for (double mb : {1.0, 8.0, 64.0}) {
      if (!(quick && mb == 64 && b == 10)) cases.emplace_back(mb, b);
    }
  }
  cases.emplace_back(1.0, 1.0);
  json rows = json::array();
  for (auto [mb, b] : cases) {
    const double t0 = bench::wall_now();
    std::vector<NodeLinks> links(kWorld, kFastNode);
    links[0].up = mbps(b);
    Emulated net(nodes, links);
    const double s = static_cast<double>(wire_bytes(mb * kMB));
    const Seconds delivery = transfer(net, {1}, mb * kMB)[0];
    const Seconds model = s / mbps(b);
    const double achieved = s / delivery / kMbpsToBytesPerSecond;  // Mbit/s
    const double error = achieved / b - 1;
    rows.push_back({{"bytes", s},
                    {"configured_mbps", b},
                    {"measured_mbps", achieved},
                    {"error", error},
                    {"within", std::abs(error) <= 0.05},
                    {"model_s", model},
                    {"delivery_s", delivery},
                    {"excess_ms", (delivery - model) * 1e3},
                    {"took_s", bench::wall_now() - t0}});
    std::fprintf(stderr,
                 "bandwidth %g MB at %g Mbit/s: %.3f Mbit/s (%+.2f%%), %.4f s for %.4f s modeled\n",
                 mb, b, achieved, 100 * error, delivery, model);
  }
  return rows;
}

// 1 kB messages, one at a time, node 0 (uplink 1000 Mbit/s, latency L_s) -> node 1 (downlink
// 1000 Mbit/s, latency L_d): delivery time against L_s + L_d + S / B, in milliseconds.
json part_latency(Nodes& nodes, int repeats) {
  const double b = 1000, bytes = 1000;
  json rows = json::array();
  for (auto [ls, ld] : std::vector<std::pair<double, double>>{{1, 1}, {10, 5}, {50, 50}}) {
    const double t0 = bench::wall_now();
    std::vector<NodeLinks> links(kWorld, kFastNode);
    links[0] = {mbps(b), mbps(b), ls * kMsToSeconds};
    links[1] = {mbps(b), mbps(b), ld * kMsToSeconds};
    Emulated net(nodes, links);
    const double configured_ms = ls + ld + static_cast<double>(wire_bytes(bytes)) / mbps(b) * 1e3;
    std::vector<double> measured_ms;
    for (int i = 0; i < repeats; ++i) measured_ms.push_back(transfer(net, {1}, bytes)[0] * 1e3);
    double sum = 0, worst = 0;
    for (double m : measured_ms) {
      sum += m;
      worst = std::max(worst, std::abs(m - configured_ms));
    }
    const double mean_ms = sum / repeats;
    std::vector<double> sorted = measured_ms;
    std::sort(sorted.begin(), sorted.end());
    const double tolerance_ms = 1 + 0.05 * configured_ms;
    rows.push_back({{"latency_ms", {ls, ld}},
                    {"bytes", wire_bytes(bytes)},
                    {"configured_mbps", b},
                    {"repeats", repeats},
                    {"configured_ms", configured_ms},
                    {"measured_mean_ms", mean_ms},
                    {"measured_median_ms", sorted[sorted.size() / 2]},
                    {"measured_min_ms", sorted.front()},
                    {"measured_max_ms", sorted.back()},
                    {"mean_error_ms", mean_ms - configured_ms},
                    {"max_abs_error_ms", worst},
                    {"error", mean_ms / configured_ms - 1},
                    {"tolerance_ms", tolerance_ms},
                    {"within", worst <= tolerance_ms},
                    {"measured_ms", measured_ms},
                    {"took_s", bench::wall_now() - t0}});
    std::fprintf(stderr,
                 "latency %g+%g ms: mean %.3f ms for %.3f ms configured, worst error %.3f ms "
                 "(tolerance %.3f)\n",
                 ls, ld, mean_ms, configured_ms, worst, tolerance_ms);
  }
  return rows;
}

// N flows of 4 MB sent together from node 0 (uplink 100 Mbit/s) to nodes 1..N (unlimited
// downlinks), latency 0: each flow's achieved rate S / delivery time as a share of B, against 1/N.
json part_fairness(Nodes& nodes, int rounds) {
  const double b = 100, bytes = 4 * kMB;
  const double s = static_cast<double>(wire_bytes(bytes));
  json rows = json::array();
  for (int n : {2, 4, 8}) {
    const double t0 = bench::wall_now();
    std::vector<NodeLinks> links(kWorld, kFastNode);
    links[0].up = mbps(b);
    Emulated net(nodes, links);
    std::vector<int> dsts;
    for (int r = 1; r <= n; ++r) dsts.push_back(r);
    json shares = json::array();
    double worst = 0, lo = 1, hi = 0;
    for (int round = 0; round < rounds; ++round) {
      json row = json::array();
      for (Seconds d : transfer(net, dsts, bytes)) {
        const double share = s / d / mbps(b);
        row.push_back(share);
        worst = std::max(worst, std::abs(share * n - 1));
        lo = std::min(lo, share);
        hi = std::max(hi, share);
      }
      shares.push_back(row);
    }
    rows.push_back({{"flows", n},
                    {"bytes", s},
                    {"configured_mbps", b},
                    {"rounds", rounds},
                    {"configured_share", 1.0 / n},
                    {"measured_min_share", lo},
                    {"measured_max_share", hi},
                    {"max_abs_error", worst},
                    {"within", worst <= 0.10},
                    {"model_s", n * s / mbps(b)},
                    {"shares", shares},
                    {"took_s", bench::wall_now() - t0}});
    std::fprintf(
        stderr,
        "fairness %d flows: shares %.4f..%.4f of the uplink for 1/N = %.4f, worst error %.2f%%\n",
        n, lo, hi, 1.0 / n, 100 * worst);
  }
  return rows;
}

// The same messages straight over GlooTransport, node 0 -> node 1, no emulator: the delivery time
// Gloo itself adds (median of 5), in milliseconds.
json part_gloo_only(Nodes& nodes) {
  json rows = json::array();
  for (double bytes : {1e3, 1 * kMB, 4 * kMB, 8 * kMB, 64 * kMB}) {
    std::vector<double> ms;
    for (int i = 0; i < 5; ++i)
      ms.push_back(transfer([&](int r) -> Transport& { return nodes[r]; }, {1}, bytes)[0] * 1e3);
    std::sort(ms.begin(), ms.end());
    rows.push_back(
        {{"bytes", wire_bytes(bytes)}, {"median_ms", ms[2]}, {"min_ms", ms[0]}, {"max_ms", ms[4]}});
    std::fprintf(stderr, "gloo only %g bytes: median %.3f ms\n", bytes, ms[2]);
  }
  return rows;
}

// A transport that only notes when each message is handed to it (bench::wall_now seconds).
class StampTransport : public Transport {
 public:
  int rank() const override { return 0; }
  int size() const override { return kWorld; }
  void send(int, Message) override {
    const double now = bench::wall_now();
    {
      std::lock_guard<std::mutex> lock(mu_);
      stamps_.push_back(now);
    }
    cv_.notify_all();
  }
  Message recv() override { throw Error("stamp transport: no recv"); }
  std::optional<Message> try_recv() override { return std::nullopt; }
  void flush() override {}
  // Waits for the n-th (0-based) send and returns when it happened.
  double stamp(size_t n) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return stamps_.size() > n; });
    return stamps_[n];
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<double> stamps_;
};

// Mean, min, max and largest magnitude of lateness figures, in milliseconds.
json lateness_row(const std::vector<double>& late_ms) {
  double sum = 0, worst = 0;
  for (double l : late_ms) {
    sum += l;
    worst = std::max(worst, std::abs(l));
  }
  return {{"mean_ms", sum / static_cast<double>(late_ms.size())},
          {"min_ms", *std::min_element(late_ms.begin(), late_ms.end())},
          {"max_ms", *std::max_element(late_ms.begin(), late_ms.end())},
          {"max_abs_ms", worst}};
}

// Where the latency cases' excess comes from, layer by layer (1 kB, one message at a time, the
// same links; lateness = when the layer hands the message on minus (send time + the model's
// L_s + L_d + S / B), in milliseconds):
//   network  EmulatedNetwork alone on a WallClock: when its pumping thread runs the delivery. Each
//            message is submitted as soon as the previous one was handed over (as a node that
//            answers a message at once does), while the pumping thread may still be in pump();
//   service  EmulatorServer and two EmulatorClients over an in-process transport (the Unix socket
//            both ways): when the receiver's recv() returns the delivered message.
//   timer    this machine alone: how late a plain condition_variable::wait_for of the model's
//            time wakes (the floor of EmulatedNetwork::run's own timed wait).
// The latency part's figures add Gloo (GlooTransport send, the receiver's threads) to `service`.
json part_breakdown(int repeats) {
  const double b = 1000, bytes = static_cast<double>(wire_bytes(1000));
  json rows = json::array();
  for (auto [ls, ld] : std::vector<std::pair<double, double>>{{1, 1}, {10, 5}, {50, 50}}) {
    std::vector<NodeLinks> links(kWorld, kFastNode);
    links[0] = {mbps(b), mbps(b), ls * kMsToSeconds};
    links[1] = {mbps(b), mbps(b), ld * kMsToSeconds};
    const double model_s = (ls + ld) * kMsToSeconds + bytes / mbps(b);
    std::vector<double> timer_ms, network_ms, service_ms;
    {
      std::mutex mu;
      std::condition_variable cv;
      std::unique_lock<std::mutex> lock(mu);
      for (int i = 0; i < repeats; ++i) {
        const double start = bench::wall_now();
        cv.wait_for(lock, std::chrono::duration<double>(model_s));  // nobody notifies
        timer_ms.push_back((bench::wall_now() - start - model_s) * 1e3);
      }
    }
    {
      WallClock clock;
      EmulatedNetwork net(links, clock);
      net.start();
      StampTransport stub;
      for (int i = 0; i < repeats; ++i) {
        const double sent = bench::wall_now();
        net.submit(0, 1, static_cast<Bytes>(bytes), [&stub] { stub.send(1, Message()); });
        network_ms.push_back((stub.stamp(static_cast<size_t>(i)) - sent - model_s) * 1e3);
      }
    }
    {
      WallClock clock;
      EmulatorServer server(socket_path(), links, clock);
      server.start();
      LoopbackHub hub(2, kGlooTimeout);  // an in-process transport: no Gloo in this figure
      LoopbackTransport t0(hub, 0), t1(hub, 1);
      EmulatorClient c0(server.path(), 0, kGlooTimeout), c1(server.path(), 1, kGlooTimeout);
      ShapedTransport s0(t0, c0), s1(t1, c1);
      for (int i = 0; i < repeats; ++i) {
        Message m = sized_message(bytes, i);
        const double sent = bench::wall_now();
        s0.send(1, std::move(m));
        s1.recv();
        service_ms.push_back((bench::wall_now() - sent - model_s) * 1e3);
      }
      s0.flush();
    }
    rows.push_back({{"latency_ms", {ls, ld}},
                    {"repeats", repeats},
                    {"timer_late", lateness_row(timer_ms)},
                    {"network_late", lateness_row(network_ms)},
                    {"service_late", lateness_row(service_ms)}});
    std::fprintf(stderr,
                 "breakdown %g+%g ms: timer late %.3f ms mean (max %.3f), network late %.3f ms "
                 "mean (max %.3f), "
                 "service late %.3f ms mean (max %.3f)\n",
                 ls, ld, rows.back()["timer_late"]["mean_ms"].get<double>(),
                 rows.back()["timer_late"]["max_ms"].get<double>(),
                 rows.back()["network_late"]["mean_ms"].get<double>(),
                 rows.back()["network_late"]["max_ms"].get<double>(),
                 rows.back()["service_late"]["mean_ms"].get<double>(),
                 rows.back()["service_late"]["max_ms"].get<double>());
  }
  return rows;
}

}  // namespace

int main(int argc, char** argv) {
  bool quick = false;
  std::string part = "all", out;
  CLI::App app{
      "the network emulator end to end (EmulatorServer, clients, ShapedTransport over Gloo)"};
  app.add_option("--part", part)->check(CLI::IsMember({"all", "bandwidth", "latency", "fairness"}));
  app.add_flag("--quick", quick, "drop the 64 MB transfer at 10 Mbit/s (~54 s)");
  app.add_option("--out", out);
  CLI11_PARSE(app, argc, argv);
  const double t0 = bench::wall_now();
  Nodes nodes;
  // Warm-up: one message on every pair the cases use, so no case pays a first send.
  for (int r = 1; r < kWorld; ++r)
    transfer([&](int k) -> Transport& { return nodes[k]; }, {r}, 1 * kMB);
  json j = {{"benchmark", "emulator"}, {"quick", quick}};
  j["gloo_only"] = part_gloo_only(nodes);
  if (part == "all" || part == "bandwidth") j["bandwidth"] = part_bandwidth(nodes, quick);
  if (part == "all" || part == "latency") {
    j["latency"] = part_latency(nodes, 20);
    j["latency_breakdown"] = part_breakdown(20);
  }
  if (part == "all" || part == "fairness") j["fairness"] = part_fairness(nodes, 3);
  nodes.close();
  int within = 0, cases = 0;
  for (const char* name : {"bandwidth", "latency", "fairness"}) {
    if (!j.contains(name)) continue;
    for (const json& row : j[name]) {
      ++cases;
      within += row["within"].get<bool>() ? 1 : 0;
    }
  }
  j["cases_within"] = within;
  j["cases"] = cases;
  j["took_s"] = bench::wall_now() - t0;
  bench::emit(j, out);
}
