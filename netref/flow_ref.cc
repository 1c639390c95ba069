// rv-flow-ref: a pattern (netref/pattern.h) under the project's flow models in SimGrid.
//
// The star and the model are the project's (sim/platform.cc, sim/sim_network.h), re-created here
// because the project's own code needs LibTorch: per node a host, an uplink and a downlink (SHARED
// links, each with the node's one-way latency), routed a -> b as up_a, down_b; the engine set as
// configure_network() sets it (tcp: CM02, no cross-traffic, bandwidth x 0.962; ideal: the same
// with factor 1; lv08: SimGrid's LV08 with bandwidth x 0.97), each transfer's rate bounded by TCP's
// window over its round trip as configure_network() bounds it (TCP-gamma = window / bandwidth
// factor: tcp 2.79 MB, lv08 4 MiB); SimGrid charges
// 1e-6 of each route's latency and this tool the rest, once per stream: each ordered pair is one
// connection whose message sent at t starts its bytes at max(t + L, the end of the pair's previous
// message), L = latency_factor x (lat_a + lat_b) less SimGrid's sliver (latency factor 13.01 for
// lv08, 1 otherwise). A message arrives when its transfer ends.
//
// Usage: rv-flow-ref PATTERN.json [-o OUT.json] [--summary] [--model tcp|lv08|ideal]
// Exit status: 0 done, 1 a message did not arrive, 2 bad input.
#include <chrono>
#include <cstdio>
#include <deque>
#include <iostream>
#include <simgrid/kernel/Timer.hpp>
#include <simgrid/s4u.hpp>
#include <simgrid/simix.hpp>
#include <unordered_map>

#include "netref/pattern.h"

namespace sg4 = simgrid::s4u;

namespace netref {
namespace {

constexpr double kSimGridLatencyFactor = 1e-6;  // sim/platform.h
constexpr double kTcpBandwidthFactor = 0.962;   // core/scenario/scenario.h
constexpr double kTcpWindowBytes = 2.79e6;      // core/scenario/scenario.h

// net_factors() of core/scenario/scenario.cc: the latency and bandwidth factors and TCP's window
// (bytes; 0: none), a flow's rate at most window / (2 x its route's latency as given).
struct Factors {
  double latency = 1, bandwidth = 1, window = 0;
};

Factors factors_of(const std::string& model) {
  if (model == "tcp") return {1.0, kTcpBandwidthFactor, kTcpWindowBytes};
  if (model == "lv08") return {13.01, 0.97, 4194304.0};
  if (model == "ideal") return {1.0, 1.0, 0.0};
  throw InputError("--model: not one of tcp, lv08, ideal");
}

class FlowNet : public Net {
 public:
  FlowNet(std::vector<sg4::Host*> hosts, const Spec& spec, Factors f)
      : hosts_(std::move(hosts)), spec_(spec), f_(f) {
    sg4::Activity::on_completion_cb(&FlowNet::on_completion);
  }
  void set_runner(Runner* r) { runner_ = r; }
  double now() const override { return sg4::Engine::get_clock(); }
  void send(int src, int dst, uint64_t bytes, int64_t id) override {
    Pair& p = pairs_[static_cast<int64_t>(src) * static_cast<int64_t>(hosts_.size()) + dst];
    if (p.net == nullptr) {
      p.net = this;
      p.src = src;
      p.dst = dst;
      const double lat = spec_.nodes[static_cast<size_t>(src)].latency +
                         spec_.nodes[static_cast<size_t>(dst)].latency;
      p.delay = std::max(0.0, f_.latency * lat - kSimGridLatencyFactor * lat);
    }
    const bool idle = p.queue.empty() && p.timer == nullptr && !p.comm;
    p.queue.push_back({now() + p.delay, bytes, id});
    if (idle) next(p);
  }
  void after(double seconds, std::function<void()> fn) override {
    simgrid::kernel::timer::Timer::set(now() + seconds, std::move(fn));
  }

