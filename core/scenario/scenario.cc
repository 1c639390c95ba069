#include "core/scenario/scenario.h"

#include <toml++/toml.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <set>
#include <sstream>

#include "core/error.h"
#include "core/input/toml_input.h"
#include "core/scenario/keys.h"

namespace rv {
namespace {

constexpr int kMaxPool = 100000;  // nodes in a scenario, all groups together

// The line of `node` in `source`; 0 when it has none there (defaulted, or from --set).
int line_of(const toml::node* node, const std::string& source) {
  if (!node || node->source().begin.line == 0) return 0;
  const auto& path = node->source().path;
  if (path && *path != source) return 0;
  return static_cast<int>(node->source().begin.line);
}

constexpr const char* kOverrideSource = "--set";

// Whether `node` came from a --set override rather than the file.
bool from_override(const toml::node* node) {
  return node && node->source().path && *node->source().path == kOverrideSource;
}

std::string where_of(const std::string& source, const toml::node* node) {
  if (from_override(node)) return source + " (--set)";
  const int line = line_of(node, source);
  return line > 0 ? source + ":" + std::to_string(line) : source;
}

std::string joined(const std::vector<std::string>& v) {
  std::string out;
  for (const auto& x : v) out += (out.empty() ? "" : ", ") + x;
  return out;
}

// The key being read, for messages.
struct Spot {
  const std::string& source;
  std::string key;    // dotted: "devices[1].up_mbps"
  std::string where;  // where it was given, when known beforehand ("quick.toml:12")

