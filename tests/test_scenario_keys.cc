// The scenario key table drives the reader, the resolved-scenario writer, the messages and the
// README: defaults, round trips, one message (file, line, key) per kind of bad input, where(), and
// the README's key list against the table.
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "catch.h"
#include "core/error.h"
#include "core/scenario/keys.h"
#include "core/scenario/scenario.h"
#include "scenario_errors.h"

using namespace rv;

namespace {

using test::error_of;
using test::kMinimal;

bool in_array(const KeySpec& k) {
  for (const TableSpec& t : scenario_tables())
    if (t.path == k.table) return t.is_array;
  FAIL("no table '" << k.table << "'");
  return false;
}

bool is_device_name(const KeySpec& k) { return k.table == "devices" && k.name == "name"; }

// Elements given to each array of tables where every key is changed: three device groups in
// three regions (devices[i].region = "r<i>"), joined by three links, and two manual clusters.
size_t elements_of(const std::string& table) {
  if (table == "devices" || table == "network.link") return 3;
  return 2;
}

// A valid value of `k` that differs from its default (for element `index`).
// A compute profile file that exists (devices[].profile names a file the reader loads).
std::string profile_file() {
  static const std::string path = [] {
    const std::string p = (std::filesystem::temp_directory_path() /
                           ("rv-keys-profile-" + std::to_string(::getpid()) + ".toml"))
                              .string();
    std::ofstream(p) << profile_to_toml(ComputeProfile{});
    return p;
  }();
  return path;
}

// network.platform takes the whole network, so it cannot change with network.topology and the
// links between regions: it keeps its default here (tests/test_sim_engine.cc reads and refuses it).
bool kept_default(const KeySpec& k) { return k.table == "network" && k.name == "platform"; }

// A device's buffer is in ms or in packets, not both: groups 0 and 1 change buffer_ms, group 2
// buffer_packets, and each keeps the other's default.
bool other_buffer_kept(const KeySpec& k, size_t index) {
  return k.table == "devices" &&
         ((k.name == "buffer_packets" && index < 2) || (k.name == "buffer_ms" && index >= 2));
}

KeyValue other_value(const KeySpec& k, size_t index) {
  const KeyValue def = k.default_at(index);
  if (kept_default(k) || other_buffer_kept(k, index)) return def;
  switch (k.type) {
    case KeyType::kString:
      if (k.table == "devices" && k.name == "profile") return KeyValue(profile_file());
      if (k.table == "devices" && k.name == "region") return KeyValue("r" + std::to_string(index));
      // Links r0-r1, r1-r2, r0-r2: every pair of the devices' regions once.
      if (k.table == "network.link" && k.name == "a") return KeyValue(index == 1 ? "r1" : "r0");
      if (k.table == "network.link" && k.name == "b") return KeyValue(index == 0 ? "r1" : "r2");
      return KeyValue("v" + std::to_string(index) + "-" + k.name);
    case KeyType::kChoice:
      return KeyValue(std::get<std::string>(def) == k.choices.front() ? k.choices.back()
                                                                      : k.choices.front());
    case KeyType::kBool:
      return KeyValue(!std::get<bool>(def));
    case KeyType::kToggle:  // "auto" -> true; true or false -> "auto"
      return std::holds_alternative<std::string>(def) ? KeyValue(true) : KeyValue(k.word);
    case KeyType::kInteger:
    case KeyType::kIntegerOrWord:
      return KeyValue(std::get<int64_t>(def) != k.lo ? k.lo : k.lo + 1);
    case KeyType::kReal:
      // Only the last device group arrives later (groups that arrive come last; some must be
      // there from the start).
      if (k.table == "devices" && k.name == "join_at_s") return KeyValue(index == 2 ? 30.0 : 0.0);
      return KeyValue(k.real_lo + (k.real_hi - k.real_lo) * 0.123456789012345);
    case KeyType::kIntegerList:
      return KeyValue(std::vector<int64_t>{k.lo + 1, k.lo + static_cast<int64_t>(index)});
  }
  return def;
}

// A scenario file giving every key of every table a non-default value; two elements per array.
std::string every_key_changed() {
  std::ostringstream os;
  for (const TableSpec& t : scenario_tables()) {
    for (size_t i = 0; i < (t.is_array ? elements_of(t.path) : 1u); ++i) {
      if (t.is_array)
        os << "[[" << t.path << "]]\n";
      else if (!t.path.empty())
        os << "[" << t.path << "]\n";
      for (const KeySpec& k : scenario_keys())
        if (k.table == t.path)
          os << k.name << " = " << toml_value_text(k, other_value(k, i)) << "\n";
    }
  }
  return os.str();
}

std::string doc_key(const KeySpec& k) {
  if (k.table.empty()) return k.name;
  return k.table + (in_array(k) ? "[]." : ".") + k.name;
}

}  // namespace

