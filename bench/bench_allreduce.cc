// Cross-cluster averaging, measured:
//   sim   the multi-ring all-reduce of C one-node clusters in SimGrid (timing mode) against the
//         alpha-beta model 2(C-1)(latency + S/(C B)) on equal links, its bus bandwidth
//         busbw = (S / t) * 2(C-1)/C as a fraction of B, and, on unequal links, against the bound
//         set by the slowest link of the ring;
//         Pipeline clusters (C clusters of p stages): the multi-ring against the single ring
//         (leaders collect, one ring over the whole model, hand back), both against alpha-beta;
//   real  the same rings over c10d/Gloo point-to-point (GlooTransport's direct channel, as runs
//         without an emulated network; and over its messages) between C processes on 127.0.0.1,
//         segments whole and in pieces of --piece-mb (training.ring_piece_mb), against c10d's own
//         ProcessGroupGloo::allreduce on the same data; and on
//         pipeline clusters, the three averagings a run can select (training.allreduce):
//         multi-ring, single ring and c10d allreduce over the multi-ring's chunks. Both sides
//         work in place on a state made before the timing (the ring is handed it with std::move).
//         The functions compared take turns, in a new shuffled order each round (taking_turns).
//   breakdown  where a ring step's time goes on 2 ranks: a segment's exchange through GlooTransport
//         and through c10d send/recv, and the addition and copy after it.
//
//   bench_allreduce [--part all|sim|real|breakdown] [--reps 9] [--piece-mb 4] [--out FILE]
// (One SimGrid engine per process: each simulated case runs in a forked child.)
#include <ATen/ATen.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <random>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>

#include "algo/averager.h"
#include "algo/ring_averager.h"
#include "bench/bench_common.h"
#include "core/data/dataset.h"
#include "core/error.h"
#include "core/memory/allocator.h"
#include "core/model/model.h"
#include "exec/compute_threads.h"
#include "exec/wall_env.h"
#include "planner/planner.h"
#include "real/gloo_collectives.h"
#include "real/gloo_transport.h"
#include "sim/sim_runner.h"

using namespace rv;
using nlohmann::json;