  [[noreturn]] void fail(const toml::node* n, const std::string& what) const {
    throw ScenarioError(where.empty() ? where_of(source, n) : where, key, what);
  }
};

// ---- one value, checked against its row (type, range, choices) ----

std::string range_message(const char* what, int64_t v, int64_t lo, int64_t hi) {
  return std::string(what) + " " + std::to_string(v) + " is out of range [" + std::to_string(lo) +
         ", " + std::to_string(hi) + "]";
}

KeyValue read_string(const KeySpec& k, const toml::node& n, const Spot& at) {
  if (!n.is_string()) at.fail(&n, "expected a string");
  std::string v = *n.value<std::string>();
  if (k.type == KeyType::kChoice &&
      std::find(k.choices.begin(), k.choices.end(), v) == k.choices.end())
    at.fail(&n, "unknown value '" + v + "' (expected one of: " + joined(k.choices) + ")");
  if (!k.allow_empty && v.empty()) at.fail(&n, "must not be empty");
  return KeyValue(std::move(v));
}

KeyValue read_integer(const KeySpec& k, const toml::node& n, const Spot& at) {
  if (!n.is_integer()) at.fail(&n, "expected an integer");
  const int64_t v = *n.value<int64_t>();
  if (v < k.lo || v > k.hi) at.fail(&n, range_message("value", v, k.lo, k.hi));
  return KeyValue(v);
}

KeyValue read_real(const KeySpec& k, const toml::node& n, const Spot& at) {
  if (!n.is_number()) at.fail(&n, "expected a number");
  const double v = *n.value<double>();
  if (!std::isfinite(v) || v < k.real_lo || v > k.real_hi || (k.lo_open && v == k.real_lo)) {
    std::ostringstream os;
    os << "value " << v << " is out of range " << (k.lo_open ? "(" : "[") << k.real_lo << ", "
       << k.real_hi << "]";
    at.fail(&n, os.str());
  }
  return KeyValue(v);
}

KeyValue read_integer_list(const KeySpec& k, const toml::node& n, const Spot& at) {
  const toml::array* arr = n.as_array();
  if (!arr) at.fail(&n, "expected an array of integers");
  if (arr->empty() && !k.allow_empty) at.fail(&n, "must not be empty");
  std::vector<int64_t> v;
  for (const toml::node& e : *arr) {
    if (!e.is_integer()) at.fail(&e, "expected an array of integers");
    const int64_t x = *e.value<int64_t>();
    if (x < k.lo || x > k.hi) at.fail(&e, range_message("element", x, k.lo, k.hi));
    v.push_back(x);
  }
  return KeyValue(std::move(v));
}

KeyValue read_integer_or_word(const KeySpec& k, const toml::node& n, const Spot& at) {
  if (n.is_string() && *n.value<std::string>() == k.word) return KeyValue(int64_t(0));
  if (n.is_integer() && *n.value<int64_t>() >= k.lo && *n.value<int64_t>() <= k.hi)
    return KeyValue(*n.value<int64_t>());
  at.fail(&n, "expected \"" + k.word + "\" or an integer in [" + std::to_string(k.lo) + ", " +
                  std::to_string(k.hi) + "]");
}

KeyValue read_value(const KeySpec& k, const toml::node& n, const Spot& at) {
  switch (k.type) {
    case KeyType::kString:
    case KeyType::kChoice:
      return read_string(k, n, at);
    case KeyType::kBool:
      if (!n.is_boolean()) at.fail(&n, "expected true or false");
      return KeyValue(*n.value<bool>());
    case KeyType::kInteger:
      return read_integer(k, n, at);
    case KeyType::kReal:
      return read_real(k, n, at);
    case KeyType::kIntegerList:
      return read_integer_list(k, n, at);
    case KeyType::kIntegerOrWord:
      return read_integer_or_word(k, n, at);
    case KeyType::kToggle:
      if (n.is_boolean()) return KeyValue(*n.value<bool>());
      if (n.is_string() && *n.value<std::string>() == k.word) return KeyValue(k.word);
      at.fail(&n, "expected \"" + k.word + "\", true or false");
  }
  at.fail(&n, "internal: unhandled key type");
}

// ---- the tables, driven by scenario_tables() and scenario_keys() ----

// The table whose unknown keys are kept for the algorithm to check (TrainingSpec::algorithm_keys).
constexpr const char* kAlgorithmKeysTable = "training";

// A value of no row as it reads (a string, true or false, an integer, a number, an array of
// integers), for its owner to check; anything else is an error at `at`.
KeyValue value_as_read(const toml::node& n, const Spot& at) {
  if (n.is_string()) return KeyValue(*n.value<std::string>());
  if (n.is_boolean()) return KeyValue(*n.value<bool>());
  if (n.is_integer()) return KeyValue(*n.value<int64_t>());
  if (n.is_floating_point()) return KeyValue(*n.value<double>());
  KeySpec list;
  list.type = KeyType::kIntegerList;
  list.lo = std::numeric_limits<int64_t>::min();
  list.hi = std::numeric_limits<int64_t>::max();
  return read_integer_list(list, n, at);
}

// Reads every table of the key table from a parsed document into a Scenario, defaulting absent
// keys, rejecting unknown ones and remembering the line of each key given.
class Reader {
 public:
  Reader(const toml::table& root, Scenario& s) : root_(root), s_(s) {}

  void read_all() {
    for (const TableSpec& t : scenario_tables()) {
      if (t.is_array)
        read_array(t);
      else
        read_table(t);
    }
  }

 private:
  void read_table(const TableSpec& t) {
    const toml::node* n = find(t.path);
    if (n && !n->is_table())
      throw ScenarioError(where_of(s_.source, n), t.path, "expected a table [" + t.path + "]");
    remember(t.path, n);
    read_keys(t, n ? n->as_table() : nullptr, 0, t.path);
  }

  void read_array(const TableSpec& t) {
    const toml::node* n = find(t.path);
    if (!n && t.required)
      throw ScenarioError(s_.source, t.path,
                          "missing: at least one [[" + t.path + "]] table is needed");
    const toml::array* arr = n ? n->as_array() : nullptr;
    if (n &&
        (!arr || (arr->empty() && t.required) || (!arr->empty() && !arr->is_array_of_tables())))
      throw ScenarioError(where_of(s_.source, n), t.path,
                          std::string(t.required ? "expected one or more" : "expected") + " [[" +
                              t.path + "]] tables");
    remember(t.path, n);
    const size_t count = arr ? arr->size() : 0;
    t.resize(s_, count);
    for (size_t i = 0; i < count; ++i) {
      const std::string prefix = t.path + "[" + std::to_string(i) + "]";
      remember(prefix, arr->get(i));
      read_keys(t, arr->get(i)->as_table(), i, prefix);
    }
  }