TEST_CASE("every key's default is its struct member's initial value", "[scenario][keys]") {
  Scenario fresh;
  fresh.devices.resize(1);
  fresh.planner.cluster.resize(1);
  fresh.network.link.resize(1);
  fresh.churn.event.resize(1);
  for (const KeySpec& k : scenario_keys()) {
    INFO(k.dotted());
    if (is_device_name(k)) {
      CHECK(std::get<std::string>(k.default_at(3)) == "device3");
      CHECK(k.default_text == "\"device<i>\"");
      continue;
    }
    CHECK(k.get(fresh, 0) == k.default_at(0));
    CHECK(k.default_at(5) == k.default_at(0));
    CHECK(k.default_text == toml_value_text(k, k.default_at(0)));
  }
  // Spot checks that the binding reaches the right member.
  CHECK(!fresh.training.algorithm.empty());
  CHECK(fresh.model.head == Head::kNone);
  CHECK(fresh.data.features == 16);
  CHECK(fresh.data.targets == 1);
}

TEST_CASE("a minimal scenario reads every key's default", "[scenario][keys]") {
  Scenario s = parse_scenario(kMinimal, "mini.toml");
  REQUIRE(s.devices.size() == 1);
  CHECK(s.planner.cluster.empty());
  for (const KeySpec& k : scenario_keys()) {
    if (k.table == "planner.cluster" || k.table == "network.link" || k.table == "churn.event")
      continue;  // none given
    INFO(k.dotted());
    if (k.name == "name" && k.table.empty()) continue;        // given
    if (k.table == "devices" && k.name == "count") continue;  // given
    CHECK(k.get(s, 0) == k.default_at(0));
  }
  CHECK(s.devices[0].name == "device0");
}

TEST_CASE("keys are unique, in table order, each with help", "[scenario][keys]") {
  std::set<std::string> seen;
  size_t table = 0;
  const auto& tables = scenario_tables();
  for (const KeySpec& k : scenario_keys()) {
    INFO(k.dotted());
    CHECK(seen.insert(k.table + "." + k.name).second);
    CHECK(!k.help.empty());
    while (table < tables.size() && tables[table].path != k.table) ++table;
    CHECK(table < tables.size());  // grouped by table, tables in order
    if (k.type == KeyType::kChoice) CHECK(k.choices.size() >= 1);
    if (k.type == KeyType::kIntegerOrWord) CHECK(!k.word.empty());
  }
  CHECK(seen.size() == scenario_keys().size());
}

TEST_CASE("every key, changed from its default, is read and written back", "[scenario][keys]") {
  const std::string text = every_key_changed();
  INFO(text);
  Scenario s = parse_scenario(text, "all.toml");
  REQUIRE(s.devices.size() == 3);
  REQUIRE(s.network.link.size() == 3);
  REQUIRE(s.planner.cluster.size() == 2);
  Scenario t = parse_scenario(to_toml(s), "resolved.toml");
  for (const KeySpec& k : scenario_keys()) {
    for (size_t i = 0; i < (in_array(k) ? elements_of(k.table) : 1u); ++i) {
      INFO(k.dotted(i) << ": " << toml_value_text(k, k.get(s, i)));
      const bool first_groups_stay = k.table == "devices" && k.name == "join_at_s" && i < 2;
      if ((k.type != KeyType::kChoice || k.choices.size() > 1) && !kept_default(k) &&
          !first_groups_stay && !other_buffer_kept(k, i))
        CHECK(!(other_value(k, i) == k.default_at(i)));
      CHECK(k.get(s, i) == other_value(k, i));
      CHECK(k.get(t, i) == k.get(s, i));
    }
  }
  CHECK(to_toml(t).substr(to_toml(t).find('\n')) == to_toml(s).substr(to_toml(s).find('\n')));
}