namespace {

// C one-node clusters, each holding a model of about `bytes` of state; links per node.
struct Case {
  Scenario scenario;
  ModelDesc model;
  Plan plan;
};

Case make_case(int c, double bytes, const std::vector<double>& mbps, double latency_ms) {
  Case k;
  const int64_t hidden = std::max<int64_t>(1, static_cast<int64_t>(bytes / 4 / 2048));
  std::string toml =
      "name = \"allreduce\"\n[model]\nhead = \"linear\"\nkind = \"mlp\"\nhidden = [" +
      std::to_string(hidden) +
      "]\n[data]\nkind = \"synthetic\"\nside = 32\nclasses = 1024\n[training]\nsteps = 1\n"
      "[sim]\nmode = \"timing\"\n[network]\nmodel = \"ideal\"\n[planner]\nmethod = \"manual\"\n";
  for (int i = 0; i < c; ++i) toml += "[[planner.cluster]]\nnodes = [" + std::to_string(i) + "]\n";
  for (int i = 0; i < c; ++i)
    toml += "[[devices]]\nram_gb = 64\nup_mbps = " + std::to_string(mbps[i]) +
            "\ndown_mbps = " + std::to_string(mbps[i]) +
            "\nlatency_ms = " + std::to_string(latency_ms) + "\n";
  k.scenario = parse_scenario(toml, "bench_allreduce");
  k.model = build_model(k.scenario);
  k.plan = make_plan(k.scenario, k.model);
  return k;
}

// C clusters of p stages each (p >= 2), every stage one linear layer of h x h (4h^2 bytes), so
// the state S = p * 4h^2 bytes is split in p equal chunks; links per node alike.
Case make_pipeline_case(int c, int p, int64_t h, double mbps, double latency_ms) {
  Case k;
  std::string hidden;
  for (int i = 0; i < p; ++i) hidden += (i ? ", " : "") + std::to_string(h);
  std::string toml =
      "name = \"allreduce\"\n[model]\nhead = \"linear\"\nkind = \"mlp\"\nhidden = [" + hidden +
      "]\n[data]\nkind = \"synthetic\"\nside = " + std::to_string(static_cast<int>(std::sqrt(h))) +
      "\nclasses = 10\n[training]\nsteps = 1\n[sim]\nmode = \"timing\"\n[network]\nmodel = "
      "\"ideal\"\n"
      "[planner]\nmethod = \"manual\"\n";
  std::string layers = "3";
  for (int s = 1; s + 1 < p; ++s) layers += ", 2";
  layers += ", 3";
  for (int i = 0; i < c; ++i) {
    toml += "[[planner.cluster]]\nnodes = [";
    for (int s = 0; s < p; ++s) toml += (s ? ", " : "") + std::to_string(i * p + s);
    toml += "]\nstage_layers = [" + layers + "]\n";
  }
  toml += "[[devices]]\ncount = " + std::to_string(c * p) +
          "\nram_gb = 64\nup_mbps = " + std::to_string(mbps) +
          "\ndown_mbps = " + std::to_string(mbps) + "\nlatency_ms = " + std::to_string(latency_ms) +
          "\n";
  k.scenario = parse_scenario(toml, "bench_allreduce");
  k.model = build_model(k.scenario);
  k.plan = make_plan(k.scenario, k.model);
  return k;
}

double simulate_average(const Case& k, RingTopology topology = RingTopology::kMulti) {
  double end = 0;
  SimResult r = simulate(
      k.scenario,
      [&] {
        std::vector<int> n(k.plan.nodes);
        std::iota(n.begin(), n.end(), 0);
        return n;
      }(),
      false,
      [&](NodeEnv& env, int node) {
        RingAverager avg(env, k.plan, k.model, node, topology);
        avg.average(
            at::Tensor(), 1, 0, [&] { return env.transport.recv(); },
            [](Message) { throw Error("unexpected message"); });
        env.transport.flush();
        end = std::max(end, env.clock.now());
      });
  return end;
}

json part_sim() {
  json rows = json::array();
  const double latency_ms = 10, mbps = 100;
  for (int c : {2, 4, 8}) {
    for (double mb : {1.0, 64.0, 256.0}) {
      Case k = make_case(c, mb * 1e6, std::vector<double>(c, mbps), latency_ms);
      const double s = 4.0 * k.model.state_offset(k.model.layer_count());
      const double b = mbps * 1e6 / 8;
      const double t = bench::in_child([&] { return simulate_average(k); });
      const double alpha_beta = 2.0 * (c - 1) * (2 * latency_ms * 1e-3 + s / c / b);
      const double busbw = s / t * 2.0 * (c - 1) / c;
      rows.push_back({{"clusters", c},
                      {"state_mb", s / 1e6},
                      {"simulated_s", t},
                      {"alpha_beta_s", alpha_beta},
                      {"error", t / alpha_beta - 1},
                      {"busbw_over_link", busbw / b},
                      {"predicted_s", k.plan.averaging_time}});
      std::fprintf(stderr,
                   "sim equal links C=%d S=%.0f MB: %.3f s, alpha-beta %.3f s, busbw %.3f of B\n",
                   c, s / 1e6, t, alpha_beta, busbw / b);
    }
  }
  // Unequal links: each round waits for the slowest hop; the bound is 2(C-1)(latency + S/C / min
  // B).
  std::mt19937_64 rng(7);
  for (int c : {4, 8}) {
    std::vector<double> mbps;
    for (int i = 0; i < c; ++i)
      mbps.push_back(std::uniform_real_distribution<double>(10, 200)(rng));
    Case k = make_case(c, 64e6, mbps, latency_ms);
    const double s = 4.0 * k.model.state_offset(k.model.layer_count());
    const double slowest = *std::min_element(mbps.begin(), mbps.end()) * 1e6 / 8;
    const double t = bench::in_child([&] { return simulate_average(k); });
    const double bound = 2.0 * (c - 1) * (2 * latency_ms * 1e-3 + s / c / slowest);
    rows.push_back({{"clusters", c},
                    {"state_mb", s / 1e6},
                    {"unequal_links_mbps", mbps},
                    {"simulated_s", t},
                    {"slowest_link_bound_s", bound},
                    {"ratio_to_bound", t / bound},
                    {"predicted_s", k.plan.averaging_time}});
    std::fprintf(stderr, "sim unequal links C=%d: %.3f s, slowest-link bound %.3f s (ratio %.3f)\n",
                 c, t, bound, t / bound);
  }
  return rows;
}

// Pipeline clusters: the multi-ring against the single ring (the leaders collect, one ring over the
// whole model, hand back), on equal links. Multi-ring: 2(C-1)(latency + S/(pCB)); single ring:
// 2(latency + (S - S/p)/B) + 2(C-1)(latency + S/(CB)).
json part_sim_pipelines() {
  json rows = json::array();
  const double latency_ms = 10, mbps = 100, b = mbps * 1e6 / 8, lat = 2 * latency_ms * 1e-3;
  for (int c : {2, 4, 8}) {
    for (int p : {2, 4}) {
      Case k = make_pipeline_case(c, p, 1024, mbps, latency_ms);
      const double s = 4.0 * k.model.state_offset(k.model.layer_count());
      const double multi =
          bench::in_child([&] { return simulate_average(k, RingTopology::kMulti); });
      const double single =
          bench::in_child([&] { return simulate_average(k, RingTopology::kSingle); });
      const double multi_ab = 2.0 * (c - 1) * (lat + s / p / c / b);
      const double single_ab = 2 * (lat + (s - s / p) / b) + 2.0 * (c - 1) * (lat + s / c / b);
      rows.push_back({{"clusters", c},
                      {"stages", p},
                      {"state_mb", s / 1e6},
                      {"multi_ring_s", multi},
                      {"multi_ring_alpha_beta_s", multi_ab},
                      {"single_ring_s", single},
                      {"single_ring_alpha_beta_s", single_ab},
                      {"single_over_multi", single / multi}});
      std::fprintf(stderr,
                   "sim pipelines C=%d p=%d S=%.0f MB: multi-ring %.3f s (alpha-beta %.3f), single "
                   "ring %.3f s "
                   "(alpha-beta %.3f), single/multi %.2f\n",
                   c, p, s / 1e6, multi, multi_ab, single, single_ab, single / multi);
    }
  }
  return rows;
}

// Runs `body` in `world` forked processes, each a rank with a GlooTransport on 127.0.0.1 (one
// compute thread), and returns the `n` figures rank 0's body returns (NaN if a rank failed).
std::vector<double> on_ranks(int world, size_t n,
                             const std::function<std::vector<double>(GlooTransport&, int)>& body) {
  std::vector<double> out(n, std::nan(""));
  const int port = free_loopback_port();
  int fd[2];
  if (pipe(fd) != 0) return out;
  std::vector<pid_t> pids;
  for (int r = 0; r < world; ++r) {
    pid_t pid = fork();
    if (pid == 0) {
      close(fd[0]);
      try {
        set_compute_threads(1);
        GlooOptions o;
        o.secret = "a bench secret of 32 bytes, fixed";
        o.rank = r;
        o.world_size = world;
        o.master_port = port;
        o.timeout = 60;
        o.direct_reverse = true;  // as real runs offering the direct channel
        GlooTransport t(o);
        std::vector<double> v = body(t, r);
        if (r == 0 && v.size() == n &&
            write(fd[1], v.data(), n * sizeof(double)) != static_cast<ssize_t>(n * sizeof(double)))
          _exit(1);
        t.close();
      } catch (const std::exception& e) {
        std::fprintf(stderr, "rank %d: %s\n", r, e.what());
        _exit(1);
      }
      _exit(0);
    }
    pids.push_back(pid);
  }
  close(fd[1]);
  if (read(fd[0], out.data(), n * sizeof(double)) != static_cast<ssize_t>(n * sizeof(double)))
    std::fill(out.begin(), out.end(), std::nan(""));
  close(fd[0]);
  for (pid_t p : pids) waitpid(p, nullptr, 0);
  return out;
}

// This process's use so far, every thread's (Gloo's device thread too): its minor page faults
// (first touches of memory it was given; on a VM they can cost as much as the copy that touches
// them) and its CPU seconds, user and system.
struct Usage {
  double faults, cpu;
};
Usage usage() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return {static_cast<double>(u.ru_minflt),
          static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
              1e-6 * static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec)};
}

