// rv-ns3-ref: a pattern (netref/pattern.h) over ns-3's packet-level TCP on the project's star.
//
// Topology: a core router and, per node i, one point-to-point link whose node-side device sends at
// up_i (the uplink) and whose router-side device sends at down_i (the downlink), both with
// propagation delay lat_i; so a -> b crosses up_a, lat_a, down_b, lat_b. Each device's queue is
// drop-tail (--queue-packets, default 10000 packets: no drops in the shipped patterns, and the
// run reports drops); no traffic-control queue disc. Static routes (a node's default route is the
// router).
//
// TCP: one connection per ordered pair of nodes that the pattern uses, opened before the pattern
// starts (time 0 of every reported time is when the last one is up) and kept open, as Gloo's
// pairs are. Settings follow this host's Linux where ns-3 has them (README.md lists them):
// congestion control --cc (cubic, the default; bbr, this host's, stalls connections in ns-3 3.37),
// MSS 1448 with timestamps, SACK, window scaling, initial window 10, delayed ACK every 2 segments
// or 40 ms, min RTO 200 ms, send and receive buffers fixed at this host's autotuning maxima
// (tcp_wmem 4 MiB, tcp_rmem 32 MiB; ns-3 does not autotune), pacing with BBR. A message is a run of
// bytes on its pair's stream; it arrives when its last byte has been read at the receiver.
//
// Usage: rv-ns3-ref PATTERN.json [-o OUT.json] [--summary] [--cc bbr|cubic]
//                   [--queue-packets N] [--max-sim-s S] [--sndbuf B] [--rcvbuf B]
// Exit status: 0 done, 1 a message did not arrive (by the time limit or when nothing was left to
// simulate), 2 bad input.
#include <chrono>
#include <deque>
#include <iostream>
#include <map>
#include <set>

#include "netref/pattern.h"
#include "ns3/core-module.h"
#include "ns3/internet-module.h"
#include "ns3/network-module.h"
#include "ns3/point-to-point-module.h"
#include "ns3/traffic-control-module.h"

namespace netref {
namespace {

using namespace ns3;

constexpr uint16_t kPort = 5000;

struct Settings {
  std::string cc = "cubic";  // bbr, this host's default, stalls in ns-3 3.37 (README.md)
  uint32_t queue_packets = 10000;
  double max_sim_s = 36000;
  uint32_t sndbuf = 4194304;   // bytes: net.ipv4.tcp_wmem max on this host
  uint32_t rcvbuf = 33554432;  // bytes: net.ipv4.tcp_rmem max on this host
};

// The ordered pairs the pattern sends over.
std::set<std::pair<int, int>> pairs_of(const Spec& s) {
  std::set<std::pair<int, int>> out;
  for (const auto& c : s.clusters)
    for (size_t i = 0; i + 1 < c.size(); ++i) {
      out.insert({c[i], c[i + 1]});
      out.insert({c[i + 1], c[i]});
    }
  auto ring = [&](const std::vector<int>& r) {
    for (size_t i = 0; i < r.size(); ++i) out.insert({r[i], r[(i + 1) % r.size()]});
  };
  for (const auto& r : s.rings) ring(r);
  if (s.kind == Kind::kRavnest)
    for (size_t st = 0; st < s.clusters[0].size(); ++st) {
      std::vector<int> r;
      for (const auto& c : s.clusters) r.push_back(c[st]);
      ring(r);
    }
  return out;
}

class Ns3Net : public Net {
 public:
  Ns3Net(const Spec& spec, const Settings& set) : spec_(spec), set_(set) { build(); }
  void set_runner(Runner* r) { runner_ = r; }
  double now() const override { return Simulator::Now().GetSeconds(); }
  void send(int src, int dst, uint64_t bytes, int64_t id) override {
    auto it = pairs_.find({src, dst});
    if (it == pairs_.end())
      throw std::logic_error("no connection " + std::to_string(src) + " -> " + std::to_string(dst));
    Pair& p = it->second;
    p.queued += bytes;
    p.inflight.push_back({id, p.queued});
    pump(p);
  }
  void after(double seconds, std::function<void()> fn) override {
    Simulator::Schedule(Seconds(seconds), [fn] { fn(); });
  }
  // Opens every connection; calls `ready` once all are up at both ends.
  void connect_all(std::function<void()> ready) {
    ready_ = std::move(ready);
    for (auto& [key, p] : pairs_) {
      Pair* pp = &p;
      p.tx = Socket::CreateSocket(hosts_.Get(static_cast<uint32_t>(key.first)),
                                  TcpSocketFactory::GetTypeId());
      p.tx->Bind();
      p.tx->SetConnectCallback(Callback<void, Ptr<Socket>>([this, pp](Ptr<Socket>) {
                                 pp->up = true;
                                 ++connected_;
                                 check_ready();
                               }),
                               Callback<void, Ptr<Socket>>([pp](Ptr<Socket>) {
                                 throw std::runtime_error("connection " + std::to_string(pp->src) +
                                                          " -> " + std::to_string(pp->dst) +
                                                          " failed");
                               }));
      p.tx->SetSendCallback(
          Callback<void, Ptr<Socket>, uint32_t>([this, pp](Ptr<Socket>, uint32_t) { pump(*pp); }));
      p.tx->Connect(InetSocketAddress(addr_[static_cast<size_t>(key.second)], kPort));
    }
  }
  uint64_t wire_bytes() const { return wire_bytes_; }
  uint64_t drops() const { return drops_; }
  size_t connections() const { return pairs_.size(); }