  // The rows of table `t` from `table` (nullptr: absent, all defaults), element `index`.
  void read_keys(const TableSpec& t, const toml::table* table, size_t index,
                 const std::string& prefix) {
    for (const KeySpec& k : scenario_keys()) {
      if (k.table != t.path) continue;
      const toml::node* n = table ? table->get(k.name) : nullptr;
      if (!n) {
        k.set(s_, index, k.default_at(index));
        continue;
      }
      const std::string key = k.dotted(index);
      k.set(s_, index, read_value(k, *n, Spot{s_.source, key}));
      remember(key, n);
    }
    if (table) reject_unknown(t.path, *table, prefix);
  }

  // Keys of no row: an error, but in [training], whose keys the algorithm may declare besides
  // (TrainingSpec::algorithm_keys; the registry checks them).
  void reject_unknown(const std::string& path, const toml::table& table,
                      const std::string& prefix) {
    for (const auto& [name, node] : table) {
      const std::string key(name.str());
      if (known(path, key)) continue;
      const std::string dotted = prefix.empty() ? key : prefix + "." + key;
      if (path != kAlgorithmKeysTable || node.is_table() || node.is_array_of_tables())
        throw ScenarioError(where_of(s_.source, &node), dotted, "unknown key");
      s_.training.algorithm_keys[key] = value_as_read(node, Spot{s_.source, dotted});
      remember(dotted, &node);
    }
  }

  // A row of table `path`, or a table nested in it.
  static bool known(const std::string& path, const std::string& key) {
    for (const KeySpec& k : scenario_keys())
      if (k.table == path && k.name == key) return true;
    const std::string child = path.empty() ? key : path + "." + key;
    for (const TableSpec& t : scenario_tables())
      if (t.path == child) return true;
    return false;
  }

  // The node at dotted `path` ("" is the root); nullptr when absent or under a non-table.
  const toml::node* find(const std::string& path) const {
    if (path.empty()) return &root_;
    const toml::node* cur = &root_;
    std::stringstream ss(path);
    for (std::string part; std::getline(ss, part, '.');) {
      const toml::table* t = cur ? cur->as_table() : nullptr;
      cur = t ? t->get(part) : nullptr;
    }
    return cur;
  }

  void remember(const std::string& key, const toml::node* n) {
    if (key.empty()) return;
    const int line = line_of(n, s_.source);
    if (line > 0) s_.key_lines[key] = line;
    if (from_override(n)) s_.key_lines[key] = 0;
  }

  const toml::table& root_;
  Scenario& s_;
};

// ---- checks across keys, after reading ----

// The name is one folder under output.dir: never "." or "..", a hidden folder, an option-like
// "-x", a path or a character a shell or another file system would read otherwise.
// Letters, digits, '.', '_' and '-' only: a name that may name a folder or a SimGrid zone.
bool plain_name(const std::string& name) {
  return std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
           c == '_' || c == '-';
  });
}

void check_name(const Scenario& s) {
  const bool ok = !s.name.empty() && s.name.size() <= 128 && s.name[0] != '.' && s.name[0] != '-' &&
                  plain_name(s.name);
  if (!ok)
    throw ScenarioError(
        s.where("name"), "name",
        "must be 1 to 128 letters, digits, '.', '_' or '-', not starting with '.' or '-' "
        "(it names the run folders' folder under output.dir)");
}

