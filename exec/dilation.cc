#include "exec/dilation.h"

#include <ATen/ATen.h>
#include <fmt/core.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <thread>
#include <utility>

#include "core/error.h"
#include "core/model/cost_model.h"
#include "core/model/stage.h"
#include "exec/compute_threads.h"

namespace rv {
namespace {

// Rounds up to two significant figures: 1.234 -> 1.3, 12.1 -> 13, 123 -> 130.
double round_up_2(double x) {
  if (x <= 0) return x;
  const double scale = std::pow(10.0, std::floor(std::log10(x)) - 1);
  return std::ceil(x / scale - 1e-9) * scale;
}

Seconds wall_now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// One micro-batch of a stage on this host: forward, backward, optimizer step; the median of
// repeats after warm-ups (at least 5 repeats, more while under a quarter of a second).
Seconds time_stage(const Scenario& s, const ModelDesc& model, int begin, int end) {
  const int64_t batch = s.data.batch_size;
  Stage stage(model, begin, end, s.training, s.seed);
  std::vector<int64_t> shape{batch};
  const auto& in =
      begin == 0 ? model.input_shape : model.profile[static_cast<size_t>(begin - 1)].out_shape;
  shape.insert(shape.end(), in.begin(), in.end());
  // Token ids for a model that embeds them (a transformer's first stage), else floats.
  const at::Tensor source = begin == 0 && model.input_vocab > 0
                                ? at::randint(model.input_vocab, shape, at::kLong)
                                : at::randn(shape);
  std::vector<Seconds> t;
  Seconds spent = 0;
  for (int64_t mb = 0; t.size() < 5 || (spent < 0.25 && t.size() < 100); ++mb) {
    const at::Tensor x = source.clone();
    const Seconds t0 = wall_now();
    at::Tensor y = stage.forward(mb, x);
    const at::Tensor g = at::ones_like(y);
    stage.backward(mb, g, nullptr);
    stage.update();
    const Seconds dt = wall_now() - t0;
    if (mb >= 2) {  // warm-ups
      t.push_back(dt);
      spent += dt;
    }
  }
  std::nth_element(t.begin(), t.begin() + static_cast<std::ptrdiff_t>(t.size() / 2), t.end());
  return t[t.size() / 2];
}

}  // namespace

DilationChoice choose_dilation(std::vector<NodeDemand> nodes, double cores, double headroom) {
  DilationChoice c;
  c.cores = std::max(1.0, cores);
  c.share = nodes.empty() ? 1.0 : std::min(1.0, c.cores / static_cast<double>(nodes.size()));
  double most = 0;
  for (size_t i = 0; i < nodes.size(); ++i) {
    NodeDemand& n = nodes[i];
    RV_CHECK(n.modeled_s > 0,
             "choose_dilation: node " + std::to_string(n.node) + " has no modeled time");
    n.needs = headroom * n.host_s / (c.share * n.modeled_s);
    if (c.binding < 0 || n.needs > most) {
      most = n.needs;
      c.binding = static_cast<int>(i);
    }
  }
  c.k = std::max(1.0, round_up_2(most));
  c.nodes = std::move(nodes);
  return c;
}

double over_share(const std::vector<double>& demand) {
  if (demand.empty()) return 0;
  const auto over =
      std::count_if(demand.begin(), demand.end(), [](double d) { return d > 1 + kLateTolerance; });
  return static_cast<double>(over) / static_cast<double>(demand.size());
}

double redilation(const std::vector<double>& demand, double k) {
  if (over_share(demand) <= kLateTolerance) return k;
  std::vector<double> sorted = demand;
  std::sort(sorted.begin(), sorted.end());
  const auto at = static_cast<size_t>(
      std::floor((1 - kLateTolerance) * static_cast<double>(sorted.size() - 1)));
  return round_up_2(k * sorted[at] * kRetryMargin);
}

std::vector<NodeDemand> measure_demands(const Scenario& s, const ModelDesc& model,
                                        const Plan& plan) {
  // As a real run's node process does (real/node_process.cc): the cores shared among every rank.
  set_compute_threads(threads_per_rank(plan.nodes));
  std::map<std::pair<int, int>, Seconds> measured;  // layer range -> host seconds
  std::vector<NodeDemand> out;
  for (int i = 0; i < plan.nodes; ++i) {
    const NodeRole r = plan.role_of(i);
    if (r.stage < 0) continue;  // idle: no work
    DeviceGroup device = s.device_of(i);
    device.dilation = 1;
    NodeDemand d;
    d.node = i;
    d.device = device.name;
    d.group = static_cast<int>(&s.device_of(i) - s.devices.data());
    const auto range = std::make_pair(r.layer_begin, r.layer_end);
    auto it = measured.find(range);
    if (it == measured.end())
      it = measured.emplace(range, time_stage(s, model, r.layer_begin, r.layer_end)).first;
    d.host_s = it->second;
    d.modeled_s = stage_compute_time(
        stage_work(model, r.layer_begin, r.layer_end, s.training, s.data.batch_size),
        device.compute_profile());
    out.push_back(d);
  }
  return out;
}

namespace {

// What makes a run follow the devices (host_check_text), given whether some node is slower or
// faster here than modeled.
std::string follow_advice(const Scenario& s, const DilationChoice& c, bool slower, bool faster) {
  if (s.real.emulate_speed) {
    if (c.k <= s.dilation)
      return "real.emulate_speed stretches each span to its modeled time, which leaves this host "
             "room: the run follows the scenario's devices.\n";
    return fmt::format(
        "real.emulate_speed stretches each span to its modeled time, which leaves this host too "
        "little room: spans will run late. Set a dilation of at least {:g} (--set dilation={:g}; "
        "ravnest validate's headroom of 1.5 included), or run `ravnest validate`, which chooses "
        "it.\n",
        c.k, c.k);
  }
  if (slower)
    return fmt::format(
        "The run computes at this host's speed (real.emulate_speed = false), slower than the "
        "scenario: its times are not the scenario's. To follow the devices, --set "
        "real.emulate_speed=true --set dilation={:g} (every modeled time x {:g}, so this host "
        "keeps "
        "up), or run `ravnest validate`, which chooses the dilation and compares with the "
        "simulation.\n",
        c.k, c.k);
  if (faster)
    return "The run computes at this host's speed (real.emulate_speed = false), faster than the "
           "scenario: its times are not the scenario's. --set real.emulate_speed=true stretches "
           "each span to the device's modeled time; `ravnest validate` compares with the "
           "simulation.\n";
  return fmt::format("This host computes as the scenario's devices do, within {:g}%.\n",
                     100 * kFollowTolerance);
}

}  // namespace

std::string host_check_text(const Scenario& s, const DilationChoice& c) {
  std::string out = fmt::format(
      "this host against the scenario's devices (one micro-batch's forward, backward and update "
      "of each node's stage, with {:.2g} of a core each as this run gives it):\n",
      c.share);
  bool slower = false, faster = false;
  for (const NodeDemand& n : c.nodes) {
    const double here = n.host_s / c.share, modeled = n.modeled_s * s.dilation;
    const double ratio = here / modeled;
    std::string verdict = "follows it";
    if (ratio > 1 + kFollowTolerance) {
      verdict = fmt::format("this host is {:.3g}x slower", ratio);
      slower = true;
    } else if (ratio < 1 / (1 + kFollowTolerance)) {
      verdict = fmt::format("this host is {:.3g}x faster", 1 / ratio);
      faster = true;
    }
    out += fmt::format("  node {} ({}): {:.3g} ms here, {:.3g} ms modeled: {}\n", n.node, n.device,
                       here * 1e3, modeled * 1e3, verdict);
  }
  return out + follow_advice(s, c, slower, faster);
}

std::string too_large_message(const Scenario& s, const DilationChoice& c) {
  RV_CHECK(c.binding >= 0, "too_large_message: no node");
  const NodeDemand& n = c.nodes[static_cast<size_t>(c.binding)];
  const DeviceGroup& g = s.devices[static_cast<size_t>(n.group)];
  return fmt::format(
      "this host cannot keep up with the scenario even {:g} times slower: it would need a dilation "
      "of "
      "{:g} (node {}, a {} device: its stage takes {:.3g} ms here with {:.2g} of a core, against "
      "{:.3g} ms "
      "modeled). Shrink the run, e.g. --set devices.{}.tflops={:.3g} (a slower device), fewer "
      "nodes "
      "(--set devices.{}.count=...), or a smaller model (model.hidden, model.channels)",
      kMaxDilation, c.k, n.node, n.device, n.host_s * 1e3, c.share, n.modeled_s * 1e3, n.group,
      g.tflops * kMaxDilation / c.k, n.group);
}

}  // namespace rv
