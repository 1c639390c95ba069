#include "core/output/run_output.h"

#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "core/error.h"
#include "core/output/event_schema.h"
#include "core/output/provenance.h"
#include "core/output/steady_state.h"

namespace fs = std::filesystem;

namespace rv {
namespace {

std::string time_str(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.9f", v);
  return buf;
}

void write_file(const fs::path& p, const std::string& text) {
  std::ofstream out(p, std::ios::binary);
  out << text;
  if (!out) throw Error("cannot write " + p.string());
}

bool is_span(EventKind k) {
  return k == EventKind::kForward || k == EventKind::kBackward || k == EventKind::kUpdate ||
         k == EventKind::kWait || k == EventKind::kAverage || k == EventKind::kFlush;
}

// A node is busy while it computes: forward, backward and update spans. Averaging (an all-reduce,
// mostly time on the links) is not compute: summaries report it apart (averaging_s), so that the
// busy fraction of a data-parallel node and of a pipeline stage measure the same thing.
bool is_busy(EventKind k) {
  return k == EventKind::kForward || k == EventKind::kBackward || k == EventKind::kUpdate;
}

// JSON numbers that stay finite (NaN becomes null).
nlohmann::json jnum(double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(); }

}  // namespace

void sort_events(std::vector<Event>& events) {
  std::stable_sort(events.begin(), events.end(), [](const Event& a, const Event& b) {
    if (a.end != b.end) return a.end < b.end;
    if (a.node != b.node) return a.node < b.node;
    return static_cast<int>(a.kind) < static_cast<int>(b.kind);
  });
}

std::string new_run_path(const Scenario& s, const std::string& executor) {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  localtime_r(&t, &tm);
  char stamp[32];
  std::strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", &tm);
  fs::path base = fs::path(s.output.dir) / s.name;
  fs::path p = base / (executor + "-" + stamp);
  for (int k = 2; fs::exists(p); ++k) p = base / (executor + "-" + stamp + "-" + std::to_string(k));
  return p.string();
}

namespace {

// The rows of a CSV text with `header` first (nullptr: the caller has read and checked it):
// `row(line)` for each non-empty line after it, and any std::logic_error it throws (std::stoi and
// the like) as rv::InputError naming `where` and the line.
void for_each_row(std::istream& in, const std::string& where, const char* header, const char* what,
                  const std::function<void(const std::string&, int)>& row) {
  std::string line;
  if (header != nullptr) {
    std::getline(in, line);
    if (line != header) throw InputError(where + ":1: not a " + what + " header");
  }
  int line_no = 1;
  while (std::getline(in, line)) {
    ++line_no;
    if (line.empty()) continue;
    try {
      row(line, line_no);
    } catch (const std::logic_error& ex) {
      throw InputError(where + ":" + std::to_string(line_no) + ": bad field: " + ex.what());
    }
  }
}

std::ifstream open_csv(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw InputError(path + ": cannot open");
  return in;
}

constexpr const char* kParamsHeader = "node,cluster,stage,step,time_s,values";

}  // namespace

std::string params_csv(const std::vector<Event>& events) {
  std::ostringstream os;
  os << kParamsHeader << "\n";
  char buf[32];
  for (const Event& e : events) {
    if (e.kind != EventKind::kParams) continue;
    os << e.node << ',' << e.cluster << ',' << e.stage << ',' << e.step << ',' << time_str(e.end)
       << ',';
    for (size_t i = 0; i < e.values.size(); ++i) {
      std::snprintf(buf, sizeof buf, "%.9g", static_cast<double>(e.values[i]));  // float32 exactly
      os << (i ? " " : "") << buf;
    }
    os << "\n";
  }
  return os.str();
}

std::vector<Event> parse_params_csv(std::istream& in, const std::string& where) {
  std::vector<Event> out;
  for_each_row(in, where, kParamsHeader, "params.csv", [&](const std::string& line, int line_no) {
    std::vector<std::string> f;
    std::stringstream ss(line);
    for (std::string c; f.size() < 5 && std::getline(ss, c, ',');) f.push_back(c);
    std::string rest;
    std::getline(ss, rest);
    if (f.size() != 5)
      throw InputError(where + ":" + std::to_string(line_no) + ": expected 6 fields");
    Event e;
    e.kind = EventKind::kParams;
    e.node = std::stoi(f[0]);
    e.cluster = std::stoi(f[1]);
    e.stage = std::stoi(f[2]);
    e.step = std::stoll(f[3]);
    e.start = e.end = std::stod(f[4]);
    std::istringstream vs(rest);
    for (std::string v; vs >> v;) e.values.push_back(std::stof(v));
    out.push_back(std::move(e));
  });
  return out;
}

void write_events_csv(const std::string& path, const std::vector<Event>& events) {
  write_file(path, events_csv(events));
}

std::vector<Event> read_events_csv(const std::string& path) {
  std::ifstream in = open_csv(path);
  return parse_events_csv(in, path);
}

void write_params_csv(const std::string& path, const std::vector<Event>& events) {
  write_file(path, params_csv(events));
}

nlohmann::json read_json_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw InputError(path + ": cannot read");
  try {
    return nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw InputError(path + ": not JSON: " + e.what());
  }
}