TEST_CASE("the resolved scenario: header, words for 0, arrays of tables", "[scenario][keys]") {
  Scenario s =
      parse_scenario(std::string(kMinimal) + "[[planner.cluster]]\nnodes = [1, 0]\n", "mini.toml");
  const std::string out = to_toml(s);
  CHECK(out.rfind("# Resolved scenario: every key, defaults filled in. Source: mini.toml\n", 0) ==
        0);
  CHECK(out.find("max_in_flight = \"stages\"\n") != std::string::npos);
  CHECK(out.find("clusters = \"auto\"\n") != std::string::npos);
  CHECK(out.find("\n[[devices]]\nname = \"device0\"\ncount = 2\n") != std::string::npos);
  CHECK(out.find("\n[[planner.cluster]]\nnodes = [1, 0]\n") != std::string::npos);
  CHECK(out.find("up_mbps = 100.0  # Mbit/s\n") != std::string::npos);
  Scenario t = parse_scenario(out, "resolved.toml");
  CHECK(t.training.max_in_flight == 0);
  CHECK(t.planner.clusters == 0);
  CHECK(t.planner.cluster[0].nodes == std::vector<int64_t>{1, 0});
  CHECK(t.devices[0].name == "device0");
}

TEST_CASE("each kind of bad value names file, line, key and what is wrong", "[scenario][keys]") {
  struct Case {
    const char* body;  // appended to a valid head of 3 lines (name, one [[devices]] of 2 nodes)
    int line;          // where the message points
    const char* key;
    const char* what;
  };
  const Case cases[] = {
      {"[data]\npath = 3\n", 5, "data.path", "expected a string"},
      {"[model]\nkind = \"rnn\"\n", 5, "model.kind",
       "unknown value 'rnn' (expected one of: mlp, blocks, cnn, transformer)"},
      {"[model]\nhead = \"mlp\"\n", 5, "model.head",
       "unknown value 'mlp' (expected one of: none, linear)"},
      {"[output]\ntrace = 1\n", 5, "output.trace", "expected true or false"},
      {"[training]\nsteps = 1.5\n", 5, "training.steps", "expected an integer"},
      {"[model]\nkernel = 17\n", 5, "model.kernel", "value 17 is out of range [1, 15]"},
      {"[training]\nlr = \"fast\"\n", 5, "training.lr", "expected a number"},
      {"[training]\nlr = 0\n", 5, "training.lr", "value 0 is out of range (0, 100]"},
      {"[model]\ndropout = 0.99\n", 5, "model.dropout", "value 0.99 is out of range [0, 0.95]"},
      {"[model]\nhidden = [8, \"x\"]\n", 5, "model.hidden", "expected an array of integers"},
      {"[model]\nchannels = [\n  4,\n  0,\n]\n", 7, "model.channels",
       "element 0 is out of range [1, 65536]"},
      {"[model]\nchannels = []\n", 5, "model.channels", "must not be empty"},
      {"[training]\nmax_in_flight = \"all\"\n", 5, "training.max_in_flight",
       "expected \"stages\" or an integer in [1, 1000000]"},
      {"[planner]\nclusters = 0\n", 5, "planner.clusters",
       "expected \"auto\" or an integer in [1, 100000]"},
      {"[training]\nalgorithm = \"\"\n", 5, "training.algorithm", "must not be empty"},
      {"[data]\nfeatures = 0\n", 5, "data.features", "value 0 is out of range [1, 1048576]"},
      {"[data]\nkind = \"imagenet\"\n", 5, "data.kind",
       "unknown value 'imagenet' (expected one of: synthetic, quadratic, logistic, fashion-mnist, "
       "digits, "
       "regression, sort, text)"},
      {"[output]\ndir = \"\"\n", 5, "output.dir", "must not be empty"},
      {"[real]\nmaster_port = 65536\n", 5, "real.master_port",
       "value 65536 is out of range [0, 65535]"},
      // Checks across keys, after reading.
      {"[model]\nkernel = 4\n", 5, "model.kernel", "must be odd (padding keeps the size)"},
      {"[faults]\nnode = 2\n", 5, "faults.node", "no node 2 in a pool of 2"},
      {"[planner]\nclusters = 3\n", 5, "planner.clusters",
       "asks for 3 clusters but the pool has 2 nodes"},
      {"[[planner.cluster]]\nstage_layers = [1]\n", 4, "planner.cluster[0].nodes",
       "missing: the cluster's nodes in pipeline order"},
      {"[[devices]]\ncount = 99999\n", 2, "devices", "more than 100000 nodes"},
      // A key that would do nothing is refused, never taken silently.
      {"[[devices]]\nregion = \"eu\"\n", 5, "devices[1].region",
       "a region does nothing under network.topology = \"star\": set topology = \"regions\" and "
       "give "
       "[[network.link]] entries, or leave it out"},
  };
  for (const Case& c : cases) {
    const std::string e = error_of(std::string("name = \"x\"\n[[devices]]\ncount = 2\n") + c.body);
    INFO(c.body << " -> " << e);
    CHECK(e == "bad.toml:" + std::to_string(c.line) + ": key '" + c.key + "': " + c.what);
  }
}