 private:
  struct Queued {
    double starts = 0;
    uint64_t bytes = 0;
    int64_t id = 0;
  };
  struct Pair {
    FlowNet* net = nullptr;
    int src = -1, dst = -1;
    double delay = 0;
    std::deque<Queued> queue;
    simgrid::kernel::timer::Timer* timer = nullptr;
    sg4::CommPtr comm, done;
    int64_t carried = -1;
  };
  void next(Pair& p) {
    if (p.queue.empty()) return;
    if (p.queue.front().starts <= now()) {
      start(p);
      return;
    }
    p.timer = simgrid::kernel::timer::Timer::set(p.queue.front().starts, [&p] {
      p.timer = nullptr;
      p.net->start(p);
    });
  }
  void start(Pair& p) {
    const Queued q = p.queue.front();
    p.queue.pop_front();
    p.carried = q.id;
    p.comm = sg4::Comm::sendto_init(hosts_[static_cast<size_t>(p.src)],
                                    hosts_[static_cast<size_t>(p.dst)]);
    p.comm->set_payload_size(static_cast<double>(q.bytes));
    p.comm->set_data(&p);
    p.comm->start();
  }
  static void on_completion(const sg4::Activity& a) {
    auto* p = a.get_data<Pair>();
    if (p == nullptr || p->comm.get() != &a) return;
    if (a.get_state() != sg4::Activity::State::FINISHED) return;
    p->done = std::move(p->comm);
    p->done->set_data(nullptr);
    const int64_t id = p->carried;
    p->carried = -1;
    p->net->runner_->arrived(id);
    p->net->next(*p);
  }

  std::vector<sg4::Host*> hosts_;
  const Spec& spec_;
  Factors f_;
  Runner* runner_ = nullptr;
  std::unordered_map<int64_t, Pair> pairs_;  // elements never move
};

int run(int argc, char** argv) {
  const std::string usage =
      "usage: rv-flow-ref PATTERN.json [-o OUT.json] [--summary] [--model tcp|lv08|ideal]\n";
  const Args args = parse_args(argc, argv, {"model"}, usage);
  const std::string model = args.option("model", "tcp");
  const Factors f = factors_of(model);
  const Spec spec = load_spec(args.input);

  int sg_argc = 2;
  std::string log = "--log=root.thresh:critical";
  char* sg_argv[] = {argv[0], log.data(), nullptr};
  sg4::Engine engine(&sg_argc, sg_argv);
  // configure_network() (sim/platform.cc)
  if (model == "tcp" || model == "ideal") {
    engine.set_config("network/model:CM02");
    engine.set_config("network/crosstraffic:0");
  }
  char buf[96];
  std::snprintf(buf, sizeof buf, "network/TCP-gamma:%.17g", f.window / f.bandwidth);
  engine.set_config(buf);
  std::snprintf(buf, sizeof buf, "network/latency-factor:%.17g", kSimGridLatencyFactor);
  engine.set_config(buf);
  std::snprintf(buf, sizeof buf, "network/bandwidth-factor:%.17g", f.bandwidth);
  engine.set_config(buf);

  // The star (sim/platform.cc, add_node).
  auto* zone = sg4::create_star_zone("pool");
  std::vector<sg4::Host*> hosts;
  for (size_t r = 0; r < spec.nodes.size(); ++r) {
    const std::string name = "n" + std::to_string(r);
    sg4::Host* h = zone->create_host(name, 1e9);
    const NodeSpec& n = spec.nodes[r];
    sg4::Link* up = zone->create_link(name + "-up", n.up_bps)->set_latency(n.latency)->seal();
    sg4::Link* down = zone->create_link(name + "-down", n.down_bps)->set_latency(n.latency)->seal();
    zone->add_route(h->get_netpoint(), nullptr, nullptr, nullptr, {sg4::LinkInRoute(up)}, false);
    zone->add_route(nullptr, h->get_netpoint(), nullptr, nullptr, {sg4::LinkInRoute(down)}, false);
    hosts.push_back(h);
  }
  zone->seal();

  FlowNet net(hosts, spec, f);
  Runner runner(spec, net);
  net.set_runner(&runner);
  const auto wall0 = std::chrono::steady_clock::now();
  sg4::Actor::create("start", hosts[0], [&runner] {
    simgrid::kernel::actor::simcall_answered([&runner] { runner.start(); });
  });
  engine.run();
  const double wall =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - wall0).count();

  nlohmann::json out = runner.result(args.summary);
  out["tool"] = "rv-flow-ref";
  out["model"] = model;
  out["settings"] = {{"bandwidth_factor", f.bandwidth},
                     {"latency_factor", f.latency},
                     {"simgrid_model", model == "lv08" ? "LV08" : "CM02"}};
  out["sim_end_s"] = engine.get_clock();
  out["wall_s"] = wall;
  write_json(out, args.output);
  if (!runner.done() || runner.undelivered() > 0) {
    std::cerr << "error: " << runner.undelivered() << " of " << runner.messages().size()
              << " messages did not arrive (pattern " << (runner.done() ? "" : "not ")
              << "finished)\n";
    return 1;
  }
  return 0;
}

}  // namespace
}  // namespace netref

int main(int argc, char** argv) { return netref::tool_main(argc, argv, netref::run); }
