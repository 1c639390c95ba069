#include "planner/cost.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <limits>
#include <queue>

#include "algo/registry.h"
#include "core/env.h"
#include "core/error.h"
#include "core/model/cost_model.h"
#include "planner/comm_graph.h"

namespace rv {

CostModel::CostModel(const Scenario& scenario, const ModelDesc& model)
    : model_(&model),
      algorithm_(&algorithm_of(scenario)),
      allreduce_(&allreduce_of(scenario)),
      training_(effective_training(scenario)),
      averaged_rows_(averaged_rows(*algorithm_, training_)),
      target_batch_(algorithm_->hooks.target_batch != nullptr
                        ? algorithm_->hooks.target_batch(training_)
                        : -1),
      piece_bytes_(ring_piece_bytes(training_)),
      batch_(scenario.data.batch_size),
      factors_(net_factors(scenario.network)),
      paced_(scenario.network.model == NetworkModel::kTcp) {
  const int n = scenario.node_count();
  pool_.reserve(n);
  int group = 0;
  for (const auto& g : scenario.devices) {
    for (int i = 0; i < g.count; ++i)
      pool_.push_back({g.flops_per_s(), g.ram_bytes(), g.up_bytes_per_s(), g.down_bytes_per_s(),
                       g.latency_s(), g.compute_profile(), group, g.name});
    ++group;
  }
  if (scenario.network.topology == Topology::kRegions) {
    NetworkLinks links = links_of(scenario);
    regions_ = links.regions;
    region_names_ = std::move(links.region_names);
    between_ = std::move(links.between);
    for (int r = 0; r < n; ++r)
      pool_[static_cast<size_t>(r)].region = links.region[static_cast<size_t>(r)];
  }
  const size_t ranges = static_cast<size_t>(layers() + 1) * static_cast<size_t>(layers() + 1);
  times_.assign(scenario.devices.size(), std::vector<Times>(ranges));
}

const CostModel::Times& CostModel::times(int node, int l, int r) const {
  const PoolNode& p = pool_[static_cast<size_t>(node)];
  const size_t range = static_cast<size_t>(l * (layers() + 1) + r);
  Times& t = times_[static_cast<size_t>(p.group)][range];
  if (t.compute < 0) {
    auto it = work_.find(range);
    if (it == work_.end())
      it = work_.emplace(range, stage_work(*model_, l, r, training_, batch_)).first;
    const StageWork& w = it->second;
    // A stage before the last runs the next micro-batch's forward before a micro-batch's backward
    // at least (stage_pass_time's `ahead`). stage_compute_time() is the pass and then the update,
    // summed in that order: the pass is its first term, to the last bit.
    t.pass = stage_pass_time(w, p.compute, steady_ahead(r == layers()));
    t.compute = t.pass + time_of(w.update, p.compute);
  }
  return t;
}

int64_t CostModel::in_flight(int stages) const {
  return rv::in_flight(*algorithm_, training_, stages);
}

double CostModel::boundary_bytes(int b) const {
  if (b <= 0 || b >= layers()) return 0.0;
  return static_cast<double>(kFloatBytes * batch_ * model_->profile[b - 1].out_elems +
                             kHeaderBytes);
}

double CostModel::memory(int l, int r, int64_t in_flight) const {
  if (in_flight != memory_in_flight_) {
    memory_last_ = &memory_[in_flight];  // unordered_map: references stay valid as it grows
    memory_in_flight_ = in_flight;
  }
  std::vector<double>& m = *memory_last_;
  const size_t side = static_cast<size_t>(layers() + 1);
  if (m.empty()) m.assign(side * side, -1.0);
  double& v = m[static_cast<size_t>(l) * side + static_cast<size_t>(r)];
  if (v < 0)
    v = static_cast<double>(stage_cost(*model_, l, r, training_, batch_, in_flight).memory);
  return v;
}

bool CostModel::fits(int node, int l, int r, int64_t in_flight) const {
  return memory(l, r, in_flight) <= pool_[node].ram;
}

double CostModel::compute_time(int node, int l, int r) const { return times(node, l, r).compute; }

double CostModel::pass_time(int node, int l, int r) const { return times(node, l, r).pass; }

double CostModel::stage_time(int node, int l, int r) const {
  const PoolNode& p = pool_[node];
  const double bytes = boundary_bytes(l) + boundary_bytes(r);
  const double bw = factors_.bandwidth;
  return std::max({compute_time(node, l, r), bytes / (p.up * bw), bytes / (p.down * bw)});
}

std::string CostModel::region_link_name(int k) const {
  return "the link from region " + region_names_[static_cast<size_t>(k / regions_)] +
         " to region " + region_names_[static_cast<size_t>(k % regions_)];
}

double CostModel::path_latency(int a, int b) const {
  const int k = region_link(a, b);
  if (k < 0) return (pool_[a].latency + pool_[b].latency) * factors_.latency;
  return (pool_[a].latency + pool_[b].latency + between_[static_cast<size_t>(k)].latency) *
         factors_.latency;
}

double CostModel::path_bandwidth(int a, int b) const {
  double bw = std::min(pool_[a].up, pool_[b].down) * factors_.bandwidth;
  double raw_latency = pool_[a].latency + pool_[b].latency;
  const int k = region_link(a, b);
  if (k >= 0) {
    bw = std::min(bw, region_rate(k));
    raw_latency += between_[static_cast<size_t>(k)].latency;
  }
  if (factors_.tcp_gamma > 0 && raw_latency > 0)
    bw = std::min(bw, factors_.tcp_gamma / (2.0 * raw_latency));
  return bw;
}

double CostModel::warm_floor(int a, int b, double bytes, int64_t in_flight) const {
  if (!paced_) return 0;
  double raw_latency = pool_[a].latency + pool_[b].latency;
  const int k = region_link(a, b);
  if (k >= 0) raw_latency += between_[static_cast<size_t>(k)].latency;
  const double rtt = 2 * raw_latency;
  const double together = static_cast<double>(std::max<int64_t>(in_flight, 1));
  if (rtt <= 0 || together * bytes / path_bandwidth(a, b) > kFilledRoundTrips * rtt) return 0;
  return rtt / (kBbrHighGain - 1) / together;
}

template <class F>
void CostModel::visit_stations(const std::vector<int>& nodes, const std::vector<int>& cuts,
                               F&& f) const {
  const int k = static_cast<int>(nodes.size());
  const double bw = factors_.bandwidth;
  const int64_t together = in_flight(k);
  using Kind = Station::Kind;
  for (int s = 0; s < k; ++s) {
    const int n = nodes[s];
    const double bytes = boundary_bytes(cuts[s]) + boundary_bytes(cuts[s + 1]);
    f(Station{Kind::kCompute, s, n, -1, cuts[s], cuts[s + 1],
              compute_time(n, cuts[s], cuts[s + 1])});
    f(Station{Kind::kUplink, s, n, -1, 0, 0, bytes / (pool_[n].up * bw)});
    f(Station{Kind::kDownlink, s, n, -1, 0, 0, bytes / (pool_[n].down * bw)});
    if (s + 1 < k) {
      const double a = boundary_bytes(cuts[s + 1]);
      for (auto [x, y] : {std::pair{n, nodes[s + 1]}, std::pair{nodes[s + 1], n}}) {
        const int k = region_link(x, y);
        double rate = std::min(pool_[x].up, pool_[y].down) * bw;
        if (k >= 0) rate = std::min(rate, region_rate(k));
        const double link = a / rate;
        // >= link when a window cap or the warm floor binds
        const double capped = a / path_bandwidth(x, y), floor = warm_floor(x, y, a, together);
        f(Station{Kind::kFlow, s, x, y, 0, 0, std::max(capped, floor), link, floor > capped});
        if (k >= 0) f(Station{Kind::kRegionLink, s, x, y, k, 0, a / region_rate(k), link});
      }
    }
  }
}

size_t CostModel::region_slots(const std::vector<int>& nodes, std::vector<int>& slot) const {
  size_t count = 3 * nodes.size();
  if (regions_ > 1) {
    slot.assign(between_.size(), -1);
    for (size_t s = 0; s + 1 < nodes.size(); ++s)
      for (int k : {region_link(nodes[s], nodes[s + 1]), region_link(nodes[s + 1], nodes[s])})
        if (k >= 0 && slot[static_cast<size_t>(k)] < 0)
          slot[static_cast<size_t>(k)] = static_cast<int>(count++);
  }
  return count;
}

size_t CostModel::flow_station(const Station& flow, const std::vector<int>& nodes,
                               const std::vector<int>& slot) const {
  const bool forward = flow.node == nodes[static_cast<size_t>(flow.stage)];
  const int from = forward ? flow.stage : flow.stage + 1,
            to = forward ? flow.stage + 1 : flow.stage;
  const int k = region_link(flow.node, flow.peer);
  if (k >= 0 &&
      region_rate(k) < std::min(pool_[flow.node].up, pool_[flow.peer].down) * factors_.bandwidth)
    return static_cast<size_t>(slot[static_cast<size_t>(k)]);
  if (pool_[flow.node].up <= pool_[flow.peer].down)
    return station_index(from, Station::Kind::kUplink);
  return station_index(to, Station::Kind::kDownlink);
}

CostModel::Network CostModel::closed_network(const std::vector<int>& nodes,
                                             const std::vector<int>& cuts) const {
  // Stations of the closed network one micro-batch cycles through: each node's compute, uplink
  // and downlink (service demand per micro-batch), and pure delays (latencies, window caps).
  // visit_stations gives each stage's compute, uplink and downlink in that order: station
  // `stage * 3 + kind` in the vectors below.
  thread_local std::vector<int> slot;
  const size_t count = region_slots(nodes, slot);
  // The planners ask this millions of times: the vectors below reuse this thread's buffers.
  thread_local std::vector<double> demand, own, residual_share;
  demand.assign(count, 0.0);
  // Of each station's demand, what a micro-batch waits for when it finds the station idle: a
  // compute's whole time; of a link, the transfers for which it is the slower of the two links
  // (a transfer crosses the sender's uplink and the receiver's downlink at once, cut-through).
  own.assign(count, 0.0);
  // Of the work in service at a station, the share an arrival does not wait for: 0.5 where one
  // micro-batch is served at a time for a fixed time (compute; a link of one connection, whose
  // messages go one after the other), 0 under processor sharing; a middle stage's links carry two
  // connections (activations on, gradients back), each FIFO, sharing the rate: half of what an
  // arrival finds is its own connection's (0.5 of it not waited for), half the other's (shared).
  residual_share.assign(count, 0.5);
  const int last = static_cast<int>(nodes.size()) - 1;
  Network net{demand, own, residual_share};
  net.fill.in_flight = in_flight(static_cast<int>(nodes.size()));
  double& rtt = net.fill.round_trip;
  double& bottleneck = net.fill.bottleneck;
  visit_stations(nodes, cuts, [&](const Station& st) {
    bottleneck = std::max(bottleneck, st.seconds);
    if (st.kind == Station::Kind::kRegionLink) {
      // Every flow of the pipeline that crosses the link shares it.
      double& d = demand[static_cast<size_t>(slot[static_cast<size_t>(st.begin)])];
      d += st.seconds;
      bottleneck = std::max(bottleneck, d);
      return;
    }
    if (st.kind == Station::Kind::kFlow) {
      net.delay += path_latency(st.node, st.peer) + (st.seconds - st.link);
      rtt += path_latency(st.node, st.peer) + st.seconds;
      own[flow_station(st, nodes, slot)] += st.link;
      return;
    }
    const size_t i = station_index(st.stage, st.kind);
    demand[i] = st.seconds;
    if (st.kind == Station::Kind::kCompute) {
      own[i] = st.seconds;
      rtt += pass_time(st.node, st.begin, st.end);
    } else if (st.stage != 0 && st.stage != last) {
      residual_share[i] = 0.25;
    }
  });
  return net;
}

double CostModel::mean_value_period(const Network& net) {
  // An arrival waits for the work queued at a station, less the share in service it does not
  // wait for, then for its own service where the station is on its critical path. Tends to
  // 1 / bottleneck when enough micro-batches are in flight.
  const std::vector<double>& demand = net.demand;
  thread_local std::vector<double> queue, r;
  queue.assign(demand.size(), 0.0);
  r.assign(demand.size(), 0.0);
  double x = 0;
  for (int64_t m = 1; m <= net.fill.in_flight; ++m) {
    double r_total = net.delay;
    for (size_t i = 0; i < demand.size(); ++i) {
      const double residual = net.residual_share[i] * std::min(1.0, x * demand[i]);
      r[i] = net.own[i] + demand[i] * std::max(0.0, queue[i] - residual);
      r_total += r[i];
    }
    x = static_cast<double>(m) / r_total;
    for (size_t i = 0; i < demand.size(); ++i) queue[i] = x * r[i];
  }
  return x > 0 ? 1.0 / x : 0.0;
}

double CostModel::cluster_period(const std::vector<int>& nodes,
                                 const std::vector<int>& cuts) const {
  RV_CHECK(cuts.size() == nodes.size() + 1, "cluster_period: cuts and nodes differ");
  const Network net = closed_network(nodes, cuts);
  const Fill& f = net.fill;
  if (algorithm_->traits.schedule == Schedule::kFlush) {
    // A step: one micro-batch's round trip, plus m - 1 more through the slowest stage, then the
    // flush; with equal stages this is (m + p - 1)(tf + tb).
    const double m = static_cast<double>(training_.micro_batches);
    return (f.round_trip + (m - 1) * f.bottleneck) / m;
  }
  // The closed network with max_in_flight micro-batches.
  return std::max(f.bottleneck, mean_value_period(net));
}

CostModel::Fill CostModel::fill(const std::vector<int>& nodes, const std::vector<int>& cuts) const {
  return closed_network(nodes, cuts).fill;
}

double CostModel::drained_time(const Fill& f, double period, int64_t e) {
  if (e <= 0) return 0;
  const int64_t p = std::max<int64_t>(f.in_flight, 1);
  const double waves = static_cast<double>((e + p - 1) / p),
               within = static_cast<double>((e - 1) % p);
  const double n = static_cast<double>(e);
  return std::max({n * period, waves * f.round_trip + within * f.bottleneck,
                   f.round_trip + (n - 1) * f.bottleneck});
}

bool CostModel::drains(int clusters) const {
  return clusters > 1 && !target_batch() && algorithm_->traits.exchange == Exchange::kParameters &&
         !(training_.averaging == Averaging::kOverlapped &&
           algorithm_->traits.overlapped_averaging);
}

std::vector<std::pair<int, double>> CostModel::region_crossings(
    const std::vector<int>& nodes, const std::vector<int>& cuts) const {
  std::vector<std::pair<int, double>> out;
  for (size_t s = 0; s + 1 < nodes.size(); ++s) {
    const double a = boundary_bytes(cuts[s + 1]);
    for (int k : {region_link(nodes[s], nodes[s + 1]), region_link(nodes[s + 1], nodes[s])})
      if (k >= 0) out.emplace_back(k, a);
  }
  return out;
}

std::vector<double> CostModel::shared_periods(const std::vector<const std::vector<int>*>& nodes,
                                              const std::vector<const std::vector<int>*>& cuts,
                                              std::vector<double> periods) const {
  if (regions_ <= 1) return periods;
  RV_CHECK(nodes.size() == periods.size() && cuts.size() == periods.size(),
           "shared_periods: one period per pipeline");
  // Bytes per micro-batch each pipeline sends over each region link (activations on, gradients
  // back), as visit_stations charges them.
  std::vector<std::vector<std::pair<int, double>>> crossing(periods.size());
  for (size_t c = 0; c < periods.size(); ++c) crossing[c] = region_crossings(*nodes[c], *cuts[c]);
  std::vector<double> load(between_.size());
  for (int pass = 0; pass < 16; ++pass) {
    std::fill(load.begin(), load.end(), 0.0);
    for (size_t c = 0; c < periods.size(); ++c)
      for (const auto& [k, bytes] : crossing[c]) load[static_cast<size_t>(k)] += bytes / periods[c];
    bool over = false;
    std::vector<double> stretch(periods.size(), 1.0);
    for (size_t c = 0; c < periods.size(); ++c)
      for (const auto& [k, bytes] : crossing[c]) {
        const double f = load[static_cast<size_t>(k)] / region_rate(k);
        if (f > 1 + 1e-9) {
          stretch[c] = std::max(stretch[c], f);
          over = true;
        }
      }
    if (!over) break;
    for (size_t c = 0; c < periods.size(); ++c) periods[c] *= stretch[c];
  }
  return periods;
}

namespace {

// A planned cluster's pipeline as the cost model takes it: its nodes in order and its cuts (one
// more than its stages).
struct Pipeline {
  std::vector<int> nodes, cuts;
};

Pipeline pipeline_of(const ClusterPlan& c) {
  Pipeline p;
  p.cuts.push_back(c.stages.empty() ? 0 : c.stages.front().layer_begin);
  for (const StagePlan& s : c.stages) {
    p.nodes.push_back(s.node);
    p.cuts.push_back(s.layer_end);
  }
  return p;
}

// The longest of a ring's chains of 2(C - 1) consecutive hops, hop i (owner i to owner i + 1)
// costing cost[i] (c hops): an owner passes each step's segment on once it has arrived, so the last
// step ends one such chain after the first began (a slow or distant hop delays the steps that cross
// it, not every step).
double longest_chain(const double* cost, size_t c) {
  const size_t steps = 2 * (c - 1);
  double window = 0;
  for (size_t t = 0; t < steps; ++t) window += cost[t % c];
  double best = window;
  for (size_t s = 1; s < c; ++s) {
    window += cost[(s - 1 + steps) % c] - cost[s - 1];
    best = std::max(best, window);
  }
  return best;
}

// A ring all-reduce's 2(C - 1) steps, each `round` seconds on its busiest link: without pieces,
// `chain` (the round's longest chain of steps, CostModel::averaging_time); with segments in
// `pieces` pieces that move on independently (training.ring_piece_mb), either the busiest link
// never waits (a piece is back before the link has sent the others), and the steps' bytes follow
// each other with one `latency` (the longest hop's) at the end, or each piece's steps wait for
// their latencies (`chain_latency`: the longest chain of hop latencies), the last piece (P - 1)/P
// of a round behind the first.
double ring_steps_time(int c, double chain, double chain_latency, double latency, double round,
                       int64_t pieces) {
  if (pieces <= 1) return chain;
  const double p = static_cast<double>(pieces);
  return std::max(2.0 * (c - 1) * round + latency,
                  chain_latency + 2.0 * (c - 1) * round / p + (p - 1) * round / p);
}

}  // namespace

const CostModel::RingHops& CostModel::ring_hops(const std::vector<Ring>& rings, int c) const {
  // Every round, each owner sends 1/C of its ring's chunk to the next owner, all rings at once:
  // the averaging flows of the communication graph (comm_graph.h) load every node's links. They
  // are summed here without building the graph (the planners ask this for every individual), in
  // the order the flows arise, which is the order link_load() sums them in (a bidirectional
  // graph's edges iterate in insertion order), so the figures are the same to the last bit.
  // Each averaged element is `rows` floats (the optimizer's state too, where it is averaged).
  // Each ring step is a busy period of its hop's connection, sent once the step before it has
  // arrived: held by the warm floor (warm_floor, one message at a time) where the step does not
  // fill the path.
  thread_local RingHops h;
  h.up.assign(pool_.size(), 0.0);
  h.down.assign(pool_.size(), 0.0);
  h.across.assign(between_.size(), 0.0);
  h.latency.clear();
  h.floors.clear();
  h.link.clear();
  h.hop_latency = h.floor = h.round = 0;
  h.largest = 0;
  const int64_t rows = averaged_rows_;
  for (const Ring& r : rings) {
    const double piece = static_cast<double>(kFloatBytes * rows * (r.end - r.begin)) / c;
    for (int i = 0; i < c; ++i) {
      const int a = r.owners[i], b = r.owners[(i + 1) % c];
      h.up[static_cast<size_t>(a)] += piece;
      h.down[static_cast<size_t>(b)] += piece;
      h.latency.push_back(path_latency(a, b));
      h.floors.push_back(warm_floor(a, b, piece, 1));
      // A link between regions carries every ring step that crosses it, all rings at once.
      h.link.push_back(region_link(a, b));
      if (h.link.back() >= 0) h.across[static_cast<size_t>(h.link.back())] += piece;
      h.hop_latency = std::max(h.hop_latency, h.latency.back());
      h.floor = std::max(h.floor, h.floors.back());
    }
    h.largest = std::max(h.largest, r.end - r.begin);
  }
  for (size_t n = 0; n < pool_.size(); ++n) {
    if (h.up[n] > 0) h.round = std::max(h.round, h.up[n] / (pool_[n].up * factors_.bandwidth));
    if (h.down[n] > 0)
      h.round = std::max(h.round, h.down[n] / (pool_[n].down * factors_.bandwidth));
  }
  for (size_t k = 0; k < h.across.size(); ++k)
    if (h.across[k] > 0)
      h.round = std::max(h.round, h.across[k] / region_rate(static_cast<int>(k)));
  return h;
}

double CostModel::hop_step(const RingHops& hops, size_t h, int a, int b) const {
  const auto from = static_cast<size_t>(a), to = static_cast<size_t>(b);
  double own = std::max(hops.up[from] / (pool_[from].up * factors_.bandwidth),
                        hops.down[to] / (pool_[to].down * factors_.bandwidth));
  if (hops.link[h] >= 0)
    own = std::max(own, hops.across[static_cast<size_t>(hops.link[h])] / region_rate(hops.link[h]));
  return hops.latency[h] + std::max(own, hops.floors[h]);
}

double CostModel::averaging_time(const std::vector<ClusterPlan>& clusters,
                                 const std::vector<Ring>& rings, AveragingParts* parts) const {
  if (parts) *parts = {};
  const int c = static_cast<int>(clusters.size());
  if (c <= 1 || rings.empty()) return 0.0;
  if (allreduce_->topology == AllreduceTopology::kSingleRing) return single_ring_time(clusters);
  const RingHops& h = ring_hops(rings, c);
  const int64_t pieces = ring_pieces(h.largest / c, averaged_rows_, piece_bytes_);
  // The round ends no sooner than the busiest link's 2(C - 1) steps one after the other (and the
  // longest hop once), nor than the longest chain of consecutive steps (hop_step): the other
  // hops' latencies hide behind the busiest link, unless the hops' latencies add up to more.
  const double busiest = 2.0 * (c - 1) * std::max(h.round, h.floor) + h.hop_latency;
  double chain = 0, chain_latency = 0;
  thread_local std::vector<double> step;
  step.resize(static_cast<size_t>(c));
  for (size_t k = 0; k < rings.size(); ++k) {
    const size_t first = k * static_cast<size_t>(c);
    for (int i = 0; i < c; ++i)
      step[static_cast<size_t>(i)] = hop_step(h, first + static_cast<size_t>(i), rings[k].owners[i],
                                              rings[k].owners[(i + 1) % c]);
    chain = std::max(chain, longest_chain(step.data(), step.size()));
    chain_latency = std::max(chain_latency, longest_chain(&h.latency[first], step.size()));
  }
  if (parts) *parts = {h.floor > h.round, busiest, chain};
  chain = std::max(chain, busiest);
  return ring_steps_time(c, chain, chain_latency, h.hop_latency, std::max(h.round, h.floor),
                         pieces);
}

double CostModel::single_ring_time(const std::vector<ClusterPlan>& clusters) const {
  // Each first stage (leader) collects the other stages' state over its down link while they send
  // over their up links, then the leaders run one ring over the whole state S, then the leaders
  // hand the stages their means back (up link to down links). The slowest cluster gates each phase.
  const int c = static_cast<int>(clusters.size());
  const double bw = factors_.bandwidth;
  const int64_t rows = averaged_rows_;
  const double whole =
      kFloatBytes * static_cast<double>(rows * model_->state_offset(model_->layer_count()));
  double collect = 0, hand_back = 0, ring_round = 0, ring_latency = 0;
  // Bytes over each link between regions: members to leaders (collect; the hand-back mirrors it)
  // and one ring step.
  std::vector<double> collected(between_.size(), 0.0), stepped(between_.size(), 0.0);
  for (int k = 0; k < c; ++k) {
    const auto& stages = clusters[k].stages;
    const int leader = stages.front().node;
    double others = 0, lat = 0, member_up = 0, member_down = 0;
    for (size_t s = 1; s < stages.size(); ++s) {
      const double bytes =
          kFloatBytes * static_cast<double>(rows * (model_->state_offset(stages[s].layer_end) -
                                                    model_->state_offset(stages[s].layer_begin)));
      if (bytes <= 0) continue;
      others += bytes;
      if (const int x = region_link(stages[s].node, leader); x >= 0)
        collected[static_cast<size_t>(x)] += bytes;
      lat = std::max(lat, path_latency(stages[s].node, leader));
      member_up = std::max(member_up, bytes / (pool_[stages[s].node].up * bw));
      member_down = std::max(member_down, bytes / (pool_[stages[s].node].down * bw));
    }
    if (others > 0) {
      collect = std::max(collect, lat + std::max(others / (pool_[leader].down * bw), member_up));
      hand_back =
          std::max(hand_back, lat + std::max(others / (pool_[leader].up * bw), member_down));
    }
    const int next = clusters[(k + 1) % c].stages.front().node;
    ring_latency = std::max(ring_latency, path_latency(leader, next));
    ring_round = std::max(ring_round, whole / c / (pool_[leader].up * bw));
    ring_round = std::max(ring_round, whole / c / (pool_[next].down * bw));
    if (const int x = region_link(leader, next); x >= 0)
      stepped[static_cast<size_t>(x)] += whole / c;
  }
  for (size_t x = 0; x < between_.size(); ++x) {
    // The hand-back crosses the reverse links with the same bytes as the collect.
    if (collected[x] > 0) {
      collect = std::max(collect, collected[x] / region_rate(static_cast<int>(x)));
      const size_t back = (x % static_cast<size_t>(regions_)) * static_cast<size_t>(regions_) +
                          x / static_cast<size_t>(regions_);
      hand_back = std::max(hand_back, collected[x] / region_rate(static_cast<int>(back)));
    }
    if (stepped[x] > 0)
      ring_round = std::max(ring_round, stepped[x] / region_rate(static_cast<int>(x)));
  }
  const int64_t pieces =
      ring_pieces(model_->state_offset(model_->layer_count()) / c, rows, piece_bytes_);
  // One ring of the leaders, every step charged the longest hop and the busiest link.
  const double steps = 2.0 * (c - 1);
  return collect +
         ring_steps_time(c, steps * (ring_latency + ring_round), steps * ring_latency, ring_latency,
                         ring_round, pieces) +
         hand_back;
}

TargetRound target_round(const std::vector<double>& periods, int64_t batch, double target) {
  TargetRound r;
  if (periods.empty() || batch <= 0) return r;
  for (double p : periods)
    if (!(p > 0)) return r;
  const double b = static_cast<double>(batch);
  const double need = std::max(1.0, std::ceil(target / b - 1e-9));  // finished micro-batches
  double t = 0;                                                     // when the need-th one finishes
  if (need <= 1e6) {
    using Next = std::pair<double, size_t>;  // (time, cluster)
    std::priority_queue<Next, std::vector<Next>, std::greater<>> next;
    std::vector<double> done(periods.size(), 0);
    for (size_t i = 0; i < periods.size(); ++i) next.push({periods[i], i});
    for (double k = 0; k < need; ++k) {
      const auto [at, i] = next.top();
      next.pop();
      t = at;
      done[i] += 1;
      next.push({(done[i] + 1) * periods[i], i});
    }
  } else {  // a target of millions of micro-batches: the clusters' summed rate is exact enough
    double rate = 0;
    for (double p : periods) rate += 1 / p;
    t = need / rate;
  }
  // Each cluster finishes the micro-batch it is on at t (one it finishes at t is its last), and
  // trains at least one.
  for (double p : periods) {
    const double k = std::max(1.0, std::ceil(t / p - 1e-9));
    r.samples += k * b;
    r.seconds = std::max(r.seconds, k * p);
  }
  return r;
}

TargetRound CostModel::round_of(const std::vector<double>& periods) const {
  const auto clusters = static_cast<int>(periods.size());
  return target_round(periods, batch_,
                      static_cast<double>(target_samples(target_batch_, batch_, clusters)));
}

double CostModel::throughput(const std::vector<double>& periods, double averaging,
                             const std::vector<Fill>& fills) const {
  if (periods.empty()) return 0.0;
  const double slowest = *std::max_element(periods.begin(), periods.end());
  const double c = static_cast<double>(periods.size());
  if (periods.size() > 1 && target_batch()) {
    const TargetRound r = round_of(periods);
    return r.seconds + averaging > 0 ? r.samples / (r.seconds + averaging) : 0.0;
  }
  const double per_exchange = static_cast<double>(micro_batches_per_exchange(static_cast<int>(c)));
  double busy = slowest * per_exchange;  // the micro-batches of one exchange period
  if (drains(static_cast<int>(c))) {
    RV_CHECK(fills.size() == periods.size(), "throughput: a draining plan needs each fill");
    for (size_t i = 0; i < periods.size(); ++i)
      busy = std::max(busy, drained_time(fills[i], periods[i], static_cast<int64_t>(per_exchange)));
  }
  const double per_update = (busy + (periods.size() > 1 ? averaging : 0.0)) / per_exchange;
  return per_update > 0 ? c * batch_ / per_update : 0.0;
}

std::pair<double, double> CostModel::evaluation_times(const std::vector<int>& nodes,
                                                      const std::vector<int>& cuts) const {
  double slowest = 0, fill = 0;
  for (size_t s = 0; s < nodes.size(); ++s) {
    const int n = nodes[s];
    const PoolNode& p = pool_[static_cast<size_t>(n)];
    const double forward = time_of(model_->forward_work(cuts[s], cuts[s + 1], batch_), p.compute);
    const double bw = factors_.bandwidth, out = boundary_bytes(cuts[s + 1]);
    slowest =
        std::max({slowest, forward, out / (p.up * bw), boundary_bytes(cuts[s]) / (p.down * bw)});
    fill += forward;
    if (s + 1 < nodes.size())
      fill += out / path_bandwidth(n, nodes[s + 1]) + path_latency(n, nodes[s + 1]);
  }
  return {slowest, fill};
}

void CostModel::annotate(Plan& plan) const {
  std::vector<double> periods;
  std::vector<Fill> fills;
  std::vector<std::vector<int>> orders, boundaries;
  for (auto& c : plan.clusters) {
    auto [nodes, cuts] = pipeline_of(c);
    const int64_t f = in_flight(static_cast<int>(c.stages.size()));
    for (auto& s : c.stages) {
      s.memory = static_cast<Bytes>(memory(s.layer_begin, s.layer_end, f));
      s.predicted_time = stage_time(s.node, s.layer_begin, s.layer_end);
      s.predicted_compute = compute_time(s.node, s.layer_begin, s.layer_end);
    }
    periods.push_back(cluster_period(nodes, cuts));
    fills.push_back(fill(nodes, cuts));
    orders.push_back(std::move(nodes));
    boundaries.push_back(std::move(cuts));
  }
  std::vector<const std::vector<int>*> order_of, cuts_of;
  for (size_t c = 0; c < orders.size(); ++c) {
    order_of.push_back(&orders[c]);
    cuts_of.push_back(&boundaries[c]);
  }
  periods = shared_periods(order_of, cuts_of, std::move(periods));
  for (size_t c = 0; c < plan.clusters.size(); ++c) {
    ClusterPlan& cl = plan.clusters[c];
    cl.period = periods[c];
    cl.throughput = cl.period > 0 ? batch_ / cl.period : 0.0;
  }
  plan.evaluation_batch_time = plan.evaluation_fill_time = 0;
  for (size_t c = 0; c < orders.size(); ++c) {  // the slowest cluster's
    const auto [batch_time, fill_time] = evaluation_times(orders[c], boundaries[c]);
    if (fill_time + batch_time > plan.evaluation_fill_time + plan.evaluation_batch_time) {
      plan.evaluation_batch_time = batch_time;
      plan.evaluation_fill_time = fill_time;
    }
  }
  plan.rings = plan.clusters.size() > 1 ? make_rings(*model_, plan.clusters) : std::vector<Ring>{};
  plan.averaging_time = averaging_time(plan.clusters, plan.rings);
  plan.throughput = throughput(periods, plan.averaging_time, fills);
}

namespace {

std::string ms_text(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g ms", s * 1e3);
  return buf;
}

std::string mbit_text(double bytes_per_s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.4g Mbit/s", bytes_per_s / kMbpsToBytesPerSecond);
  return buf;
}

}  // namespace

std::string CostModel::station_text(const Station& top) const {
  auto node_name = [&](int n) {
    return "node " + std::to_string(n) + " (" + pool_[static_cast<size_t>(n)].device + ")";
  };
  const PoolNode& p = pool_[static_cast<size_t>(top.node)];
  switch (top.kind) {
    case Station::Kind::kCompute:
      return "the compute of stage " + std::to_string(top.stage) + " (layers " +
             std::to_string(top.begin) + ".." + std::to_string(top.end - 1) + ") on " +
             node_name(top.node);
    case Station::Kind::kUplink:
      return "the uplink of " + node_name(top.node) + " (" + mbit_text(p.up * factors_.bandwidth) +
             ")";
    case Station::Kind::kDownlink:
      return "the downlink of " + node_name(top.node) + " (" +
             mbit_text(p.down * factors_.bandwidth) + ")";
    case Station::Kind::kRegionLink:
      return region_link_name(top.begin) + " (" + mbit_text(region_rate(top.begin)) + ")";
    case Station::Kind::kFlow:
      return "the flow from node " + std::to_string(top.node) + " to node " +
             std::to_string(top.peer) + " (" + mbit_text(path_bandwidth(top.node, top.peer)) +
             (top.floored              ? ", TCP BBR's warm floor over the round trip)"
              : top.seconds > top.link ? ", the TCP window over the latency)"
                                       : ")");
  }
  return "";
}

std::string CostModel::bound_text(const Plan& plan, size_t c, const std::vector<int>& nodes,
                                  const std::vector<int>& cuts, double most,
                                  const std::string& what) const {
  const ClusterPlan& cl = plan.clusters[c];
  const std::string where =
      plan.clusters.size() > 1 ? "cluster " + std::to_string(c) + "'s" : "the";
  const double alone = cluster_period(nodes, cuts);
  std::string shared;  // the region links the cluster crosses, where sharing them slows it
  if (cl.period > 1.05 * alone)
    for (size_t s = 0; s + 1 < nodes.size(); ++s)
      for (int k : {region_link(nodes[s], nodes[s + 1]), region_link(nodes[s + 1], nodes[s])})
        if (k >= 0 && shared.find(region_link_name(k)) == std::string::npos)
          shared += (shared.empty() ? "" : ", ") + region_link_name(k) + " (" +
                    mbit_text(region_rate(k)) + ")";
  if (!shared.empty())
    return where + " pipeline shares " + shared + " with other clusters: " + ms_text(cl.period) +
           " per micro-batch, " + ms_text(alone) + " alone";
  if (cl.period > 1.05 * most && algorithm_->traits.schedule == Schedule::kFlush)
    return "bottleneck: " + what + ", " + ms_text(most) +
           " per micro-batch; the flush's fill and drain make " + where + " period " +
           ms_text(cl.period);
  if (cl.period > 1.05 * most)
    return where + " pipeline is bound by its round trip: " + ms_text(cl.period) +
           " per micro-batch with " +
           std::to_string(in_flight(static_cast<int>(cl.stages.size()))) +
           " in flight, more than its slowest station, " + what + " (" + ms_text(most) + ")";
  return "bottleneck: " + what + ", " + ms_text(most) + " per micro-batch of " + where + " " +
         ms_text(cl.period) + " period";
}

double CostModel::averaging_share(const Plan& plan, const ClusterPlan& cl) const {
  const auto clusters = static_cast<int>(plan.clusters.size());
  if (target_batch()) {
    std::vector<double> periods;
    for (const auto& c : plan.clusters) periods.push_back(c.period);
    const double round = round_of(periods).seconds + plan.averaging_time;
    return round > 0 ? plan.averaging_time / round : 0.0;
  }
  const double e = static_cast<double>(micro_batches_per_exchange(clusters));
  double busy = cl.period * e;  // its micro-batches of one exchange period (throughput())
  if (drains(clusters) && !cl.stages.empty()) {
    const Pipeline p = pipeline_of(cl);
    busy = std::max(busy, drained_time(fill(p.nodes, p.cuts), cl.period, static_cast<int64_t>(e)));
  }
  const double round = busy + plan.averaging_time;
  return round > 0 ? plan.averaging_time / round : 0.0;
}

std::string CostModel::explain(const Plan& plan) const {
  if (plan.clusters.empty()) return "no cluster";
  size_t slowest = 0;
  for (size_t c = 1; c < plan.clusters.size(); ++c)
    if (plan.clusters[c].period > plan.clusters[slowest].period) slowest = c;
  const ClusterPlan& cl = plan.clusters[slowest];
  const auto [nodes, cuts] = pipeline_of(cl);
  // The station with the largest demand per micro-batch, as cluster_period sees them.
  Station top{Station::Kind::kCompute};
  double most = -1;
  visit_stations(nodes, cuts, [&](const Station& st) {
    if (st.seconds > most) {
      most = st.seconds;
      top = st;
    }
  });
  std::string line = bound_text(plan, slowest, nodes, cuts, most, station_text(top));
  if (plan.clusters.size() > 1) {
    char buf[96];
    std::snprintf(buf, sizeof buf, "; averaging takes %.0f%% of the time",
                  100.0 * averaging_share(plan, cl));
    line += buf;
  }
  int used = 0;
  for (const auto& c : plan.clusters) used += static_cast<int>(c.stages.size());
  line += "; " + std::to_string(used) + " of " + std::to_string(this->nodes()) + " nodes used";
  return line;
}

namespace {

// "cluster 3", "clusters 0, 2 and 5", "clusters 0, 1, 2, 3, 4, 5 and 10 more"
std::string clusters_text(const std::vector<size_t>& c) {
  constexpr size_t kNamed = 6;
  std::string out = c.size() == 1 ? "cluster " : "clusters ";
  for (size_t i = 0; i < c.size() && i < kNamed; ++i) {
    if (i > 0) out += i + 1 == c.size() ? " and " : ", ";
    out += std::to_string(c[i]);
  }
  if (c.size() > kNamed) out += " and " + std::to_string(c.size() - kNamed) + " more";
  return out;
}

// approximations()' notes on the averaging round: where its two bounds are close (a single-ring
// averaging gives no parts: none), and where TCP BBR's warm floor holds its steps.
void averaging_notes(const CostModel& cost, const Plan& plan, std::vector<std::string>& out) {
  CostModel::AveragingParts parts;
  cost.averaging_time(plan.clusters, plan.rings, &parts);
  const double longer = std::max(parts.busiest, parts.chain),
               shorter = std::min(parts.busiest, parts.chain);
  if (shorter > 0 && longer < 1.2 * shorter)
    out.push_back("the averaging round (" + ms_text(longer) +
                  ") is the longer of two bounds, the busiest link's " +
                  std::to_string(2 * (plan.clusters.size() - 1)) + " steps back to back (" +
                  ms_text(parts.busiest) + ") and the longest chain of consecutive hops (" +
                  ms_text(parts.chain) +
                  "): this close together, the steps' partial overlap that neither counts may "
                  "make it longer");
  if (parts.floored)
    out.push_back(
        "each averaging ring step is held by TCP BBR's warm floor, one message at a time, at "
        "its steady state (a connection whose pace rose above it sends faster, one in slow "
        "start slower: docs/network-model.md)");
}

// approximations()' note on the pipelines that drain before each averaging, where their fill
// makes the micro-batches between two averagings longer than as many steady periods.
void drain_notes(const CostModel& cost, const Plan& plan, const std::vector<Pipeline>& pipes,
                 std::vector<std::string>& out) {
  const auto n = static_cast<int>(plan.clusters.size());
  if (!cost.drains(n)) return;
  const int64_t e = cost.micro_batches_per_exchange(n);
  std::vector<size_t> waves;
  for (size_t c = 0; c < plan.clusters.size(); ++c) {
    const double period = plan.clusters[c].period;
    if (plan.clusters[c].stages.empty() || !(period > 0)) continue;
    if (CostModel::drained_time(cost.fill(pipes[c].nodes, pipes[c].cuts), period, e) >
        1.01 * static_cast<double>(e) * period)
      waves.push_back(c);
  }
  if (!waves.empty())
    out.push_back("the pipelines of " + clusters_text(waves) +
                  " drain before each averaging: their " + std::to_string(e) +
                  " micro-batches between two averagings are charged as waves of in-flight "
                  "micro-batches one round trip apart (CostModel::drained_time), not " +
                  std::to_string(e) + " steady periods");
}

}  // namespace

std::vector<std::string> CostModel::approximations(const Plan& plan) const {
  std::vector<std::string> out;
  const size_t n = plan.clusters.size();
  std::vector<Pipeline> pipes;
  for (const ClusterPlan& c : plan.clusters) pipes.push_back(pipeline_of(c));
  const bool flush = algorithm_->traits.schedule == Schedule::kFlush;
  // Region links that the pipelines of several clusters cross: each pipeline's own flows over it
  // queue in its closed network, but between clusters only the mean load counts (named where it
  // is at least kNoticedLoad of the link's rate: below, the waits it leaves out are small).
  constexpr double kNoticedLoad = 0.1;
  if (regions_ > 1) {
    std::vector<std::vector<size_t>> by(between_.size());
    std::vector<double> load(between_.size(), 0.0);
    for (size_t c = 0; c < n; ++c)
      for (const auto& [k, bytes] : region_crossings(pipes[c].nodes, pipes[c].cuts)) {
        auto& who = by[static_cast<size_t>(k)];
        if (who.empty() || who.back() != c) who.push_back(c);
        if (plan.clusters[c].period > 0)
          load[static_cast<size_t>(k)] += bytes / plan.clusters[c].period;
      }
    for (size_t k = 0; k < by.size(); ++k) {
      const double busy = load[k] / region_rate(static_cast<int>(k));
      if (by[k].size() < 2 || busy < kNoticedLoad) continue;
      char buf[64];
      std::snprintf(buf, sizeof buf, "%.0f%% of its rate", 100.0 * busy);
      out.push_back("queueing on " + region_link_name(static_cast<int>(k)) + " (" +
                    mbit_text(region_rate(static_cast<int>(k))) + "), which the pipelines of " +
                    clusters_text(by[k]) + " cross, modeled by its mean load (" + buf +
                    (busy > 0.999 ? "; each slowed until the link carries what it can)"
                                  : "): their waits for one another on it are not counted"));
    }
  }
  std::vector<size_t> round_trip, floored;
  for (size_t c = 0; c < n; ++c) {
    if (plan.clusters[c].stages.empty()) continue;
    const Network net = closed_network(pipes[c].nodes, pipes[c].cuts);
    if (!flush && mean_value_period(net) > 1.01 * net.fill.bottleneck) round_trip.push_back(c);
    bool held = false;
    visit_stations(pipes[c].nodes, pipes[c].cuts,
                   [&](const Station& st) { held = held || st.floored; });
    if (held) floored.push_back(c);
  }
  if (!round_trip.empty())
    out.push_back("the period of " + clusters_text(round_trip) +
                  " is set by the round trip, with too few micro-batches in flight to keep the "
                  "slowest station busy: by mean-value analysis of the pipeline as a closed "
                  "queueing network, exact for exponentially distributed service times, "
                  "approximate for the fixed ones charged here");
  if (!floored.empty())
    out.push_back("flows between the stages of " + clusters_text(floored) +
                  " are held by TCP BBR's warm floor over the round trip (a law measured on "
                  "loopback: docs/network-model.md)");
  if (n > 1) averaging_notes(*this, plan, out);
  drain_notes(*this, plan, pipes, out);
  return out;
}

std::vector<Ring> make_rings(const ModelDesc& model, const std::vector<ClusterPlan>& clusters) {
  std::vector<int64_t> edges{0, model.state_offset(model.layer_count())};
  for (const auto& c : clusters)
    for (const auto& s : c.stages) edges.push_back(model.state_offset(s.layer_begin));
  std::sort(edges.begin(), edges.end());
  edges.erase(std::unique(edges.begin(), edges.end()), edges.end());
  std::vector<Ring> rings;
  for (size_t k = 0; k + 1 < edges.size(); ++k) {
    Ring r;
    r.begin = edges[k];
    r.end = edges[k + 1];
    for (const auto& c : clusters) {
      int owner = -1;
      for (const auto& s : c.stages)
        if (model.state_offset(s.layer_begin) <= r.begin &&
            r.begin < model.state_offset(s.layer_end))
          owner = s.node;
      RV_CHECK(owner >= 0, "make_rings: a chunk has no owner in a cluster");
      r.owners.push_back(owner);
    }
    rings.push_back(r);
  }
  return rings;
}

}  // namespace rv