void check_model(const Scenario& s) {
  if (s.model.kernel % 2 == 0)
    throw ScenarioError(s.where("model.kernel"), "model.kernel",
                        "must be odd (padding keeps the size)");
  // Problems with known constants and the additive block model go together (docs/theory.md).
  const bool problem = is_problem(s.data.kind);
  if (s.model.kind == ModelKind::kBlocks && !problem)
    throw ScenarioError(
        s.where("model.kind"), "model.kind",
        "\"blocks\" is the model of a problem: set data.kind = \"quadratic\" or \"logistic\"");
  if (problem && s.model.kind != ModelKind::kBlocks)
    throw ScenarioError(
        s.where("data.kind"), "data.kind",
        "\"" + std::string(name_of(s.data.kind)) +
            "\" is fitted by the additive block model: set model.kind = \"blocks\"");
  if (problem && s.model.blocks > s.data.features)
    throw ScenarioError(s.where("model.blocks"), "model.blocks",
                        "at most data.features (" + std::to_string(s.data.features) +
                            "): every block holds a column at least");
  if (problem && s.data.eig_min > s.data.eig_max)
    throw ScenarioError(s.where("data.eig_min"), "data.eig_min", "must be at most data.eig_max");
  if (problem && s.model.head != Head::kNone)
    throw ScenarioError(s.where("model.head"), "model.head",
                        "the block model has its own readout: leave it \"none\"");
}

void check_planner_clusters(const Scenario& s) {
  for (size_t i = 0; i < s.planner.cluster.size(); ++i) {
    const std::string element = "planner.cluster[" + std::to_string(i) + "]";
    if (s.planner.cluster[i].nodes.empty())
      throw ScenarioError(s.where(element), element + ".nodes",
                          "missing: the cluster's nodes in pipeline order");
  }
}

// network.topology against devices[].region and [[network.link]]: under "star" neither may be
// given (it would do nothing); under "regions" every device names its region and every pair of
// regions with devices has exactly one link, and a link joins two such regions.
void check_regions(const Scenario& s) {
  const bool regions = s.network.topology == Topology::kRegions;
  std::set<std::string> used;
  for (size_t i = 0; i < s.devices.size(); ++i) {
    const std::string key = "devices[" + std::to_string(i) + "].region";
    const std::string& region = s.devices[i].region;
    if (!regions && !region.empty())
      throw ScenarioError(s.where(key), key,
                          "a region does nothing under network.topology = \"star\": set topology "
                          "= \"regions\" and give [[network.link]] entries, or leave it out");
    if (regions && region.empty())
      throw ScenarioError(
          s.where("devices[" + std::to_string(i) + "]"), key,
          "missing: under network.topology = \"regions\" every device group names its region");
    // A region names the simulator's zones and links ("<a>><b>"): plain characters only.
    if (region.size() > 64 || !plain_name(region))
      throw ScenarioError(s.where(key), key,
                          "a region is at most 64 letters, digits, '.', '_' or '-'");
    used.insert(region);
  }
  std::map<std::pair<std::string, std::string>, size_t> pairs;
  for (size_t i = 0; i < s.network.link.size(); ++i) {
    const std::string element = "network.link[" + std::to_string(i) + "]";
    const RegionLinkSpec& l = s.network.link[i];
    if (!regions)
      throw ScenarioError(s.where(element), element,
                          "a link between regions does nothing under network.topology = \"star\"");
    for (const auto& [name, value] : {std::pair{"a", l.a}, std::pair{"b", l.b}}) {
      const std::string key = element + "." + name;
      if (value.empty())
        throw ScenarioError(s.where(element), key, "missing: the link joins two regions, a and b");
      if (used.count(value) == 0)
        throw ScenarioError(s.where(key), key, "no device is in region \"" + value + "\"");
    }
    if (l.a == l.b)
      throw ScenarioError(
          s.where(element + ".b"), element + ".b",
          "a link joins two different regions (a region's devices meet at its core)");
    const auto key = std::minmax(l.a, l.b);
    const auto [it, fresh] = pairs.emplace(std::pair{key.first, key.second}, i);
    if (!fresh)
      throw ScenarioError(s.where(element), element,
                          "regions \"" + l.a + "\" and \"" + l.b +
                              "\" are already joined by network.link[" +
                              std::to_string(it->second) + "]");
  }
  if (!regions) return;
  for (auto a = used.begin(); a != used.end(); ++a)
    for (auto b = std::next(a); b != used.end(); ++b)
      if (pairs.count({*a, *b}) == 0)
        throw ScenarioError(s.where("network.topology"), "network.link",
                            "no [[network.link]] joins regions \"" + *a + "\" and \"" + *b +
                                "\": every pair of regions with devices needs one");
}