// Seconds of each of `fns` (between barriers) in each of `reps` rounds, the functions taking turns
// within a round, so that a burst of load on the host lands on all of them alike rather than on
// one function's block of runs; `prepares[i]` runs before fns[i], untimed. Each round runs them in
// a new order (a shuffle from a fixed seed, the same on every rank): on this project's hosts the
// first function of a round ran 10-30% slower than the same function later in it, so a fixed
// order would measure the order. seconds[i][rep], and faults[i][rep] and cpu[i][rep]: the minor
// page faults and the CPU seconds of this process in the same span (every thread's).
struct Turns {
  std::vector<std::vector<double>> seconds, faults, cpu;
  // The best (least) seconds of fns[i].
  double best(size_t i) const { return *std::min_element(seconds[i].begin(), seconds[i].end()); }
  // The median over rounds of fns[i]'s seconds over fns[base]'s in the same round.
  double median_ratio(size_t i, size_t base) const {
    std::vector<double> ratio;
    for (size_t j = 0; j < seconds[i].size(); ++j)
      ratio.push_back(seconds[i][j] / seconds[base][j]);
    return bench::median(ratio);
  }
};
Turns taking_turns(GlooTransport& t, int reps, const std::vector<std::function<void(int)>>& fns,
                   const std::vector<std::function<void(int)>>& prepares) {
  Turns out{std::vector<std::vector<double>>(fns.size()),
            std::vector<std::vector<double>>(fns.size()),
            std::vector<std::vector<double>>(fns.size())};
  WallClock clock;
  std::mt19937 order_rng(20261129);
  std::vector<size_t> order(fns.size());
  std::iota(order.begin(), order.end(), size_t{0});
  for (int rep = 0; rep < reps; ++rep) {
    std::shuffle(order.begin(), order.end(), order_rng);
    for (size_t i : order) {
      prepares[i](rep);
      t.barrier();
      const Usage u0 = usage();
      const double t0 = clock.now();
      fns[i](rep);
      t.flush();
      t.barrier();
      out.seconds[i].push_back(clock.now() - t0);
      const Usage u1 = usage();
      out.faults[i].push_back(u1.faults - u0.faults);
      out.cpu[i].push_back(u1.cpu - u0.cpu);
    }
  }
  return out;
}