 private:
  struct Pair {
    int src = 0, dst = 0;
    Ptr<Socket> tx, rx;
    bool up = false;
    uint64_t queued = 0, written = 0, received = 0;     // bytes on the stream
    std::deque<std::pair<int64_t, uint64_t>> inflight;  // message id, stream offset of its end
  };

  void build() {
    const uint32_t n = static_cast<uint32_t>(spec_.nodes.size());
    Config::SetDefault("ns3::TcpL4Protocol::SocketType",
                       TypeIdValue(set_.cc == "bbr" ? TcpBbr::GetTypeId() : TcpCubic::GetTypeId()));
    Config::SetDefault("ns3::TcpSocket::SegmentSize", UintegerValue(1448));
    Config::SetDefault("ns3::TcpSocket::SndBufSize", UintegerValue(set_.sndbuf));
    Config::SetDefault("ns3::TcpSocket::RcvBufSize", UintegerValue(set_.rcvbuf));
    Config::SetDefault("ns3::TcpSocket::InitialCwnd", UintegerValue(10));
    Config::SetDefault("ns3::TcpSocket::DelAckCount", UintegerValue(2));
    Config::SetDefault("ns3::TcpSocket::DelAckTimeout", TimeValue(MilliSeconds(40)));
    Config::SetDefault("ns3::TcpSocket::ConnTimeout", TimeValue(Seconds(1)));
    Config::SetDefault("ns3::TcpSocketBase::Sack", BooleanValue(true));
    Config::SetDefault("ns3::TcpSocketBase::Timestamp", BooleanValue(true));
    Config::SetDefault("ns3::TcpSocketBase::WindowScaling", BooleanValue(true));
    Config::SetDefault("ns3::TcpSocketBase::MinRto", TimeValue(MilliSeconds(200)));
    Config::SetDefault("ns3::TcpSocketState::EnablePacing", BooleanValue(set_.cc == "bbr"));

    hosts_.Create(n);
    router_.Create(1);
    InternetStackHelper stack;
    stack.Install(hosts_);
    stack.Install(router_);
    Ipv4AddressHelper ip;
    ip.SetBase("10.0.0.0", "255.255.255.252");
    NetDeviceContainer all;
    std::vector<Ipv4Address> gateway(n);
    for (uint32_t i = 0; i < n; ++i) {
      const NodeSpec& ns = spec_.nodes[i];
      PointToPointHelper p2p;
      p2p.SetChannelAttribute("Delay", TimeValue(Seconds(ns.latency)));
      p2p.SetQueue("ns3::DropTailQueue<Packet>", "MaxSize",
                   QueueSizeValue(QueueSize(std::to_string(set_.queue_packets) + "p")));
      NetDeviceContainer d = p2p.Install(hosts_.Get(i), router_.Get(0));
      d.Get(0)->SetAttribute("DataRate",
                             DataRateValue(DataRate(static_cast<uint64_t>(ns.up_bps * 8))));
      d.Get(1)->SetAttribute("DataRate",
                             DataRateValue(DataRate(static_cast<uint64_t>(ns.down_bps * 8))));
      Ipv4InterfaceContainer ifs = ip.Assign(d);
      ip.NewNetwork();
      addr_.push_back(ifs.GetAddress(0));
      by_addr_[ifs.GetAddress(0).Get()] = static_cast<int>(i);
      gateway[i] = ifs.GetAddress(1);
      all.Add(d);
    }
    // Drop-tail device queues only: remove the queue discs that address assignment installs.
    TrafficControlHelper().Uninstall(all);
    for (uint32_t k = 0; k < all.GetN(); ++k) {
      Ptr<PointToPointNetDevice> dev = DynamicCast<PointToPointNetDevice>(all.Get(k));
      dev->TraceConnectWithoutContext("PhyTxBegin", MakeCallback(&Ns3Net::on_tx, this));
      dev->GetQueue()->TraceConnectWithoutContext("Drop", MakeCallback(&Ns3Net::on_drop, this));
      dev->TraceConnectWithoutContext("MacTxDrop", MakeCallback(&Ns3Net::on_drop, this));
    }
    Ipv4StaticRoutingHelper srh;
    for (uint32_t i = 0; i < n; ++i)
      srh.GetStaticRouting(hosts_.Get(i)->GetObject<Ipv4>())->SetDefaultRoute(gateway[i], 1);

    for (const auto& [a, b] : pairs_of(spec_)) {
      Pair& p = pairs_[{a, b}];
      p.src = a;
      p.dst = b;
    }
    // Every node listens; an accepted connection is its sender's pair into this node.
    for (uint32_t i = 0; i < n; ++i) {
      Ptr<Socket> l = Socket::CreateSocket(hosts_.Get(i), TcpSocketFactory::GetTypeId());
      l->Bind(InetSocketAddress(Ipv4Address::GetAny(), kPort));
      l->Listen();
      const int dst = static_cast<int>(i);
      l->SetAcceptCallback(
          MakeNullCallback<bool, Ptr<Socket>, const Address&>(),
          Callback<void, Ptr<Socket>, const Address&>([this, dst](Ptr<Socket> s,
                                                                  const Address& from) {
            const int src = by_addr_.at(InetSocketAddress::ConvertFrom(from).GetIpv4().Get());
            Pair* p = &pairs_.at({src, dst});
            p->rx = s;
            s->SetRecvCallback(
                Callback<void, Ptr<Socket>>([this, p](Ptr<Socket> sock) { receive(*p, sock); }));
            ++accepted_;
            check_ready();
          }));
      listeners_.push_back(l);
    }
  }

