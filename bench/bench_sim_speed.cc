// Simulator speed in timing mode: simulated micro-batch events (forward and backward passes) and
// messages per wall second, for one pipeline of N nodes over a model of about N linear layers of
// width W (W = 1448 and N = 1000 is a 1.05-billion-parameter model on 1,000 nodes); beside it, the
// limit on this machine: bare SimGrid's message rate between N actors on the same platform (each
// actor takes a message from its predecessor and puts one to its successor, of the project's mean
// message size, as many messages as the project's run sent). Each runs in a child process (SimGrid
// allows one engine per process). `activities_per_bare_message` is the project's compute spans
// (forward, backward and update: each one SimGrid execution) plus messages per wall second of its
// whole run over bare SimGrid's messages per wall second of its event loop;
// `loop_activities_per_bare_message` takes both rates over the event loop alone (the like-for-like
// figure: bare SimGrid's setup is not timed either). Between the two, the project's
// network layer alone (SimNetwork, no algorithm): `network_layer_per_bare_message` is what the
// stream model's SimGrid calls cost against a bare message, and
// `loop_activities_per_network_layer_with_spans` (a span and a message per step, counted as two
// activities) what the algorithm layer and its metrics cost on top. With --repeats R, the project's
// run and bare SimGrid's run R times, one right after the other, and the ratios are the medians of
// the R pairs' (the host's speed drifts between runs a minute apart). --metrics summary runs the
// project as the shipped scale scenarios do (output.metrics = "summary": messages and waits kept
// as per-node totals); the default keeps every event.
//
//   bench_sim_speed --nodes 1000 --steps 20 [--width 1448] [--repeats R] [--metrics events|summary]
//                   [--out FILE]
// bench/run.sh loops over N.
#include <xbt/log.h>

#include <CLI/CLI.hpp>
#include <functional>
#include <memory>
#include <simgrid/s4u/Actor.hpp>
#include <simgrid/s4u/Engine.hpp>
#include <simgrid/s4u/Mailbox.hpp>

#include "bench/bench_common.h"
#include "core/data/dataset.h"
#include "core/memory/allocator.h"
#include "core/model/model.h"
#include "core/network/links.h"
#include "core/scenario/scenario.h"
#include "planner/planner.h"
#include "sim/platform.h"
#include "sim/sim_network.h"
#include "sim/sim_runner.h"

using namespace rv;
namespace sg4 = simgrid::s4u;

namespace {

// One engine on `s`'s platform (as the project's timing runs: its network model, no stack guards),
// with a chain of actors, one per host, made by `populate(hosts)`; each but the last sends
// `per_actor` messages. `populate` returns what its actors use, released after the run and before
// the engine. Returns messages per wall second of engine.run().
// The chains' actors' stacks, as the network layer's carriers' (where it has any). (At SimGrid's
// default of 8 MB, without guard pages, each stack is a calloc that the C heap's policy
// (core/memory/allocator.h) serves from the heap; where the heap reuses memory, calloc clears all
// 8 MB: the network layer's chain of 1,000 spent 40 s there.)
constexpr unsigned kChainStack = 256 * 1024;
using Populate = std::function<std::shared_ptr<void>(const std::vector<sg4::Host*>&)>;
double chain_rate(const Scenario& s, int64_t per_actor, const Populate& populate) {
  int argc = 1;
  char arg0[] = "bench";
  char* argv[] = {arg0, nullptr};
  sg4::Engine engine(&argc, argv);
  xbt_log_control_set("root.thresh:critical");
  configure_network(engine, s.network);
  engine.set_config("contexts/guard-size:0");
  const std::vector<sg4::Host*> hosts = build_platform(s);
  std::shared_ptr<void> used = populate(hosts);
  const double t0 = bench::wall_now();
  engine.run();
  const double wall = bench::wall_now() - t0;
  used.reset();
  return static_cast<double>(per_actor) * static_cast<double>(hosts.size() - 1) / wall;
}

// Bare SimGrid: actor r gets a message from r - 1 and puts one of `bytes` to r + 1.
double bare_rate(const Scenario& s, int64_t per_actor, uint64_t bytes) {
  return chain_rate(s, per_actor, [&](const std::vector<sg4::Host*>& hosts) {
    static char token;
    const int n = static_cast<int>(hosts.size());
    for (int r = 0; r < n; ++r)
      sg4::Actor::init("a" + std::to_string(r), hosts[r])
          ->set_stacksize(kChainStack)
          ->start([r, n, per_actor, bytes] {
            sg4::Mailbox* in = sg4::Mailbox::by_name("m" + std::to_string(r));
            sg4::Mailbox* out = sg4::Mailbox::by_name("m" + std::to_string(r + 1));
            for (int64_t k = 0; k < per_actor; ++k) {
              if (r > 0) in->get<char>();
              if (r < n - 1) out->put(&token, bytes);
            }
          });
    return std::shared_ptr<void>();
  });
}

// The project's network layer alone (sim/sim_network.h): node r takes a message from r - 1 and
// sends one of `bytes` to r + 1 through SimNetwork (its latency timers, kernel transfers and
// inboxes), executing `flops` on its host before each send when `flops` > 0 (as a stage's span).
// No algorithm, no event log. Between bare SimGrid and the project: what the stream model itself
// costs in SimGrid calls, and what the algorithm layer and its metrics add.
double network_rate(const Scenario& s, int64_t per_actor, uint64_t bytes, double flops) {
  return chain_rate(s, per_actor, [&](const std::vector<sg4::Host*>& hosts) {
    auto net = std::make_shared<SimNetwork>(hosts, links_of(s));
    const int n = static_cast<int>(hosts.size());
    for (int r = 0; r < n; ++r)
      sg4::Actor::init("a" + std::to_string(r), hosts[r])
          ->set_stacksize(kChainStack)
          ->start([r, n, per_actor, bytes, flops, net = net.get()] {
            for (int64_t k = 0; k < per_actor; ++k) {
              if (r > 0) net->recv(r);
              if (flops > 0) sg4::this_actor::execute(flops);
              if (r < n - 1) {
                Message m;
                m.id = k;
                m.bytes = static_cast<Bytes>(bytes);
                net->send(r, r + 1, std::move(m));
              }
            }
            net->flush(r);
          });
    return std::shared_ptr<void>(net);
  });
}

}  // namespace

