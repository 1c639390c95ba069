// Run folders: every file is written, metrics round-trip, a failure leaves nothing behind.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "catch.h"
#include "core/output/live_run.h"
#include "core/output/provenance.h"
#include "core/output/run_output.h"
#include "emu_support.h"
#include "test_support.h"

using namespace rv;
namespace fs = std::filesystem;

namespace {

std::vector<Event> some_events() {
  std::vector<Event> ev;
  for (int i = 0; i < 6; ++i) {
    Event f;
    f.kind = EventKind::kForward;
    f.node = i % 2;
    f.cluster = 0;
    f.stage = i % 2;
    f.micro_batch = i / 2;
    f.start = i * 1.0;
    f.end = i * 1.0 + 0.5;
    ev.push_back(f);
    Event b = f;
    b.kind = EventKind::kBackward;
    b.start += 0.5;
    b.end += 0.75;
    ev.push_back(b);
    Event u = b;
    u.kind = EventKind::kUpdate;
    u.staleness = i % 3;
    u.start = u.end;
    ev.push_back(u);
  }
  Event l;
  l.kind = EventKind::kLoss;
  l.node = 1;
  l.loss = 0.125;
  l.end = l.start = 2.0;
  ev.push_back(l);
  Event e;
  e.kind = EventKind::kEval;
  e.node = 1;
  e.accuracy = 0.75;
  e.loss = 0.5;
  e.end = e.start = 6.0;
  ev.push_back(e);
  return ev;
}

}  // namespace

TEST_CASE("metrics.csv round-trips", "[output]") {
  auto ev = some_events();
  fs::path p = fs::temp_directory_path() / "rv_test_metrics.csv";
  write_events_csv(p.string(), ev);
  auto back = read_events_csv(p.string());
  REQUIRE(back.size() == ev.size());
  for (size_t i = 0; i < ev.size(); ++i) {
    CHECK(back[i].kind == ev[i].kind);
    CHECK(back[i].node == ev[i].node);
    CHECK(back[i].end == Approx(ev[i].end));
    CHECK(back[i].staleness == ev[i].staleness);
  }
  CHECK(back.back().accuracy == 0.75);
  fs::remove(p);
}

TEST_CASE("metrics.csv carries a GPU span's kernel time and reads folders written before it",
          "[output]") {
  std::vector<Event> ev = some_events();
  ev[0].device = 0.25;  // a forward on a GPU
  Event gpu;
  gpu.kind = EventKind::kMeasuredDeviceMemory;
  gpu.node = 1;
  gpu.bytes = 123456789;
  ev.push_back(gpu);
  std::istringstream now(events_csv(ev));
  const std::vector<Event> back = parse_events_csv(now, "metrics.csv");
  REQUIRE(back.size() == ev.size());
  CHECK(back[0].device == 0.25);
  CHECK(std::isnan(back[1].device));
  CHECK(back.back().kind == EventKind::kMeasuredDeviceMemory);
  CHECK(back.back().bytes == 123456789);
  // A folder from before device_s: its 16 columns read with device_s empty.
  std::istringstream old(
      "kind,node,cluster,stage,step,micro_batch,start_s,end_s,loss,accuracy,staleness,bytes,peer,"
      "samples,cpu_s,grad_norm2\n"
      "forward,0,0,0,-1,3,1,1.5,,,-1,0,-1,0,0.4,\n");
  const std::vector<Event> older = parse_events_csv(old, "old.csv");
  REQUIRE(older.size() == 1);
  CHECK(older[0].cpu == 0.4);
  CHECK(std::isnan(older[0].device));
  // But not a row of one header under the other.
  std::istringstream mixed(
      "kind,node,cluster,stage,step,micro_batch,start_s,end_s,loss,accuracy,staleness,bytes,peer,"
      "samples,cpu_s,grad_norm2\n"
      "forward,0,0,0,-1,3,1,1.5,,,-1,0,-1,0,0.4,,0.1\n");
  CHECK_THROWS_AS(parse_events_csv(mixed, "mixed.csv"), InputError);
}