std::vector<Event> read_params_csv(const std::string& path) {
  std::ifstream in = open_csv(path);
  return parse_params_csv(in, path);
}

namespace {

// What one pass over a run's events counts, per node and for the run.
struct RunTally {
  struct Node {
    double busy = 0, wait = 0, averaging = 0;
    int64_t averagings = 0;
    Bytes sent = 0, received = 0, peak = 0, measured = 0, measured_device = 0;
    int64_t updates = 0, stale_sum = 0, stale_max = 0;
  };
  std::vector<Node> nodes;
  double t_end = 0;
  std::vector<double> last_stage_done;  // end times of the last stages' backward passes, sorted
  std::vector<std::vector<double>> cluster_done;  // the same, per cluster (unsorted)
  std::vector<double> losses;
  const Event* final_eval = nullptr;
  int64_t stale_n = 0, stale_sum = 0, stale_max = 0;
};

// One event into its node's figures and the run's.
void count_event(const Plan& plan, const Event& e, RunTally& t) {
  RunTally::Node& n = t.nodes[static_cast<size_t>(e.node)];
  if (is_busy(e.kind)) n.busy += e.end - e.start;
  if (e.kind == EventKind::kWait) n.wait += e.end - e.start;
  if (e.kind == EventKind::kAverage) {
    n.averaging += e.end - e.start;
    ++n.averagings;
  }
  if (e.kind == EventKind::kSend) n.sent += e.bytes;
  if (e.kind == EventKind::kRecv) n.received += e.bytes;
  if (e.kind == EventKind::kMemory) n.peak = std::max(n.peak, e.bytes);
  if (e.kind == EventKind::kMeasuredMemory) n.measured = std::max(n.measured, e.bytes);
  if (e.kind == EventKind::kMeasuredDeviceMemory)
    n.measured_device = std::max(n.measured_device, e.bytes);
  if (e.kind == EventKind::kUpdate) {
    ++n.updates;
    if (e.staleness >= 0) {
      n.stale_sum += e.staleness;
      n.stale_max = std::max(n.stale_max, e.staleness);
      t.stale_sum += e.staleness;
      t.stale_max = std::max(t.stale_max, e.staleness);
      ++t.stale_n;
    }
  }
  if (e.kind == EventKind::kLoss) t.losses.push_back(e.loss);
  if (e.kind == EventKind::kEval && (!t.final_eval || e.end >= t.final_eval->end))
    t.final_eval = &e;
  if (finishes_micro_batch(plan, e)) {
    t.last_stage_done.push_back(e.end);
    t.cluster_done[static_cast<size_t>(e.cluster)].push_back(e.end);
  }
}

RunTally tally(const Plan& plan, const std::vector<Event>& events) {
  RunTally t;
  t.nodes.resize(static_cast<size_t>(plan.nodes));
  t.cluster_done.resize(plan.clusters.size());
  for (const auto& e : events) t.t_end = std::max(t.t_end, e.end);
  for (const auto& e : events)
    if (e.node >= 0 && e.node < plan.nodes) count_event(plan, e, t);
  std::sort(t.last_stage_done.begin(), t.last_stage_done.end());
  return t;
}

// Steady state (core/output/steady_state.h): training samples per second and with evaluations,
// the window, and each working node's time per optimizer step (its cluster's window's training
// time over the updates it made in it), averaged over the nodes.
void add_steady_state(const Plan& plan, const std::vector<Event>& events, int64_t batch,
                      nlohmann::json& j) {
  const SteadyState w = steady_state(plan, events);
  double step_sum = 0;
  int step_nodes = 0;
  if (!w.empty()) {
    // node -> (its updates, each in its own cluster's window; the longest training time of those
    // windows: a node moved to another cluster by churn trained over both, which overlap)
    std::map<int, std::pair<int64_t, Seconds>> nodes;
    for (const auto& e : events) {
      if (e.kind != EventKind::kUpdate || e.node < 0 || e.node >= plan.nodes) continue;
      const SteadyState::Window* c = w.of(e.cluster);
      if (!c || e.end <= c->begin || e.end > c->end) continue;
      auto& [updates, training] = nodes[e.node];
      ++updates;
      training = std::max(training, c->training());
    }
    for (const auto& [node, n] : nodes) {
      step_sum += n.second / static_cast<double>(n.first);
      ++step_nodes;
    }
  }
  j["steady_samples_per_s"] = w.training_rate(batch);
  j["steady_samples_per_s_with_evaluations"] = w.rate_with_evaluations(batch);
  j["steady_window_s"] = {w.begin, w.end};
  j["steady_window"] = {{"basis", basis_name(w.basis)},
                        {"begin_s", w.begin},
                        {"end_s", w.end},
                        {"periods", w.periods},
                        {"clusters", w.clusters.size()},
                        {"micro_batches", w.micro_batches},
                        {"training_micro_batches", w.training_micro_batches},
                        {"evaluation_s", w.evaluation},
                        {"evaluations", w.evaluations},
                        {"evaluation_batches", w.evaluation_batches},
                        // The plan's prediction for this window: its training rate over the
                        // window's samples, with these evaluations' predicted pauses.
                        {"predicted_samples_per_s_with_evaluations",
                         plan.rate_with_evaluations(static_cast<double>(w.micro_batches * batch),
                                                    w.evaluations, w.evaluation_batches)}};
  j["time_per_step_s"] = step_nodes ? step_sum / step_nodes : 0.0;
}

// Time without progress: per cluster, each stretch between two finished micro-batches (its last
// stage's backwards) during which it sat out a round or dropped micro-batches, summed.
double seconds_without_progress(const std::vector<Event>& events, RunTally& t) {
  for (auto& ends : t.cluster_done) std::sort(ends.begin(), ends.end());
  std::set<std::pair<int, double>> stalls;  // (cluster, start of the stretch)
  double without_progress = 0;
  for (const auto& e : events) {
    if (e.kind != EventKind::kOut && e.kind != EventKind::kDrop) continue;
    if (e.cluster < 0 || static_cast<size_t>(e.cluster) >= t.cluster_done.size()) continue;
    const auto& ends = t.cluster_done[static_cast<size_t>(e.cluster)];
    const auto next = std::lower_bound(ends.begin(), ends.end(), e.end);
    const double from = next == ends.begin() ? 0.0 : *std::prev(next);
    const double to = next == ends.end() ? t.t_end : *next;
    if (stalls.emplace(e.cluster, from).second) without_progress += to - from;
  }
  return without_progress;
}

// What churn cost: events by kind, and the samples the plan's clusters did not train.
nlohmann::json churn_summary(const Scenario& s, const Plan& plan, const std::vector<Event>& events,
                             RunTally& t, int64_t samples) {
  int64_t leaves = 0, joins = 0, takeovers = 0, transfers = 0;
  Bytes transfer_bytes = 0;
  std::set<std::pair<int, int64_t>> out;    // (cluster, round)
  std::set<std::pair<int, int64_t>> drops;  // (cluster, micro-batch): each node that held it
                                            // records it
  for (const auto& e : events) {
    if (e.kind == EventKind::kLeave) ++leaves;
    if (e.kind == EventKind::kJoin) ++joins;
    if (e.kind == EventKind::kAssign) ++takeovers;
    if (e.kind == EventKind::kDrop) drops.emplace(e.cluster, e.micro_batch);
    if (e.kind == EventKind::kOut) out.emplace(e.cluster, e.step);
    if (e.kind == EventKind::kTransfer) {
      ++transfers;
      transfer_bytes += e.bytes;
    }
  }
  const double without_progress = seconds_without_progress(events, t);
  const int64_t planned =
      static_cast<int64_t>(plan.clusters.size()) * s.training.steps * s.data.batch_size;
  return {{"leaves", leaves},
          {"joins", joins},
          {"takeovers", takeovers},
          {"dropped_micro_batches", static_cast<int64_t>(drops.size())},
          {"rounds_sat_out", static_cast<int64_t>(out.size())},
          {"state_transfers", transfers},
          {"state_transfer_bytes", transfer_bytes},
          {"cluster_seconds_without_progress", without_progress},
          {"planned_samples", planned},
          {"samples_lost", std::max<int64_t>(0, planned - samples)}};
}

nlohmann::json per_node_summary(const Scenario& s, const Plan& plan, const RunTally& t) {
  nlohmann::json nodes = nlohmann::json::array();
  for (int i = 0; i < plan.nodes; ++i) {
    const NodeRole r = plan.role_of(i);
    const RunTally::Node& n = t.nodes[static_cast<size_t>(i)];
    const double t_end = t.t_end;
    nodes.push_back(
        {{"node", i},
         {"device", s.device_of(i).name},
         {"cluster", r.cluster},
         {"stage", r.stage},
         {"busy_s", n.busy},
         {"busy_fraction", t_end > 0 ? n.busy / t_end : 0.0},
         {"idle_fraction", t_end > 0 ? 1.0 - n.busy / t_end : 0.0},
         {"wait_s", n.wait},
         {"averaging_s", n.averaging},
         {"averagings", n.averagings},
         {"bytes_sent", n.sent},
         {"bytes_received", n.received},
         {"peak_memory_bytes", n.peak},
         {"measured_peak_memory_bytes", n.measured},
         {"measured_device_peak_bytes", n.measured_device},
         {"updates", n.updates},
         {"staleness_mean", n.updates ? static_cast<double>(n.stale_sum) / n.updates : 0.0},
         {"staleness_max", n.stale_max}});
  }
  return nodes;
}

// Cross-cluster exchanges: parameter averaging or gradient all-reduce.
nlohmann::json averaging_summary(const Scenario& s, const RunTally& t) {
  double avg_max = 0;
  int64_t rounds = 0;
  for (const auto& n : t.nodes) {
    avg_max = std::max(avg_max, n.averaging);
    rounds = std::max(rounds, n.averagings);
  }
  return {{"allreduce", s.training.allreduce},
          {"optimizer_state", s.training.average_optimizer_state},
          {"rounds", rounds},
          {"time_s_max_node", avg_max},
          {"mean_round_s", rounds ? avg_max / static_cast<double>(rounds) : 0.0}};
}

// The mean of the last 20 training losses, and the last evaluation's.
nlohmann::json final_summary(const RunTally& t) {
  double tail_loss = kNaN;
  if (!t.losses.empty()) {
    size_t k = std::min<size_t>(t.losses.size(), 20);
    double sum = 0;
    for (size_t i = t.losses.size() - k; i < t.losses.size(); ++i) sum += t.losses[i];
    tail_loss = sum / k;
  }
  return {{"train_loss", jnum(tail_loss)},
          {"test_loss", jnum(t.final_eval ? t.final_eval->loss : kNaN)},
          {"test_accuracy", jnum(t.final_eval ? t.final_eval->accuracy : kNaN)}};
}

}  // namespace