int main(int argc, char** argv) {
  configure_allocator();  // the C heap's policy, as ravnest's (core/memory/allocator.h)
  int nodes = 10, steps = 20, width = 1448, repeats = 1,
      kernel_transfers = SimNetwork::kKernelTransfers;
  std::string out, metrics = "events";
  CLI::App app{"simulator speed in timing mode"};
  app.add_option("--nodes", nodes);
  app.add_option("--steps", steps);
  app.add_option("--width", width);
  app.add_option("--out", out);
  app.add_option("--repeats", repeats,
                 "pairs of the project's run and bare SimGrid's (medians reported)")
      ->check(CLI::PositiveNumber);
  app.add_option("--metrics", metrics, "output.metrics: events (every event kept) or summary")
      ->check(CLI::IsMember({"events", "summary"}));
  app.add_option(
         "--kernel-transfers", kernel_transfers,
         "the simulated network's limit on the kernel's transfers under way (sim/sim_network.h)")
      ->check(CLI::NonNegativeNumber);
  CLI11_PARSE(app, argc, argv);
  SimNetwork::limit_kernel_transfers(kernel_transfers);

  std::string hidden;
  for (int i = 0; i < nodes; ++i) hidden += (i ? ", " : "") + std::to_string(width);
  const std::string text =
      "name = \"sim-speed\"\n[model]\nhead = \"linear\"\nkind = \"mlp\"\nhidden = [" + hidden +
      "]\n[data]\nkind = \"synthetic\"\nside = 32\nbatch_size = 32\n"
      "[training]\nmax_in_flight = 16\nsteps = " +
      std::to_string(steps) + "\n[sim]\nmode = \"timing\"\n[output]\nmetrics = \"" + metrics +
      // Summary: no trace (the pipeline is one cluster, which a trace keeps whole).
      (metrics == "summary" ? "\"\ntrace = false" : "\"") +
      "\n[[devices]]\nname = \"slow\"\ncount = " + std::to_string(nodes / 2) +
      "\ntflops = 2\nram_gb = 8\nup_mbps = 20\ndown_mbps = 100\nlatency_ms = 30\n"
      "[[devices]]\nname = \"fast\"\ncount = " +
      std::to_string(nodes - nodes / 2) +
      "\ntflops = 20\nram_gb = 16\nup_mbps = 100\ndown_mbps = 500\nlatency_ms = 10\n";
  Scenario s = parse_scenario(text, "bench_sim_speed");
  double t0 = bench::wall_now();
  ModelDesc model = build_model(s);
  Plan plan = make_plan(s, model);
  double t_plan = bench::wall_now() - t0;
  // The project's run, then bare SimGrid's, each in its own child (one engine per process).
  auto project_run = [&] {
    return bench::in_child(8, [&] {
      RunSpec spec{&s, &plan, &model, nullptr};
      const double start = bench::wall_now();
      SimResult r = run_simulation(spec);
      const double wall = bench::wall_now() - start;
      double compute_events = 0, messages = 0, sent = 0, updates = 0;
      for (const auto& e : r.events) {
        compute_events += e.kind == EventKind::kForward || e.kind == EventKind::kBackward;
        updates += e.kind == EventKind::kUpdate;
        if (e.kind == EventKind::kSend) {
          messages += static_cast<double>(e.count);  // a folded total stands for `count` sends
          sent += static_cast<double>(e.bytes);
        }
      }
      return std::vector<double>{wall,
                                 r.simulated_time,
                                 compute_events,
                                 messages,
                                 sent,
                                 r.event_loop_wall_s,
                                 static_cast<double>(r.events.size()),
                                 updates};
    });
  };
  std::vector<double> run = project_run();
  const auto compute_events = static_cast<int64_t>(run[2]);
  const auto updates = static_cast<int64_t>(run[7]);
  const auto messages = static_cast<int64_t>(run[3]);
  const auto sent = static_cast<Bytes>(run[4]);
  // The same number of messages between the same number of actors, of the same mean size.
  const int64_t per_actor = std::max<int64_t>(1, messages / std::max(1, nodes - 1));
  const Bytes mean_bytes = sent / std::max<int64_t>(messages, 1);
  auto bare_run = [&] {
    return bench::in_child(
        [&] { return bare_rate(s, per_actor, static_cast<uint64_t>(mean_bytes)); });
  };
  // Compute spans and messages: the same in every repeat (the simulation is deterministic).
  const auto activities = static_cast<double>(compute_events + updates + messages);
  // This host's speed drifts by up to 3x within minutes: each repeat runs the project and, right
  // after it, bare SimGrid, and the figures below are the medians over the repeats of each pair.
  std::vector<double> walls, loops, bares, whole_ratios, loop_ratios, loop_ratios_passes;
  for (int k = 0; k < repeats; ++k) {
    if (k > 0) run = project_run();
    const double bare = bare_run();
    walls.push_back(run[0]);
    loops.push_back(run[5]);
    bares.push_back(bare);
    whole_ratios.push_back(activities / run[0] / bare);
    loop_ratios.push_back(activities / run[5] / bare);
    loop_ratios_passes.push_back(static_cast<double>(compute_events + messages) / run[5] / bare);
  }
  const double wall = bench::median(walls);
  const double bare = bench::median(bares);
  const double net = bench::in_child(
      [&] { return network_rate(s, per_actor, static_cast<uint64_t>(mean_bytes), 0); });
  // With a span before each send: the SimGrid calls of a stage that computes, then sends.
  const double net_exec = bench::in_child(
      [&] { return network_rate(s, per_actor, static_cast<uint64_t>(mean_bytes), 1e9); });
  const double project = activities / wall;
  // Bare SimGrid's rate is of its event loop alone; so is this one (the setup before it: building
  // the platform, the plan's actors and their state).
  const double loop_wall = bench::median(loops);
  const double project_loop = activities / loop_wall;
  nlohmann::json j = {
      {"benchmark", "sim_speed"},
      {"nodes", nodes},
      {"metrics", metrics},
      {"kernel_transfers", kernel_transfers},
      {"stages", plan.clusters[0].stages.size()},
      {"parameters", model.total_params()},
      {"micro_batches", steps},
      {"simulated_s", run[1]},
      {"wall_s", wall},
      {"plan_wall_s", t_plan},
      {"micro_batch_events", compute_events},
      {"update_spans", updates},
      {"messages", messages},
      {"events_recorded", static_cast<int64_t>(run[6])},
      {"events_per_wall_s", compute_events / wall},
      {"messages_per_wall_s", messages / wall},
      {"activities_per_wall_s", project},
      {"event_loop_wall_s", loop_wall},
      {"repeats", repeats},
      {"activities_per_event_loop_s", project_loop},
      {"bare_simgrid_messages_per_wall_s", bare},
      {"network_layer_messages_per_wall_s", net},
      {"network_layer_with_spans_activities_per_wall_s", 2 * net_exec},
      {"network_layer_per_bare_message", net / bare},
      {"loop_activities_per_network_layer_with_spans", project_loop / (2 * net_exec)},
      {"activities_per_bare_message", bench::median(whole_ratios)},
      {"loop_activities_per_bare_message", bench::median(loop_ratios)},
      {"loop_activities_per_bare_message_each", loop_ratios},
      {"event_loop_wall_s_each", loops},
      {"bare_simgrid_messages_per_wall_s_each", bares},
      // The same without the update spans (this bench's figure before they counted).
      {"loop_passes_and_messages_per_bare_message", bench::median(loop_ratios_passes)}};
  bench::emit(j, out);
}