// C one-node clusters: our multi-ring against c10d's allreduce on one group. The ring as real runs
// without an emulated network average (GlooTransport's direct channel: NodeEnv::direct), segments
// whole and in pieces of --piece-mb (training.ring_piece_mb), and the same ring over messages (as
// under the emulator, or with faults injected). Reported: the best time of each, and the median
// over rounds of each one's time over c10d's in the same round (the runs take turns: a load burst
// on this shared host moves them alike). c10d's allreduce sums; the rings average (their last
// addition divides by C in the same pass): c10d's sum followed by that division is reported too.
// A control, c10d's allreduce in a second place in each round, against the first: what the
// median ratio of two identical runs is on this host (1.00 where the bench measures fairly).
json part_real(int reps, double piece_mb) {
  json rows = json::array();
  for (int c : {2, 3}) {
    for (double mb : {4.0, 64.0}) {
      Case k = make_case(c, mb * 1e6, std::vector<double>(c, 1000), 0);
      auto out = on_ranks(c, 19, [&](GlooTransport& t, int r) {
        WallClock clock;
        WallCompute compute;
        EventLog log;
        NodeEnv messages{t, clock, compute, log};
        NodeEnv direct{t, clock, compute, log, nullptr, nullptr, nullptr, &t.direct()};
        at::Tensor x =
            at::full({k.model.state_offset(k.model.layer_count())}, static_cast<float>(r));
        // All work in place on a tensor made before the timing: c10d's allreduce sums into it,
        // the ring averages in the tensor handed over to it (std::move).
        TrainingSpec pieces;
        pieces.ring_piece_mb = piece_mb;
        RingAverager whole(direct, k.plan, k.model, r, RingTopology::kMulti, 0);
        RingAverager cut(direct, k.plan, k.model, r, RingTopology::kMulti,
                         ring_piece_bytes(pieces));
        RingAverager over_messages(messages, k.plan, k.model, r, RingTopology::kMulti, 0);
        at::Tensor y, mean;  // the mean is kept until the next preparation, as c10d's sum is
        std::vector<at::Tensor> v;
        auto ring = [&](RingAverager& avg) {
          return [&](int rep) {
            mean = avg.average(
                std::move(y), 1, rep, [&] { return t.recv(); },
                [](Message) { throw Error("unexpected message"); });
          };
        };
        auto fresh = [&](int) {
          mean = at::Tensor();
          y = x.clone();
        };
        auto c10d_fresh = [&](int) { v = {x.clone()}; };
        const Turns turns = taking_turns(t, reps,
                                         {ring(whole), ring(cut), ring(over_messages),
                                          [&](int) { t.group().allreduce(v)->wait(); },
                                          [&](int) {
                                            t.group().allreduce(v)->wait();
                                            v[0].div_(c);
                                          },
                                          [&](int) { t.group().allreduce(v)->wait(); }},
                                         {fresh, fresh, fresh, c10d_fresh, c10d_fresh, c10d_fresh});
        return std::vector<double>{turns.best(0),
                                   turns.best(1),
                                   turns.best(2),
                                   turns.best(3),
                                   turns.best(4),
                                   turns.median_ratio(0, 3),
                                   turns.median_ratio(1, 3),
                                   turns.median_ratio(2, 3),
                                   turns.median_ratio(0, 4),
                                   turns.median_ratio(1, 4),
                                   bench::median(turns.faults[0]),
                                   bench::median(turns.faults[1]),
                                   bench::median(turns.faults[2]),
                                   bench::median(turns.faults[3]),
                                   turns.median_ratio(5, 3),
                                   bench::median(turns.cpu[0]),
                                   bench::median(turns.cpu[1]),
                                   bench::median(turns.cpu[2]),
                                   bench::median(turns.cpu[3])};
      });
      const double s = 4.0 * k.model.state_offset(k.model.layer_count());
      rows.push_back({{"ranks", c},
                      {"state_mb", s / 1e6},
                      {"piece_mb", piece_mb},
                      {"multi_ring_s", out[0]},
                      {"multi_ring_pieces_s", out[1]},
                      {"multi_ring_messages_s", out[2]},
                      {"c10d_allreduce_s", out[3]},
                      {"c10d_allreduce_divide_s", out[4]},
                      {"ratio", out[0] / out[3]},
                      {"median_ratio", out[5]},
                      {"median_ratio_pieces", out[6]},
                      {"median_ratio_messages", out[7]},
                      {"median_ratio_to_sum_divide", out[8]},
                      {"median_ratio_pieces_to_sum_divide", out[9]},
                      {"median_ratio_control", out[14]},
                      {"rank0_minor_faults",
                       {{"multi_ring", out[10]},
                        {"multi_ring_pieces", out[11]},
                        {"multi_ring_messages", out[12]},
                        {"c10d_allreduce", out[13]}}},
                      {"rank0_cpu_s",
                       {{"multi_ring", out[15]},
                        {"multi_ring_pieces", out[16]},
                        {"multi_ring_messages", out[17]},
                        {"c10d_allreduce", out[18]}}}});
      std::fprintf(stderr,
                   "real loopback C=%d S=%.0f MB: best multi-ring %.4f s, in %.2g MB pieces %.4f "
                   "s, over messages %.4f s, "
                   "c10d allreduce %.4f s (+ divide %.4f s); median ratio to c10d allreduce in "
                   "turns %.2f, pieces %.2f, "
                   "messages %.2f; to allreduce + divide %.2f, pieces %.2f; control (c10d against "
                   "itself) %.2f; rank 0's "
                   "CPU (median, all threads) multi-ring %.2f ms, pieces %.2f ms, messages %.2f "
                   "ms, c10d %.2f ms\n",
                   c, s / 1e6, out[0], piece_mb, out[1], out[2], out[3], out[4], out[5], out[6],
                   out[7], out[8], out[9], out[14], 1e3 * out[15], 1e3 * out[16], 1e3 * out[17],
                   1e3 * out[18]);
    }
  }
  return rows;
}