nlohmann::json summarize(const Scenario& s, const Plan& plan, const std::vector<Event>& events,
                         const RunInfo& info) {
  RunTally t = tally(plan, events);
  const int64_t batch = s.data.batch_size;
  const int64_t samples = static_cast<int64_t>(t.last_stage_done.size()) * batch;
  nlohmann::json j;
  j["scenario"] = s.name;
  j["executor"] = info.executor;
  j["mode"] = info.mode;
  j["algorithm"] = s.training.algorithm;
  j["nodes"] = plan.nodes;
  j["clusters"] = plan.clusters.size();
  j["time_s"] = t.t_end;
  j["train_samples"] = samples;
  j["samples_per_s"] = t.t_end > 0 ? samples / t.t_end : 0.0;
  add_steady_state(plan, events, batch, j);
  j["staleness"] = {{"mean", t.stale_n ? static_cast<double>(t.stale_sum) / t.stale_n : 0.0},
                    {"max", t.stale_max}};
  // Churn in the simulator, or a real run that recovered from a lost rank.
  if (s.nodes_may_leave()) j["churn"] = churn_summary(s, plan, events, t, samples);
  j["per_node"] = per_node_summary(s, plan, t);
  j["averaging"] = averaging_summary(s, t);
  j["final"] = final_summary(t);
  return j;
}