// A device's buffer is in ms or in packets, not both.
void check_buffers(const Scenario& s) {
  for (size_t i = 0; i < s.devices.size(); ++i) {
    if (s.devices[i].buffer_ms > 0 && s.devices[i].buffer_packets > 0) {
      const std::string key = "devices[" + std::to_string(i) + "].buffer_packets";
      throw ScenarioError(s.where(key), key,
                          "set the buffer in ms (buffer_ms) or in packets (buffer_packets), not "
                          "both");
    }
  }
}

// [churn] and the devices' churn keys: groups that arrive later come after all others (the plan's
// nodes are ranks [0, initial_node_count())); every timed departure names a node of the pool.
void check_churn(const Scenario& s) {
  bool late = false;
  for (size_t i = 0; i < s.devices.size(); ++i) {
    if (s.devices[i].join_at_s > 0) {
      late = true;
    } else if (late) {
      const std::string key = "devices[" + std::to_string(i) + "]";
      throw ScenarioError(s.where(key), key,
                          "groups that arrive later (join_at_s > 0) come after every group present "
                          "from the start: move this one before them");
    }
  }
  if (s.initial_node_count() == 0)
    throw ScenarioError(s.where("devices"), "devices",
                        "every group arrives later: no node is there at the start");
  for (size_t i = 0; i < s.churn.event.size(); ++i) {
    const std::string element = "churn.event[" + std::to_string(i) + "]";
    const ChurnEventSpec& e = s.churn.event[i];
    if (e.leave < 0)
      throw ScenarioError(s.where(element), element + ".leave", "missing: the node that leaves");
    if (e.leave >= s.node_count())
      throw ScenarioError(
          s.where(element + ".leave"), element + ".leave",
          "no node " + std::to_string(e.leave) + " in a pool of " + std::to_string(s.node_count()));
  }
}

// [checkpoint]: at averaging rounds only (what else an algorithm needs for them is the
// registry's check, algo/registry.h check_checkpoint_support).
void check_checkpoint(const Scenario& s) {
  const CheckpointSpec& c = s.checkpoint;
  if (!c.enabled()) return;
  const int64_t E = std::max<int64_t>(1, s.training.average_every);
  if (c.every % E != 0)
    throw ScenarioError(
        s.where("checkpoint.every"), "checkpoint.every",
        std::to_string(c.every) + " is not a multiple of training.average_every (" +
            std::to_string(E) +
            "): checkpoints sit at averaging rounds, where the pipelines are drained");
}

// The pool's size against the keys that count nodes.
void check_pool(const Scenario& s) {
  int64_t pool = 0;
  for (const DeviceGroup& g : s.devices) pool += g.count;
  if (pool > kMaxPool)
    throw ScenarioError(s.where("devices"), "devices",
                        "more than " + std::to_string(kMaxPool) + " nodes");
  if (s.faults.node >= pool)
    throw ScenarioError(
        s.where("faults.node"), "faults.node",
        "no node " + std::to_string(s.faults.node) + " in a pool of " + std::to_string(pool));
  if (s.planner.clusters > pool)
    throw ScenarioError(s.where("planner.clusters"), "planner.clusters",
                        "asks for " + std::to_string(s.planner.clusters) +
                            " clusters but the pool has " + std::to_string(pool) + " nodes");
}

// Reads each device group's compute profile file, if it names one. A relative path is taken from
// the scenario file's folder, and kept absolute (the resolved scenario a run folder holds names
// the file that was read, wherever the run folder goes).
void read_profiles(Scenario& s) {
  for (size_t i = 0; i < s.devices.size(); ++i) {
    DeviceGroup& d = s.devices[i];
    if (d.profile.empty()) continue;
    const std::string key = "devices[" + std::to_string(i) + "].profile";
    std::filesystem::path path(d.profile);
    if (path.is_relative()) path = std::filesystem::path(s.source).parent_path() / path;
    std::error_code ec;
    const std::filesystem::path absolute = std::filesystem::absolute(path, ec);
    if (!ec) d.profile = absolute.lexically_normal().string();
    try {
      d.compute = read_profile(d.profile);
    } catch (const InputError& e) {
      throw ScenarioError(s.where(key), key, e.what());
    }
  }
}