TEST_CASE("bad tables and names are reported with their key", "[scenario][keys]") {
  CHECK(error_of("name = \"a b\"\n[[devices]]\n").find("bad.toml:1: key 'name': must be") == 0);
  CHECK(error_of("name = \"x\"\nmodel = 3\n[[devices]]\n")
            .find("bad.toml:2: key 'model': expected a table [model]") == 0);
  CHECK(error_of("name = \"x\"\n").find("key 'devices': missing") != std::string::npos);
  CHECK(error_of("name = \"x\"\ndevices = []\n").find("bad.toml:2: key 'devices'") == 0);
  CHECK(
      error_of(kMinimal, {"devices.0.count=0"}).find("bad.toml (--set): key 'devices[0].count'") ==
      0);
  CHECK(error_of(kMinimal, {"name=x y"}).find("bad.toml (--set): key 'name': must be") == 0);
  // The name is one folder under output.dir: never a path, ".." or a hidden or option-like name.
  for (const char* bad : {"..", ".", ".hidden", "-x", "a/b", "a\\b", "caf\u00e9", "a\tb", ""}) {
    INFO(bad);
    CHECK(error_of(std::string("name = \"") + bad + "\"\n[[devices]]\n")
              .find("bad.toml:1: key 'name': ") == 0);
  }
  CHECK(error_of("name = \"" + std::string(129, 'n') + "\"\n[[devices]]\n")
            .find("bad.toml:1: key 'name'") == 0);
  CHECK_NOTHROW(
      parse_scenario("name = \"" + std::string(128, 'n') + "\"\n[[devices]]\n", "ok.toml"));
  CHECK_NOTHROW(parse_scenario("name = \"A.b_c-9\"\n[[devices]]\n", "ok.toml"));
  CHECK(error_of(std::string(kMinimal) + "[planner]\ncluster = 3\n")
            .find("bad.toml:5: key 'planner.cluster': expected [[planner.cluster]] tables") == 0);
}

TEST_CASE("input past the TOML limits is refused before the parser, naming the line",
          "[scenario][keys]") {
  // toml++ recursed once per key part and overflowed the stack on these (exit 139).
  std::string deep_header = "[a";
  for (int i = 0; i < 40000; ++i) deep_header += ".a";
  CHECK(error_of(std::string(kMinimal) + deep_header + "]\n")
            .find("bad.toml:4: a key of more than 16 parts") == 0);
  std::string deep_key = "a";
  for (int i = 0; i < 100000; ++i) deep_key += ".a";
  CHECK(error_of(deep_key + " = 1\n" + kMinimal).find("bad.toml:1: a key of more than 16 parts") ==
        0);
  // And through --set: its path and its value.
  CHECK(error_of(kMinimal, {deep_key + "=1"}).find("--set: key 'a.a.a") == 0);
  CHECK(error_of(kMinimal, {"training.lr=" + std::string(100, '[')})
            .find("--set training.lr:1: arrays and inline tables nested") == 0);
}

