#include "cli/span_times.h"

#include <algorithm>
#include <limits>

#include "core/model/cost_model.h"
#include "core/output/run_output.h"

namespace rv {

double SpanTimes::median_ratio() const { return rv::median_ratio(took, modeled); }

double median_ratio(const std::vector<Seconds>& a, const std::vector<Seconds>& b) {
  std::vector<double> r;
  if (a.size() != b.size()) return std::numeric_limits<double>::quiet_NaN();
  for (size_t i = 0; i < a.size(); ++i)
    if (b[i] > 0) r.push_back(a[i] / b[i]);
  if (r.empty()) return std::numeric_limits<double>::quiet_NaN();
  const auto mid = r.begin() + static_cast<std::ptrdiff_t>(r.size() / 2);
  std::nth_element(r.begin(), mid, r.end());
  return *mid;
}

SpanTimes span_times(const Prepared& p, const std::string& metrics) {
  const Scenario& s = p.scenario;
  std::vector<StageWork> work;
  // An evaluation's forward (micro_batch < 0) is charged as the worker charges it: the layers
  // alone, without the first stage's input preparation (another code).
  std::vector<Work> eval;
  std::vector<ComputeProfile> device;
  for (int i = 0; i < p.plan.nodes; ++i) {
    const NodeRole r = p.plan.role_of(i);
    work.push_back(r.stage >= 0 ? stage_work(p.model, r.layer_begin, r.layer_end, s.training,
                                             s.data.batch_size)
                                : StageWork{});
    eval.push_back(r.stage >= 0
                       ? p.model.forward_work(r.layer_begin, r.layer_end, s.data.batch_size)
                       : Work{});
    device.push_back(s.device_of(i).compute_profile());
  }
  SpanTimes out;
  // Each node's compute spans in time order, for what the model needs of the spans before each
  // (DeviceHistory: the idle wait, and the wait after which its code first runs again).
  std::vector<Event> spans;
  for (const Event& e : read_events_csv(metrics))
    if (e.node >= 0 && e.node < p.plan.nodes &&
        (e.kind == EventKind::kForward || e.kind == EventKind::kBackward ||
         e.kind == EventKind::kUpdate))
      spans.push_back(e);
  std::stable_sort(spans.begin(), spans.end(), [](const Event& a, const Event& b) {
    return a.node != b.node ? a.node < b.node : a.start < b.start;
  });
  std::vector<DeviceHistory> history(static_cast<size_t>(p.plan.nodes));
  for (const Event& e : spans) {
    const StageWork& w = work[static_cast<size_t>(e.node)];
    const Work& unit = e.kind == EventKind::kForward
                           ? (e.micro_batch < 0 ? eval[static_cast<size_t>(e.node)] : w.forward)
                       : e.kind == EventKind::kBackward ? w.backward
                                                        : w.update;
    DeviceHistory& h = history[static_cast<size_t>(e.node)];
    const Seconds modeled =
        h.begin(unit, device[static_cast<size_t>(e.node)], e.start, saved_activations_of(e));
    h.end(e.end);
    if (e.micro_batch < 0 || e.kind == EventKind::kUpdate || modeled <= 0) continue;
    out.took.push_back(e.end - e.start);
    out.cpu.push_back(e.cpu);
    out.modeled.push_back(modeled);
  }
  return out;
}

}  // namespace rv