// network.platform: a file that exists, taken from the scenario's folder when relative and kept
// absolute; it replaces the topology, so only under the default star.
void read_platform(Scenario& s) {
  std::string& platform = s.network.platform;
  if (platform.empty()) return;
  if (s.network.topology != Topology::kStar)
    throw ScenarioError(
        s.where("network.platform"), "network.platform",
        "a platform file gives the whole network: leave network.topology \"star\" (the default)");
  std::filesystem::path path(platform);
  if (path.is_relative()) path = std::filesystem::path(s.source).parent_path() / path;
  std::error_code ec;
  const std::filesystem::path absolute = std::filesystem::absolute(path, ec);
  if (!ec) platform = absolute.lexically_normal().string();
  if (!std::filesystem::is_regular_file(platform, ec))
    throw ScenarioError(s.where("network.platform"), "network.platform",
                        "no such file: " + platform);
}

Scenario from_table(const toml::table& root, const std::string& source) {
  Scenario s;
  s.source = source;
  Reader(root, s).read_all();
  check_name(s);
  check_model(s);
  check_planner_clusters(s);
  check_regions(s);
  check_pool(s);
  check_churn(s);
  check_buffers(s);
  check_checkpoint(s);
  read_profiles(s);
  read_platform(s);
  for (DeviceGroup& d : s.devices) d.dilation = s.dilation;
  return s;
}

// Applies one "a.b.c=value" override to the parsed document.
void apply_override(toml::table& root, const std::string& spec) {
  auto eq = spec.find('=');
  if (eq == std::string::npos || eq == 0)
    throw ScenarioError("--set", spec, "expected KEY=VALUE (for example training.lr=0.1)");
  std::string path = spec.substr(0, eq), value = spec.substr(eq + 1);
  std::vector<std::string> parts;
  std::stringstream ss(path);
  for (std::string p; std::getline(ss, p, '.');) {
    if (p.empty()) throw ScenarioError("--set", path, "empty component in key");
    parts.push_back(p);
    if (parts.size() > static_cast<size_t>(TomlLimits().max_key_parts))
      throw ScenarioError("--set", path.substr(0, 40) + "...",
                          "more than " + std::to_string(TomlLimits().max_key_parts) + " parts");
  }
  toml::node* cur = &root;
  for (size_t i = 0; i + 1 < parts.size(); ++i) {
    if (auto* t = cur->as_table()) {
      if (!t->contains(parts[i])) t->insert(parts[i], toml::table{});
      cur = t->get(parts[i]);
    } else if (auto* a = cur->as_array()) {
      char* end = nullptr;
      long idx = std::strtol(parts[i].c_str(), &end, 10);
      if (*end || idx < 0 || static_cast<size_t>(idx) >= a->size())
        throw ScenarioError("--set", path, "no element '" + parts[i] + "' in this array");
      cur = a->get(static_cast<size_t>(idx));
    } else {
      throw ScenarioError("--set", path, "'" + parts[i] + "' is not a table");
    }
  }
  auto* t = cur->as_table();
  if (!t) throw ScenarioError("--set", path, "the parent of the last component is not a table");
  // The value is TOML (1, 0.5, true, "text", [1, 2]); anything else is taken as a bare string.
  const std::string assignment = "v = " + value;
  check_toml_limits(assignment, "--set " + path);
  // Parsed with the source "--set", so that messages say where the value came from; a bare
  // string is parsed as a literal string where it can be one.
  const bool literal = value.find_first_of("'\n\r") == std::string::npos;
  for (const std::string& text : {assignment, literal ? "v = '" + value + "'" : std::string()}) {
    if (text.empty()) continue;
    try {
      toml::table parsed = toml::parse(text, std::string_view(kOverrideSource));
      if (toml::node* v = parsed.get("v")) {
        t->insert_or_assign(parts.back(), std::move(*v));  // moved: keeps its source
        return;
      }
    } catch (const toml::parse_error&) {
    }
  }
  t->insert_or_assign(parts.back(), value);
}

}  // namespace