TEST_CASE("an unknown key is rejected in every table", "[scenario][keys]") {
  for (const TableSpec& t : scenario_tables()) {
    std::string text = "name = \"x\"\n[[devices]]\ncount = 2\n";
    std::string key = t.path.empty() ? "no_such_key" : t.path + ".no_such_key";
    int line = 5;
    if (t.path.empty()) {
      text = "no_such_key = 1\n" + text;
      line = 1;
    } else if (t.path == "devices") {
      text += "no_such_key = 1\n";
      key = "devices[0].no_such_key";
      line = 4;
    } else if (t.is_array) {
      text += "[[" + t.path + "]]\nno_such_key = 1\n";
      key = t.path + "[0].no_such_key";
    } else {
      text += "[" + t.path + "]\nno_such_key = 1\n";
    }
    if (t.path == "training") {
      // The algorithm may declare keys of its own here: they are kept for its registry to
      // check (test_registry.cc), with their line.
      const Scenario s = parse_scenario(text, "bad.toml");
      CHECK(s.training.algorithm_keys.at("no_such_key") == KeyValue(int64_t{1}));
      CHECK(s.where(key) == "bad.toml:" + std::to_string(line));
      continue;
    }
    const std::string e = error_of(text);
    INFO(text << " -> " << e);
    CHECK(e == "bad.toml:" + std::to_string(line) + ": key '" + key + "': unknown key");
  }
}

TEST_CASE("where() gives the line a key was given on, or the file alone", "[scenario][keys]") {
  const char* text = R"(name = "w"
[[devices]]
count = 2
[[devices]]
up_mbps = 5.0
[training]
algorithm = "someone"
lr = 0.5
[[planner.cluster]]
nodes = [0, 1]
)";
  Scenario s = parse_scenario(text, "w.toml", {"training.lr=0.25"});
  CHECK(s.where("name") == "w.toml:1");
  CHECK(s.where("devices[0].count") == "w.toml:3");
  CHECK(s.where("devices[1].up_mbps") == "w.toml:5");
  CHECK(s.where("training.algorithm") == "w.toml:7");
  CHECK(s.where("planner.cluster[0].nodes") == "w.toml:10");
  CHECK(s.where("training.lr") == "w.toml (--set)");
  CHECK(s.training.lr == 0.25);
  CHECK(s.where("training.steps") == "w.toml");  // defaulted
  CHECK(s.where("devices[1].count") == "w.toml");
  // A later check (the algorithm registry) reports the file, line and key of the value.
  const ScenarioError e(s.where("training.algorithm"), "training.algorithm", "unknown value");
  CHECK(std::string(e.what()) == "w.toml:7: key 'training.algorithm': unknown value");
}

TEST_CASE("keys_markdown lists each key once, and keys_text each help", "[scenario][keys]") {
  const std::string md = keys_markdown();
  std::istringstream lines(md);
  size_t rows = 0;
  for (std::string line; std::getline(lines, line);) ++rows;
  CHECK(rows == scenario_keys().size() + 2);  // header and separator
  const std::string text = keys_text();
  for (const KeySpec& k : scenario_keys()) {
    const std::string cell = "| `" + doc_key(k) + "` |";
    INFO(cell);
    const size_t at = md.find(cell);
    CHECK(at != std::string::npos);
    CHECK(md.find(cell, at + 1) == std::string::npos);
    CHECK(text.find(k.help) != std::string::npos);
  }
  const std::string extra = keys_markdown({{"training.algorithm", {"a1", "a2"}}});
  const std::string row =
      "| `training.algorithm` | choice |  | `\"" + TrainingSpec{}.algorithm + "\"` | a1, a2 |";
  CHECK(extra.find(row) != std::string::npos);
  CHECK(keys_text({{"training.algorithm", {"a1", "a2"}}}).find("a1, a2") != std::string::npos);
}

// The README's key list is checked in tests/test_registry.cc: it holds the registry's choices
// and the algorithms' own keys besides this table's.

TEST_CASE("a device's buffer is in ms or in packets, not both", "[scenario][keys]") {
  const std::string e =
      error_of("name = \"x\"\n[[devices]]\ncount = 2\nbuffer_ms = 20\nbuffer_packets = 50\n");
  CHECK(e.find("bad.toml:5: key 'devices[0].buffer_packets'") == 0);
  CHECK(e.find("not both") != std::string::npos);
  CHECK(parse_scenario("name = \"x\"\n[[devices]]\nbuffer_ms = 20\n", "b.toml")
            .devices[0]
            .buffer_ms == 20);
}