std::vector<char> traced_nodes(const Plan& plan, int limit) {
  std::vector<char> traced(static_cast<size_t>(std::max(plan.nodes, 0)), 0);
  auto show = [&](const ClusterPlan& c) {
    for (const auto& st : c.stages) traced.at(static_cast<size_t>(st.node)) = 1;
  };
  const size_t clusters = plan.clusters.size();
  if (limit <= 0) {
    for (const auto& c : plan.clusters) show(c);
    return traced;
  }
  // Clusters 0, k, 2k, ... with k = clusters / wanted, where wanted is how many of the mean size
  // fit in `limit`; a cluster that would pass the limit is skipped (the first is always shown).
  int64_t nodes_in_clusters = 0;
  for (const auto& c : plan.clusters) nodes_in_clusters += static_cast<int64_t>(c.stages.size());
  if (clusters == 0) return traced;
  const double mean = static_cast<double>(nodes_in_clusters) / static_cast<double>(clusters);
  const size_t wanted =
      std::clamp<size_t>(static_cast<size_t>(limit / std::max(mean, 1.0)), 1, clusters);
  const double stride = static_cast<double>(clusters) / static_cast<double>(wanted);
  int64_t shown = 0;
  for (size_t k = 0; k < wanted; ++k) {
    const ClusterPlan& c = plan.clusters[static_cast<size_t>(static_cast<double>(k) * stride)];
    const auto size = static_cast<int64_t>(c.stages.size());
    if (shown > 0 && shown + size > limit) continue;
    show(c);
    shown += size;
  }
  return traced;
}