TEST_CASE("metrics.csv is read by its header's names", "[output]") {
  // Columns in another order, the optional ones left out: each field found by its name.
  std::istringstream reordered(
      "end_s,start_s,node,kind,bytes\n"
      "1.5,1,3,send,4096\n");
  const std::vector<Event> back = parse_events_csv(reordered, "reordered.csv");
  REQUIRE(back.size() == 1);
  CHECK(back[0].kind == EventKind::kSend);
  CHECK(back[0].node == 3);
  CHECK(back[0].start == 1.0);
  CHECK(back[0].end == 1.5);
  CHECK(back[0].bytes == 4096);
  CHECK(back[0].cluster == Event{}.cluster);
  CHECK(std::isnan(back[0].loss));
  // What cannot be read says where and what.
  auto error_of = [](const std::string& text) {
    std::istringstream in(text);
    try {
      parse_events_csv(in, "m.csv");
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  CHECK(error_of("kind,node,start_s\nsend,0,1\n") ==
        "m.csv:1: not a metrics.csv header: no column 'end_s'");
  CHECK(error_of("kind,node,start_s,end_s,lost\n") ==
        "m.csv:1: not a metrics.csv header: unknown column 'lost'");
  CHECK(error_of("kind,node,start_s,end_s,node\n") ==
        "m.csv:1: not a metrics.csv header: column 'node' twice");
  CHECK(error_of("kind,node,start_s,end_s\nsend,0,1\n") == "m.csv:2: expected 4 fields");
  CHECK(error_of("kind,node,start_s,end_s\nsent,0,1,2\n") == "m.csv:2: unknown event kind 'sent'");
  CHECK(error_of("kind,node,start_s,end_s\nsend,x,1,2\n").rfind("m.csv:2: bad field", 0) == 0);
}

TEST_CASE("one table drives metrics.csv's header and rows, eval.csv and the event encoding",
          "[output]") {
  // Every field but the checkpoint-only ones is a column, in the table's order.
  std::string header;
  for (const EventField& f : event_fields())
    if (f.column != nullptr) header += (header.empty() ? "" : ",") + std::string(f.column);
  CHECK(metrics_csv_header() == header);
  // A row has a field per column, and writing what was read gives the same text.
  const std::string text = events_csv(some_events());
  std::istringstream in(text);
  CHECK(events_csv(parse_events_csv(in, "m.csv")) == text);
  // eval.csv shows a kEval event through its own columns.
  Event e;
  e.kind = EventKind::kEval;
  e.end = 2.5;
  e.node = 4;
  e.cluster = 1;
  e.step = 10;
  e.samples = 640;
  e.loss = 0.25;
  std::ostringstream row;
  append_eval_row(row, e);
  CHECK(eval_csv_header() == "time_s,node,cluster,step,train_samples,test_loss,test_accuracy");
  CHECK(row.str() == "2.500000000,4,1,10,640,0.25,\n");
  // The encoding's size: kind, node, cluster, stage, peer as int32; count and the values' count.
  CHECK(min_encoded_event_bytes() == 5 * 4 + 14 * 8);
}

TEST_CASE("summary.json gives each node's measured GPU memory", "[output]") {
  auto p = test::prepare("name = \"out\"\n[model]\nhead = \"linear\"\n[[devices]]\ncount = 2\n", {},
                         false);
  std::vector<Event> ev = some_events();
  Event gpu;
  gpu.kind = EventKind::kMeasuredDeviceMemory;
  gpu.node = 1;
  gpu.bytes = 5000;
  ev.push_back(gpu);
  const nlohmann::json j = summarize(p.scenario, p.plan, ev, RunInfo{});
  CHECK(j["per_node"][1]["measured_device_peak_bytes"].get<int64_t>() == 5000);
  CHECK(j["per_node"][0]["measured_device_peak_bytes"].get<int64_t>() == 0);
}

TEST_CASE("a run folder holds every output file", "[output]") {
  auto p = test::prepare("name = \"out\"\n[model]\nhead = \"linear\"\n[[devices]]\ncount = 2\n", {},
                         false);
  fs::path dir = fs::temp_directory_path() / "rv_test_run_folder";
  fs::remove_all(dir);
  RunInfo info{"sim", "numeric", 1.5};
  info.started_unix_s = 1795651200.25;  // 2026-11-26 00:00:00.250 UTC
  write_run_folder(dir.string(), p.scenario, p.plan, p.model, some_events(), info);
  for (const char* f : {"scenario.toml", "plan.json", "metrics.csv", "eval.csv", "summary.json",
                        "trace.json", "run.json"})
    CHECK(fs::file_size(dir / f) > 0);
  std::ifstream in(dir / "summary.json");
  auto j = nlohmann::json::parse(in);
  CHECK(j["final"]["test_accuracy"].get<double>() == 0.75);
  CHECK(j["per_node"].size() == 2);
  CHECK(j["staleness"]["max"].get<int>() == 2);
  std::ifstream tr(dir / "trace.json");
  auto t = nlohmann::json::parse(tr);
  CHECK(t["traceEvents"].size() > 18);
  // run.json: what ran, and how it was made (version, commit, command line, host, start).
  std::ifstream rj(dir / "run.json");
  auto run = nlohmann::json::parse(rj);
  CHECK(run["status"] == "complete");
  CHECK(run["version"].get<std::string>().find('.') != std::string::npos);
  CHECK(run["commit"].is_string());  // "" where the tree was not a git work tree at build time
  CHECK(run["command_line"] == this_command_line());  // this test's own, as /proc gives it
  CHECK(!this_command_line().empty());
  CHECK(!run["host"].get<std::string>().empty());
  CHECK(run["started_utc"] == "2026-11-26T00:00:00.250Z");
  // Writing again to the same folder is refused and leaves it intact.
  CHECK_THROWS(
      write_run_folder(dir.string(), p.scenario, p.plan, p.model, some_events(), RunInfo{}));
  CHECK(fs::exists(dir / "summary.json"));
  fs::remove_all(dir);
}

namespace {

std::string text_of(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string status_of(const fs::path& dir) {
  std::ifstream in(dir / "run.json");
  return nlohmann::json::parse(in)["status"].get<std::string>();
}

}  // namespace

TEST_CASE("a live run folder shows its rows as they come and ends complete, or failed",
          "[output]") {
  auto p = test::prepare("name = \"out\"\n[model]\nhead = \"linear\"\n[[devices]]\ncount = 2\n", {},
                         false);
  const fs::path base = fs::temp_directory_path() / ("rv_test_live_" + std::to_string(::getpid()));
  fs::remove_all(base);
  const std::vector<Event> events = some_events();
  test::ManualClock wall;
  {
    LiveRun live((base / "run").string(), p.scenario, p.plan, p.model,
                 RunInfo{"sim", "numeric", 0, "ravnest"}, wall);
    // Running: the scenario, the plan and run.json are there at once, with the CSV headers.
    CHECK(status_of(base / "run") == "running");
    CHECK(fs::file_size(base / "run" / "plan.json") > 0);
    CHECK(text_of(base / "run" / "eval.csv") == eval_csv_header() + "\n");
    // An evaluation writes what came so far, in whole rows, in arrival order.
    for (const Event& e : events) live.record(e);
    const std::string rows = text_of(base / "run" / "metrics.csv");
    CHECK(rows.rfind(metrics_csv_header(), 0) == 0);
    CHECK(std::count(rows.begin(), rows.end(), '\n') == static_cast<long>(events.size()) + 1);
    CHECK(rows.back() == '\n');
    CHECK(text_of(base / "run" / "eval.csv").find("0.75") != std::string::npos);
    // A second run cannot take the folder.
    CHECK_THROWS_AS(LiveRun((base / "run").string(), p.scenario, p.plan, p.model, RunInfo{}, wall),
                    Error);
    // Finished: the same files as a run folder written at the end, run.json complete.
    wall.set(1.5);
    CHECK(live.finish(events) == (base / "run").string());
  }
  write_run_folder((base / "whole").string(), p.scenario, p.plan, p.model, events,
                   RunInfo{"sim", "numeric", 1.5, "ravnest"});
  CHECK(status_of(base / "run") == "complete");
  {
    std::ifstream in(base / "run" / "run.json");
    CHECK(nlohmann::json::parse(in)["wall_seconds"].get<double>() == 1.5);
  }
  for (const char* f :
       {"metrics.csv", "eval.csv", "summary.json", "plan.json", "scenario.toml", "trace.json"}) {
    INFO(f);
    CHECK(text_of(base / "run" / f) == text_of(base / "whole" / f));
  }
  CHECK_FALSE(fs::exists(base / "run" / ".final.partial"));
  // A run that fails keeps its rows and says why; one that ends without a word is marked failed.
  {
    LiveRun live((base / "failed").string(), p.scenario, p.plan, p.model,
                 RunInfo{"sim", "numeric", 0, ""}, wall);
    for (const Event& e : events) live.record(e);
    wall.set(4.0);
    live.fail("node 1 crashed");
  }
  {
    std::ifstream in(base / "failed" / "run.json");
    const auto j = nlohmann::json::parse(in);
    CHECK(j["status"] == "failed");
    CHECK(j["error"] == "node 1 crashed");
    CHECK(j["wall_seconds"].get<double>() == 2.5);  // by the run's clock, from its start at 1.5
  }
  CHECK(text_of(base / "failed" / "eval.csv").find("0.75") != std::string::npos);
  { LiveRun live((base / "dropped").string(), p.scenario, p.plan, p.model, RunInfo{}, wall); }
  CHECK(status_of(base / "dropped") == "failed");
  // A run stopped on request keeps its rows and says why as a reason, not an error; a launcher's
  // later word leaves it stopped, but takes a failed (or running) folder for interrupted.
  {
    LiveRun live((base / "stopped").string(), p.scenario, p.plan, p.model,
                 RunInfo{"sim", "numeric", 0, ""}, wall);
    for (const Event& e : events) live.record(e);
    live.stop("stopped after checkpoint 1");
  }
  mark_run((base / "stopped").string(), "interrupted", "interrupted by signal 2");
  mark_run((base / "failed").string(), "interrupted", "interrupted by signal 15");
  {
    std::ifstream in(base / "stopped" / "run.json");
    const auto j = nlohmann::json::parse(in);
    CHECK(j["status"] == "stopped");
    CHECK(j["reason"] == "stopped after checkpoint 1");
    CHECK_FALSE(j.contains("error"));
  }
  CHECK(text_of(base / "stopped" / "eval.csv").find("0.75") != std::string::npos);
  {
    std::ifstream in(base / "failed" / "run.json");
    const auto j = nlohmann::json::parse(in);
    CHECK(j["status"] == "interrupted");
    CHECK(j["reason"] == "interrupted by signal 15");
    CHECK_FALSE(j.contains("error"));
  }
  fs::remove_all(base);
}

TEST_CASE("a live run folder writes its rows at least once a second of its wall clock",
          "[output]") {
  auto p = test::prepare("name = \"out\"\n[model]\nhead = \"linear\"\n[[devices]]\ncount = 2\n", {},
                         false);
  const fs::path dir =
      fs::temp_directory_path() / ("rv_test_live_flush_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  test::ManualClock wall;
  LiveRun live(dir.string(), p.scenario, p.plan, p.model, RunInfo{"sim", "numeric", 0, ""}, wall);
  Event f;
  f.kind = EventKind::kForward;
  f.node = 0;
  auto rows = [&] {
    const std::string t = text_of(dir / "metrics.csv");
    return std::count(t.begin(), t.end(), '\n') - 1;  // less the header
  };
  // The clock is looked at every 256 events: before a second has gone, nothing is written.
  for (int i = 0; i < 1000; ++i) live.record(f);
  CHECK(rows() == 0);
  wall.set(LiveRun::kFlushSeconds);
  for (int i = 0; i < 24; ++i) live.record(f);  // the 1,024th event looks at the clock
  CHECK(rows() == 1024);
  for (int i = 0; i < 100; ++i) live.record(f);
  CHECK(rows() == 1024);  // within the next second
  live.fail("stopped by the test");
  CHECK(rows() == 1124);  // a failing run writes what it had
  fs::remove_all(dir);
}

TEST_CASE("a failed write leaves no run folder", "[output]") {
  auto p = test::prepare("name = \"out\"\n[model]\nhead = \"linear\"\n[[devices]]\ncount = 2\n", {},
                         false);
  fs::path base = fs::temp_directory_path() / "rv_test_ro";
  fs::remove_all(base);
  fs::create_directories(base);
  fs::permissions(base, fs::perms::owner_read | fs::perms::owner_exec);
  if (::geteuid() == 0) {
    // root ignores permissions: use an impossible path instead (a file as parent).
    fs::permissions(base, fs::perms::owner_all);
    std::ofstream(base / "file") << "x";
    CHECK_THROWS(write_run_folder((base / "file" / "run").string(), p.scenario, p.plan, p.model,
                                  some_events(), RunInfo{}));
  } else {
    CHECK_THROWS(write_run_folder((base / "run").string(), p.scenario, p.plan, p.model,
                                  some_events(), RunInfo{}));
  }
  fs::permissions(base, fs::perms::owner_all);
  CHECK_FALSE(fs::exists(base / "run"));
  fs::remove_all(base);
}