  void check_ready() {
    if (connected_ == pairs_.size() && accepted_ == pairs_.size() && ready_) {
      auto r = std::move(ready_);
      ready_ = nullptr;
      r();
    }
  }

  // Writes what the socket's send buffer takes of the pair's unsent bytes (payload-less packets:
  // ns-3 carries their sizes, not their contents).
  void pump(Pair& p) {
    if (!p.up) return;
    while (p.written < p.queued) {
      const uint32_t room = p.tx->GetTxAvailable();
      if (room == 0) return;
      const uint32_t chunk = static_cast<uint32_t>(std::min<uint64_t>(room, p.queued - p.written));
      const int sent = p.tx->Send(Create<Packet>(chunk));
      if (sent <= 0) return;
      p.written += static_cast<uint64_t>(sent);
    }
  }

  void receive(Pair& p, Ptr<Socket> sock) {
    while (Ptr<Packet> pkt = sock->Recv()) {
      if (pkt->GetSize() == 0) break;
      p.received += pkt->GetSize();
    }
    while (!p.inflight.empty() && p.received >= p.inflight.front().second) {
      const int64_t id = p.inflight.front().first;
      p.inflight.pop_front();
      runner_->arrived(id);
    }
  }

  void on_tx(Ptr<const Packet> pkt) { wire_bytes_ += pkt->GetSize(); }
  void on_drop(Ptr<const Packet>) { ++drops_; }