std::string node_metrics_csv(const Scenario& s, const Plan& plan,
                             const std::vector<Event>& events) {
  // Span kinds and message kinds, in column order.
  static const EventKind kSpans[] = {EventKind::kForward, EventKind::kBackward, EventKind::kUpdate,
                                     EventKind::kAverage, EventKind::kFlush,    EventKind::kWait};
  struct Row {
    int64_t n[6] = {};
    double seconds[6] = {};
    int64_t sends = 0, recvs = 0;
    Bytes sent = 0, received = 0, peak = 0;
    Seconds last = 0;
  };
  std::vector<Row> rows(static_cast<size_t>(std::max(plan.nodes, 0)));
  for (const auto& e : events) {
    if (e.node < 0 || e.node >= plan.nodes) continue;
    Row& r = rows[static_cast<size_t>(e.node)];
    r.last = std::max(r.last, e.end);
    for (int k = 0; k < 6; ++k)
      if (e.kind == kSpans[k]) {
        r.n[k] += e.count;
        r.seconds[k] += e.end - e.start;
      }
    if (e.kind == EventKind::kSend) {
      r.sends += e.count;
      r.sent += e.bytes;
    }
    if (e.kind == EventKind::kRecv) {
      r.recvs += e.count;
      r.received += e.bytes;
    }
    if (e.kind == EventKind::kMemory) r.peak = std::max(r.peak, e.bytes);
  }
  std::ostringstream out;
  out << "node,cluster,stage,device";
  for (EventKind k : kSpans) out << ',' << to_string(k) << "_n," << to_string(k) << "_s";
  out << ",send_n,send_bytes,recv_n,recv_bytes,peak_memory_bytes,last_s\n";
  for (int i = 0; i < plan.nodes; ++i) {
    const Row& r = rows[static_cast<size_t>(i)];
    const NodeRole role = plan.role_of(i);
    out << i << ',' << role.cluster << ',' << role.stage << ',' << s.device_of(i).name;
    for (int k = 0; k < 6; ++k) out << ',' << r.n[k] << ',' << time_str(r.seconds[k]);
    out << ',' << r.sends << ',' << r.sent << ',' << r.recvs << ',' << r.received << ',' << r.peak
        << ',' << time_str(r.last) << "\n";
  }
  return out.str();
}