// Pipeline clusters on loopback, real processes: one averaging of every stage's state by our
// multi-ring, by the single ring, and by c10d allreduce (ProcessGroupGloo) over the same chunks
// (training.allreduce = multi-ring, single-ring, gloo), taking turns in a shuffled order (as
// part_real). Reported: rank 0's best barrier-to-barrier time of each, and the median over rounds
// of the multi-ring's time over c10d's and the single ring's over the multi-ring's.
json part_real_pipelines(int reps) {
  json rows = json::array();
  for (int c : {2, 3}) {
    for (int64_t h : {1024, 2048}) {
      const int p = 2;
      Case k = make_pipeline_case(c, p, h, 1000, 0);
      auto out = on_ranks(c * p, 5, [&](GlooTransport& t, int r) {
        GlooCollectives coll(t);
        WallClock clock;
        WallCompute compute;
        EventLog log;
        NodeEnv env{t,     clock,   compute, log,
                    &coll, nullptr, nullptr, &t.direct()};  // as a run's, emulation off
        const NodeRole role = k.plan.role_of(r);
        at::Tensor x = at::full(
            {k.model.state_offset(role.layer_end) - k.model.state_offset(role.layer_begin)},
            static_cast<float>(r));
        std::vector<std::unique_ptr<Averager>> avgs;
        for (const Allreduce& kind : allreduces())
          avgs.push_back(make_averager(env, k.plan, k.model, r, kind));
        at::Tensor y, mean;  // the mean is kept until the next preparation
        std::vector<std::function<void(int)>> fns, prepares;
        for (auto& avg : avgs) {  // multi-ring, single-ring, gloo
          fns.push_back([&](int rep) {
            mean = avg->average(
                std::move(y), 1, rep, [&] { return env.transport.recv(); },
                [](Message) { throw Error("unexpected message"); });
          });
          prepares.push_back([&](int) {
            mean = at::Tensor();
            y = x.clone();
          });
        }
        const Turns turns = taking_turns(t, reps, fns, prepares);
        return std::vector<double>{turns.best(0), turns.best(1), turns.best(2),
                                   turns.median_ratio(0, 2), turns.median_ratio(1, 0)};
      });
      const double s = 4.0 * k.model.state_offset(k.model.layer_count());
      rows.push_back({{"clusters", c},
                      {"stages", p},
                      {"state_mb", s / 1e6},
                      {"multi_ring_s", out[0]},
                      {"single_ring_s", out[1]},
                      {"c10d_allreduce_s", out[2]},
                      {"multi_over_c10d", out[3]},
                      {"single_over_multi", out[4]}});
      std::fprintf(stderr,
                   "real loopback pipelines C=%d p=%d S=%.0f MB: best multi-ring %.4f s, single "
                   "ring %.4f s, c10d "
                   "allreduce %.4f s; median in turns multi/c10d %.2f, single/multi %.2f\n",
                   c, p, s / 1e6, out[0], out[1], out[2], out[3], out[4]);
    }
  }
  return rows;
}