  const Spec& spec_;
  Settings set_;
  Runner* runner_ = nullptr;
  NodeContainer hosts_, router_;
  std::vector<Ipv4Address> addr_;
  std::map<uint32_t, int> by_addr_;
  std::map<std::pair<int, int>, Pair> pairs_;  // elements never move
  std::vector<Ptr<Socket>> listeners_;
  size_t connected_ = 0, accepted_ = 0;
  std::function<void()> ready_;
  uint64_t wire_bytes_ = 0, drops_ = 0;
};

uint64_t to_u64(const std::string& key, const std::string& v, uint64_t lo, uint64_t hi) {
  try {
    size_t used = 0;
    const unsigned long long x = std::stoull(v, &used);
    if (used == v.size() && x >= lo && x <= hi) return x;
  } catch (const std::exception&) {
  }
  throw InputError("--" + key + ": not an integer in [" + std::to_string(lo) + ", " +
                   std::to_string(hi) + "]");
}

int run(int argc, char** argv) {
  const std::string usage =
      "usage: rv-ns3-ref PATTERN.json [-o OUT.json] [--summary] [--cc bbr|cubic]\n"
      "                  [--queue-packets N] [--max-sim-s S] [--sndbuf BYTES] [--rcvbuf BYTES]\n";
  const Args args =
      parse_args(argc, argv, {"cc", "queue-packets", "max-sim-s", "sndbuf", "rcvbuf"}, usage);
  Settings set;
  set.cc = args.option("cc", "cubic");
  if (set.cc != "bbr" && set.cc != "cubic") throw InputError("--cc: not one of bbr, cubic");
  set.queue_packets = static_cast<uint32_t>(
      to_u64("queue-packets", args.option("queue-packets", "10000"), 1, 100000000));
  set.max_sim_s =
      static_cast<double>(to_u64("max-sim-s", args.option("max-sim-s", "36000"), 1, 100000000));
  set.sndbuf =
      static_cast<uint32_t>(to_u64("sndbuf", args.option("sndbuf", "4194304"), 4096, 1u << 30));
  set.rcvbuf =
      static_cast<uint32_t>(to_u64("rcvbuf", args.option("rcvbuf", "33554432"), 4096, 1u << 30));
  const Spec spec = load_spec(args.input);

  const auto wall0 = std::chrono::steady_clock::now();
  Ns3Net net(spec, set);
  Runner runner(spec, net);
  net.set_runner(&runner);
  double t0 = -1;
  net.connect_all([&] {
    t0 = Simulator::Now().GetSeconds();
    runner.start();
  });
  // Stops as soon as the pattern is done (TCP's timers would otherwise run on).
  std::function<void()> poll;
  poll = [&] {
    if (runner.done()) {
      Simulator::Stop();
      return;
    }
    Simulator::Schedule(MilliSeconds(100), [&] { poll(); });
  };
  Simulator::Schedule(MilliSeconds(100), [&] { poll(); });
  Simulator::Stop(Seconds(set.max_sim_s));
  Simulator::Run();
  const double end = Simulator::Now().GetSeconds();
  const double wall =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - wall0).count();

  nlohmann::json out = runner.result(args.summary);
  out["tool"] = "rv-ns3-ref";
  out["model"] = "ns-3 " + set.cc;
  out["settings"] = {{"congestion_control", set.cc},
                     {"segment_size", 1448},
                     {"sndbuf", set.sndbuf},
                     {"rcvbuf", set.rcvbuf},
                     {"initial_cwnd", 10},
                     {"delayed_ack", "2 segments or 40 ms"},
                     {"min_rto_s", 0.2},
                     {"sack", true},
                     {"timestamps", true},
                     {"pacing", set.cc == "bbr"},
                     {"queue_packets", set.queue_packets},
                     {"connections", net.connections()}};
  out["connect_s"] = t0;
  out["sim_end_s"] = end - std::max(t0, 0.0);
  out["wire_bytes"] = net.wire_bytes();
  out["drops"] = net.drops();
  out["wall_s"] = wall;
  out["traffic_bytes_per_wall_s"] =
      wall > 0 ? static_cast<double>(runner.traffic_bytes()) / wall : 0;
  write_json(out, args.output);
  Simulator::Destroy();
  if (t0 < 0 || !runner.done() || runner.undelivered() > 0) {
    std::cerr << "error: " << runner.undelivered() << " of " << runner.messages().size()
              << " messages did not arrive" << (t0 < 0 ? " (the connections were not all up)" : "")
              << (runner.done() ? "" : "; the pattern did not finish") << " by simulated time "
              << end << " s\n";
    return 1;
  }
  return 0;
}

}  // namespace
}  // namespace netref

int main(int argc, char** argv) { return netref::tool_main(argc, argv, netref::run); }