std::string plan_file_text(const Plan& plan, const ModelDesc& model) {
  using nlohmann::json;
  json pj = to_json(plan);
  json layers = json::array();
  for (const auto& p : model.profile)
    layers.push_back({{"name", p.name},
                      {"params", p.params},
                      {"out_elems", p.out_elems},
                      {"forward_flops_per_sample", p.forward_flops}});
  pj["model"] = {{"name", model.name}, {"params", model.total_params()}, {"layers", layers}};
  return pj.dump(2) + "\n";
}

std::string run_json_text(const RunInfo& info, const std::string& status, const std::string& why) {
  using nlohmann::json;
  json run{{"executor", info.executor},
           {"mode", info.mode},
           {"wall_seconds", info.wall_seconds},
           {"status", status}};
  if (!info.variant.empty()) run["variant"] = info.variant;
  if (!why.empty()) run[why_key(status)] = why;
  if (!info.resumed_from.empty())
    run["resumed_from"] = {{"run", info.resumed_from}, {"updates", info.resumed_at}};
  run.update(to_json(provenance_of_run(info.started_unix_s)));
  return run.dump(2) + "\n";
}

namespace {

// trace.json's text, written one event at a time (a run of thousands of nodes has millions).
class TraceWriter {
 public:
  TraceWriter() { out_ << "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n"; }
  void emit(const nlohmann::json& e) {
    out_ << (first_ ? "" : ",\n") << e.dump();
    first_ = false;
  }
  std::string finish() {
    out_ << "\n]}\n";
    return out_.str();
  }

 private:
  std::ostringstream out_;
  bool first_ = true;
};

// A row per traced node (named by its node, stage and device, sorted by stage) in a process per
// cluster, and a process for the idle nodes.
void emit_trace_rows(const Scenario& s, const Plan& plan, const std::vector<char>& traced,
                     TraceWriter& w) {
  for (int i = 0; i < plan.nodes; ++i) {
    if (!traced[static_cast<size_t>(i)]) continue;
    NodeRole r = plan.role_of(i);
    w.emit({{"ph", "M"},
            {"name", "thread_name"},
            {"pid", r.cluster + 1},
            {"tid", i},
            {"args",
             {{"name", "node " + std::to_string(i) + " stage " + std::to_string(r.stage) + " (" +
                           s.device_of(i).name + ")"}}}});
    w.emit({{"ph", "M"},
            {"name", "thread_sort_index"},
            {"pid", r.cluster + 1},
            {"tid", i},
            {"args", {{"sort_index", r.stage}}}});
  }
  for (int c = 0; c <= static_cast<int>(plan.clusters.size()); ++c)
    w.emit({{"ph", "M"},
            {"name", "process_name"},
            {"pid", c},
            {"args",
             {{"name", c == 0 ? std::string("idle nodes") : "cluster " + std::to_string(c - 1)}}}});
}

// The spans of the traced nodes (an evaluation's forward named "eval").
void emit_trace_spans(const Plan& plan, const std::vector<Event>& events,
                      const std::vector<char>& traced, TraceWriter& w) {
  for (const auto& e : events) {
    if (!is_span(e.kind) || e.node < 0 || e.node >= plan.nodes ||
        !traced[static_cast<size_t>(e.node)])
      continue;
    std::string name = to_string(e.kind);
    if (e.kind == EventKind::kForward && e.micro_batch < 0) name = "eval";
    w.emit({{"ph", "X"},
            {"name", name},
            {"cat", name},
            {"pid", e.cluster + 1},
            {"tid", e.node},
            {"ts", e.start * 1e6},
            {"dur", (e.end - e.start) * 1e6},
            {"args", {{"micro_batch", e.micro_batch}, {"step", e.step}}}});
  }
}

// Churn: departures and arrivals across the whole trace, the rest on their node's row.
void emit_trace_churn(const Plan& plan, const std::vector<Event>& events,
                      const std::vector<char>& traced, TraceWriter& w) {
  for (const auto& e : events) {
    const bool global = e.kind == EventKind::kLeave || e.kind == EventKind::kJoin;
    const bool local = e.kind == EventKind::kAssign || e.kind == EventKind::kDrop ||
                       e.kind == EventKind::kOut || e.kind == EventKind::kTransfer;
    if (!global && !local) continue;
    const std::string name = to_string(e.kind) + (global ? " node " + std::to_string(e.node) : "");
    if (global) {
      w.emit({{"ph", "i"},
              {"s", "g"},
              {"name", name},
              {"cat", "churn"},
              {"pid", 0},
              {"tid", 0},
              {"ts", e.start * 1e6}});
      continue;
    }
    if (e.node < 0 || e.node >= plan.nodes || !traced[static_cast<size_t>(e.node)]) continue;
    nlohmann::json ev = {
        {"name", name},
        {"cat", "churn"},
        {"pid", e.cluster + 1},
        {"tid", e.node},
        {"ts", e.start * 1e6},
        {"args", {{"micro_batch", e.micro_batch}, {"step", e.step}, {"peer", e.peer}}}};
    if (e.kind == EventKind::kTransfer) {
      ev["ph"] = "X";
      ev["dur"] = (e.end - e.start) * 1e6;
    } else {
      ev["ph"] = "i";
      ev["s"] = "t";
    }
    w.emit(ev);
  }
}

// trace.json: the nodes of traced_nodes(), or under churn with every node traced, all of them
// (a spare may take any stage).
std::string trace_text(const Scenario& s, const Plan& plan, const std::vector<Event>& events) {
  std::vector<char> traced = traced_nodes(plan, s.output.trace_nodes);
  if (s.nodes_may_leave() && s.output.trace_nodes <= 0) traced.assign(traced.size(), 1);
  TraceWriter w;
  emit_trace_rows(s, plan, traced, w);
  emit_trace_spans(plan, events, traced, w);
  emit_trace_churn(plan, events, traced, w);
  return w.finish();
}

std::string eval_csv_text(const std::vector<Event>& events) {
  std::ostringstream ev;
  ev << eval_csv_header() << "\n";
  for (const auto& e : events)
    if (e.kind == EventKind::kEval) append_eval_row(ev, e);
  return ev.str();
}

}  // namespace