// Where a ring step's time goes, on 2 ranks: one exchange of a segment (each rank sends its
// segment to the other and receives the other's) through GlooTransport and through c10d's own
// send/recv into a buffer posted beforehand, and the addition and the copy a step makes after it.
// Best of --reps each, taking turns in a shuffled order (as part_real).
json part_breakdown(int reps) {
  json rows = json::array();
  for (double mb : {2.0, 32.0}) {
    const int64_t n = static_cast<int64_t>(mb * 1e6 / 4);
    auto out = on_ranks(2, 4, [&](GlooTransport& t, int r) {
      const int peer = 1 - r;
      at::Tensor x = at::full({n}, 1.0f), buf = at::empty({n}), y = at::full({n}, 2.0f);
      auto transport = [&](int) {
        Message m;
        m.kind = MsgKind::kReduce;
        m.payload.push_back(x);
        m.payload_frozen = true;
        m.bytes = kFloatBytes * n;
        t.send(peer, std::move(m));
        t.recv();
      };
      auto c10d = [&](int) {
        std::vector<at::Tensor> rb{buf}, sb{x};
        auto rw = t.group().recv(rb, peer, 7);
        auto sw = t.group().send(sb, peer, 7);
        rw->wait();
        sw->wait();
      };
      auto nothing = [](int) {};
      const Turns turns = taking_turns(
          t, reps, {transport, c10d, [&](int) { y.add_(x); }, [&](int) { buf.copy_(x); }},
          {nothing, nothing, nothing, nothing});
      return std::vector<double>{turns.best(0), turns.best(1), turns.best(2), turns.best(3)};
    });
    rows.push_back({{"segment_mb", mb},
                    {"transport_exchange_s", out[0]},
                    {"c10d_send_recv_s", out[1]},
                    {"add_s", out[2]},
                    {"copy_s", out[3]}});
    std::fprintf(stderr,
                 "breakdown %.0f MB: GlooTransport exchange %.4f s, c10d send/recv %.4f s, add "
                 "%.4f s, copy %.4f s\n",
                 mb, out[0], out[1], out[2], out[3]);
  }
  return rows;
}

}  // namespace

