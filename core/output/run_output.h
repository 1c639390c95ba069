// Run outputs: the run folder, with one schema for every executor.
//
//   runs/<scenario>/<executor>-<timestamp>/
//     scenario.toml  resolved scenario (every key)
//     plan.json      clusters, stages, layer ranges, predicted stage times, model profile
//     metrics.csv    one row per event, a column per field of Event (core/output/metrics.h says
//                    what each holds; core/output/event_schema.h's table names the columns);
//                    times in seconds from the run's start
//     eval.csv       the kEval events: time, node, training samples so far, test loss and
//                    accuracy (event_schema.h's eval_columns)
//     node_metrics.csv  instead of metrics.csv where output.metrics = "summary": one row per node
//                    (node_metrics_csv)
//     summary.json   totals, per-node busy/idle fractions, bytes, memory, staleness, accuracy
//     trace.json     Chrome trace events (one row per node: forward, backward, update, wait); only
//                    the nodes of traced_nodes() where output.trace_nodes > 0
//     params.csv     models that record their parameters (ModelDesc::record_params): one row per
//                    stage update, node,cluster,stage,step,time_s,values (the stage's flat
//                    parameters after update `step`, space-separated)
//
// Contract: write_run_folder() writes into a hidden temporary folder beside the target and
// renames it into place at the end, so a failed write leaves no half-written run folder. A run
// started from the command line writes its folder as it goes instead (core/output/live_run.h).
#pragma once

#include <iosfwd>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "core/model/model.h"
#include "core/output/event_schema.h"
#include "core/output/metrics.h"
#include "core/plan.h"
#include "core/scenario/scenario.h"

namespace rv {

struct RunInfo {
  std::string executor;        // "sim", "real", "loopback"
  std::string mode;            // sim: numeric | timing; real: cpu | cuda
  double wall_seconds = 0;     // wall-clock duration of the run
  std::string variant;         // what ran, for reports (algo/registry.h: variant_label)
  double started_unix_s = -1;  // when it started, by the executor's calendar clock (s since the
                               // Unix epoch; exec/wall_env.h unix_now_s); < 0: not known
  std::string resumed_from;    // a resumed run: the run folder it continues (run.json)
  int64_t resumed_at = -1;     // ... from its checkpoint after this many updates
};

// The path a run of `executor` would get now: <dir>/<name>/<executor>-<YYYYmmdd-HHMMSS>[-k].
std::string new_run_path(const Scenario& s, const std::string& executor);

// Summary statistics of a run (also embedded in summary.json).
nlohmann::json summarize(const Scenario& s, const Plan& plan, const std::vector<Event>& events,
                         const RunInfo& info);

// Writes every output file to `path` (which must not exist yet); returns `path`. `events` is
// taken by value: callers that are done with theirs move them in (a 1,024-node run holds 5
// million).
std::string write_run_folder(const std::string& path, const Scenario& s, const Plan& plan,
                             const ModelDesc& model, std::vector<Event> events,
                             const RunInfo& info);

// The nodes trace.json shows (output.trace_nodes = `limit`): every node for 0; otherwise whole
// clusters, taken evenly spaced over the plan's clusters until `limit` nodes (at least one
// cluster). traced[i] != 0 for node i shown; idle nodes are never shown.
std::vector<char> traced_nodes(const Plan& plan, int limit);

// node_metrics.csv (output.metrics = "summary"): one row per node of the plan, its count and
// seconds of each span kind, its messages and bytes each way, its peak modeled memory and the end
// of its last event (count: Event::count, so folded totals count every message).
std::string node_metrics_csv(const Scenario& s, const Plan& plan, const std::vector<Event>& events);

// plan.json's text: the plan and the model's layers.
std::string plan_file_text(const Plan& plan, const ModelDesc& model);
// run.json's text: what ran (`info`), `status` (running, complete, failed, stopped, interrupted),
// why it ended (under why_key(status)), and the provenance (core/output/provenance.h) of a run that
// started at info.started_unix_s.
std::string run_json_text(const RunInfo& info, const std::string& status, const std::string& why);
// run.json's key for why a run ended: "error" for a failed run, "reason" for one stopped or
// interrupted.
inline const char* why_key(const std::string& status) {
  return status == "failed" ? "error" : "reason";
}
// Every output file of a finished run into the folder `dir`, which exists (write_run_folder and
// LiveRun::finish write into a temporary folder and move the files into place).
void write_run_outputs(const std::string& dir, const Scenario& s, const Plan& plan,
                       const ModelDesc& model, std::vector<Event> events, const RunInfo& info);
// params.csv (the kParams events), as text and as files (metrics.csv and eval.csv:
// core/output/event_schema.h); the parsers throw rv::InputError naming `where` (the readers: the
// file) and the line of what is wrong.
std::string params_csv(const std::vector<Event>& events);
std::vector<Event> parse_params_csv(std::istream& in, const std::string& where);
void write_events_csv(const std::string& path, const std::vector<Event>& events);
std::vector<Event> read_events_csv(const std::string& path);
void write_params_csv(const std::string& path, const std::vector<Event>& events);
std::vector<Event> read_params_csv(const std::string& path);

// A run folder's JSON file (plan.json, summary.json); rv::InputError naming it if it cannot be
// read or is not JSON.
nlohmann::json read_json_file(const std::string& path);

// Events sorted by (end, node, kind) for stable outputs.
void sort_events(std::vector<Event>& events);

}  // namespace rv