NetFactors net_factors(const NetworkSpec& network) {
  NetFactors f;
  if (network.model == NetworkModel::kLv08) f = {13.01, 0.97, 4194304.0};
  if (network.model == NetworkModel::kTcp) f = {1.0, kTcpBandwidthFactor, kTcpWindowBytes};
  if (network.latency_factor > 0) f.latency = network.latency_factor;
  if (network.bandwidth_factor > 0) f.bandwidth = network.bandwidth_factor;
  return f;
}

int Scenario::node_count() const {
  int n = 0;
  for (const auto& g : devices) n += g.count;
  return n;
}

int Scenario::initial_node_count() const {
  int n = 0;
  for (const auto& g : devices)
    if (g.join_at_s <= 0) n += g.count;
  return n;
}

bool ChurnSpec::enabled(const std::vector<DeviceGroup>& devices) const {
  if (leave_per_hour > 0 || !event.empty()) return true;
  for (const auto& g : devices)
    if (g.leave_per_hour > 0 || g.join_at_s > 0) return true;
  return false;
}

bool Scenario::nodes_may_leave() const {
  return churn.enabled(devices) || real.on_peer_loss == PeerLoss::kRecover;
}

const DeviceGroup& Scenario::device_of(int rank) const {
  int r = rank;
  for (const auto& g : devices) {
    if (r < g.count) return g;
    r -= g.count;
  }
  throw Error("node rank " + std::to_string(rank) + " is outside the device pool");
}

Scenario parse_scenario(const std::string& text, const std::string& source,
                        const std::vector<std::string>& overrides) {
  toml::table root = parse_toml(text, source);
  for (const auto& o : overrides) apply_override(root, o);
  return from_table(root, source);
}

Scenario load_scenario(const std::string& path, const std::vector<std::string>& overrides) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw ScenarioError(path, "", "cannot open the scenario file");
  std::stringstream ss;
  ss << in.rdbuf();
  return parse_scenario(ss.str(), path, overrides);
}

std::string Scenario::where(const std::string& dotted_key) const {
  auto it = key_lines.find(dotted_key);
  if (it == key_lines.end()) return source;
  return it->second == 0 ? source + " (--set)" : source + ":" + std::to_string(it->second);
}

namespace {
constexpr const char* kResolvedHeader =
    "# Resolved scenario: every key, defaults filled in. Source: ";
}  // namespace

std::string resolved_source(const std::string& path) {
  std::ifstream in(path);
  std::string first;
  std::getline(in, first);
  const std::string header = kResolvedHeader;
  return first.rfind(header, 0) == 0 ? first.substr(header.size()) : std::string();
}

std::string to_toml(const Scenario& s) {
  std::ostringstream os;
  os << kResolvedHeader << s.source << "\n";
  for (const TableSpec& t : scenario_tables()) {
    const size_t count = t.is_array ? t.size(s) : 1;
    for (size_t i = 0; i < count; ++i) {
      if (t.is_array)
        os << "\n[[" << t.path << "]]\n";
      else if (!t.path.empty())
        os << "\n[" << t.path << "]\n";
      for (const KeySpec& k : scenario_keys()) {
        if (k.table != t.path) continue;
        os << k.name << " = " << toml_value_text(k, k.get(s, i));
        if (!k.unit.empty()) os << "  # " << k.unit;
        os << "\n";
      }
      if (t.path == kAlgorithmKeysTable)
        for (const auto& [name, value] : s.training.algorithm_keys)
          os << name << " = " << toml_value_text(KeySpec{}, value) << "\n";
    }
  }
  return os.str();
}

KeyValue read_key_value(const KeySpec& key, const KeyValue& value, const std::string& where) {
  const std::string text = toml_value_text(KeySpec{}, value);
  toml::table doc = toml::parse("v = " + text, std::string_view("value"));
  return read_value(key, *doc.get("v"), Spot{where, key.dotted(), where});
}

}  // namespace rv