int main(int argc, char** argv) {
  rv::configure_allocator();  // as ravnest does (core/memory/allocator.h)
  std::string part = "all", out;
  int reps = 9;
  CLI::App app{"cross-cluster averaging: simulation against alpha-beta, real rings against c10d"};
  app.add_option("--part", part)->check(CLI::IsMember({"all", "sim", "real", "breakdown"}));
  app.add_option("--reps", reps, "real parts: timed runs of each, the best is reported")
      ->check(CLI::PositiveNumber);
  double piece_mb = 4;
  app.add_option("--piece-mb", piece_mb,
                 "real part: the rings' piece size (training.ring_piece_mb) beside whole segments")
      ->check(CLI::PositiveNumber);
  app.add_option("--out", out);
  CLI11_PARSE(app, argc, argv);
  json j = {{"benchmark", "allreduce"}};
  if (part == "all" || part == "sim") {
    j["sim"] = part_sim();
    j["sim_pipelines"] = part_sim_pipelines();
  }
  if (part == "all" || part == "real") {
    j["real"] = part_real(reps, piece_mb);
    j["real_pipelines"] = part_real_pipelines(reps);
  }
  if (part == "all" || part == "breakdown") j["breakdown"] = part_breakdown(reps);
  bench::emit(j, out);
}
