// Time dilation for emulated real runs (ravnest validate): how much slower than modeled a scenario
// must run for this host to keep up with it.
//
// A real run emulates each device by stretching its compute to the modeled time
// (real.emulate_speed) and each message to its links' time (real.emulate_network). That only works
// while the host's own work fits in the modeled time: a node whose stage takes this host 4 ms with
// a quarter of a core cannot pass for a device that does it in 2 ms. Dilating the scenario by k
// (Scenario::dilation: every rate / k, every time x k) stretches every modeled time by k while the
// host's work stays the same, so k is chosen with
//
//     k >= headroom * host_time(node) / (share * modeled_time(node))     for every working node,
//
// where share is the fraction of a core each node gets (cores / working nodes, at most 1) and
// host_time is the node's stage measured on this host (forward, backward and optimizer step of one
// micro-batch, median of repeats). headroom (kHeadroom) leaves room for what the measurement does
// not hold: the node's transport threads, serialization, the launcher's emulator.
#pragma once

#include <string>
#include <vector>

#include "core/model/model.h"
#include "core/output/validation.h"
#include "core/plan.h"
#include "core/scenario/scenario.h"
#include "core/units.h"

namespace rv {

constexpr double kHeadroom = 1.5;
constexpr double kMaxDilation = 100;
// The margin of a second attempt over the overrun the first one measured (redilation).
constexpr double kRetryMargin = 1.2;

// One working node's demand on the host.
struct NodeDemand {
  int node = -1;
  std::string device;     // its device group's name
  int group = -1;         // its device group's index (for --set devices.<group>....)
  Seconds host_s = 0;     // its stage's micro-batch on this host (forward + backward + update)
  Seconds modeled_s = 0;  // the same, modeled, undilated (stage_compute_time)
  double needs = 0;       // the dilation it needs alone: headroom * host_s / (share * modeled_s)
};

struct DilationChoice {
  double k = 1;      // the dilation chosen: >= every node's `needs`, rounded up; at least 1
  double cores = 1;  // this host's cores
  double share = 1;  // of a core, per working node
  int binding = -1;  // index in `nodes` of the node that needs the most
  std::vector<NodeDemand> nodes;
};

// The dilation for these demands (host_s and modeled_s filled in): k = the largest need, rounded
// up to two significant figures, and at least 1.
DilationChoice choose_dilation(std::vector<NodeDemand> nodes, double cores,
                               double headroom = kHeadroom);

// The measurement before a run is one stage alone; in the run, every node computes beside the
// others and beside its transport, and a small stage can cost this host 1.3 to 1.7 times as much
// (papers/validation). So the run itself is the check. `demand` holds, for each of a real run at
// dilation k's training forwards and backwards, the CPU time its maths took (Event::cpu) over its
// share of a core (DilationChoice::share) times its modeled (dilated) time: above 1 where the
// host's own work did not fit. If more than kLateTolerance of them exceed 1 + kLateTolerance, the
// dilation that would have kept up is returned: k x the demand at the (1 - kLateTolerance)
// quantile x kRetryMargin, rounded up to two figures; otherwise k. (At a larger k every modeled
// time stretches while the host's work does not, so one attempt more is enough as a rule.) A span
// can also be late with its work within its share: its wait for the modeled time woke late, which
// no dilation mends (validate reports those apart).
double redilation(const std::vector<double>& demand, double k);
// The share of `demand` above 1 + kLateTolerance: spans whose maths did not fit (0 for none).
double over_share(const std::vector<double>& demand);

// Measures every working node's stage on this host (each distinct layer range once, with the
// LibTorch threads a real run gives a node, on random inputs) and fills host_s and modeled_s.
std::vector<NodeDemand> measure_demands(const Scenario& s, const ModelDesc& model,
                                        const Plan& plan);

// `ravnest real` on one machine, before training: where this host computes slower or faster than
// the scenario's devices, and what makes the run follow them. For each working node (c's nodes,
// measured as measure_demands does, at the scenario's dilation s.dilation): this host's time per
// micro-batch with its share of the cores (host_s / share) against the modeled time x dilation,
// and their ratio; a node within kFollowTolerance is said to follow. Then the setting that would
// make the run follow: real.emulate_speed with a dilation of at least c.k where the host is too
// slow, real.emulate_speed alone where it is only faster, or `ravnest validate`.
constexpr double kFollowTolerance = 0.10;
std::string host_check_text(const Scenario& s, const DilationChoice& c);

// Why a dilation above kMaxDilation is refused, naming the node that needs it and the --set that
// shrinks the run.
std::string too_large_message(const Scenario& s, const DilationChoice& c);

}  // namespace rv