void write_run_outputs(const std::string& dir, const Scenario& s, const Plan& plan,
                       const ModelDesc& model, std::vector<Event> events, const RunInfo& info) {
  const fs::path tmp(dir);
  sort_events(events);
  write_file(tmp / "scenario.toml", to_toml(s));
  write_file(tmp / "plan.json", plan_file_text(plan, model));
  if (s.output.metrics == MetricsOutput::kSummary)
    write_file(tmp / "node_metrics.csv", node_metrics_csv(s, plan, events));
  else
    write_events_csv((tmp / "metrics.csv").string(), events);
  if (std::any_of(events.begin(), events.end(),
                  [](const Event& e) { return e.kind == EventKind::kParams; }))
    write_params_csv((tmp / "params.csv").string(), events);
  write_file(tmp / "eval.csv", eval_csv_text(events));
  write_file(tmp / "summary.json", summarize(s, plan, events, info).dump(2) + "\n");
  write_file(tmp / "run.json", run_json_text(info, "complete", ""));
  if (s.output.trace) write_file(tmp / "trace.json", trace_text(s, plan, events));
}

std::string write_run_folder(const std::string& path, const Scenario& s, const Plan& plan,
                             const ModelDesc& model, std::vector<Event> events,
                             const RunInfo& info) {
  fs::path final_path = fs::absolute(fs::path(path)).lexically_normal();
  if (fs::exists(final_path)) throw Error(path + ": run folder exists already");
  fs::create_directories(final_path.parent_path());
  fs::path tmp = final_path.parent_path() / ("." + final_path.filename().string() + ".partial");
  fs::remove_all(tmp);
  fs::create_directories(tmp);
  try {
    write_run_outputs(tmp.string(), s, plan, model, std::move(events), info);
    fs::rename(tmp, final_path);
  } catch (...) {
    std::error_code ec;
    fs::remove_all(tmp, ec);
    throw;
  }
  return final_path.string();
}

}  // namespace rv
