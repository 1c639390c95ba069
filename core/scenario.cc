#include "core/scenario.h"

#include <cmath>
#include <fstream>
#include <set>
#include <sstream>

#include <toml++/toml.h>

#include "core/error.h"

namespace rv {
namespace {

std::string where_of(const std::string& source, const toml::node* node) {
  if (node && node->source().begin.line > 0)
    return source + ":" + std::to_string(node->source().begin.line);
  return source;
}

// Reads the keys of one table, remembering which were used, so that unknown keys are reported.
class Section {
 public:
  Section(const toml::table* table, std::string prefix, std::string source)
      : table_(table), prefix_(std::move(prefix)), source_(std::move(source)) {}

  std::string key_name(const std::string& key) const {
    return prefix_.empty() ? key : prefix_ + "." + key;
  }

  const toml::node* find(const std::string& key) {
    used_.insert(key);
    return table_ ? table_->get(key) : nullptr;
  }

  [[noreturn]] void fail(const std::string& key, const toml::node* node,
                         const std::string& what) const {
    throw ScenarioError(where_of(source_, node ? node : table_), key_name(key), what);
  }

  void read(const std::string& key, std::string& out, const std::set<std::string>& allowed = {}) {
    const toml::node* n = find(key);
    if (!n) return;
    auto v = n->value<std::string>();
    if (!v || !n->is_string()) fail(key, n, "expected a string");
    if (!allowed.empty() && !allowed.count(*v)) {
      std::string list;
      for (const auto& a : allowed) list += (list.empty() ? "" : ", ") + a;
      fail(key, n, "unknown value '" + *v + "' (expected one of: " + list + ")");
    }
    out = *v;
  }

  void read(const std::string& key, bool& out) {
    const toml::node* n = find(key);
    if (!n) return;
    if (!n->is_boolean()) fail(key, n, "expected true or false");
    out = *n->value<bool>();
  }

  void read(const std::string& key, double& out, double lo, double hi, bool lo_open = false) {
    const toml::node* n = find(key);
    if (!n) return;
    if (!n->is_number()) fail(key, n, "expected a number");
    double v = *n->value<double>();
    check_range(key, n, v, lo, hi, lo_open);
    out = v;
  }

  template <typename Int>
  void read(const std::string& key, Int& out, int64_t lo, int64_t hi) {
    const toml::node* n = find(key);
    if (!n) return;
    if (!n->is_integer()) fail(key, n, "expected an integer");
    int64_t v = *n->value<int64_t>();
    if (v < lo || v > hi)
      fail(key, n, "value " + std::to_string(v) + " is out of range [" + std::to_string(lo) + ", " +
                       std::to_string(hi) + "]");
    out = static_cast<Int>(v);
  }

  void read(const std::string& key, std::vector<int64_t>& out, int64_t lo, int64_t hi,
            bool allow_empty) {
    const toml::node* n = find(key);
    if (!n) return;
    const toml::array* arr = n->as_array();
    if (!arr) fail(key, n, "expected an array of integers");
    if (arr->empty() && !allow_empty) fail(key, n, "must not be empty");
    std::vector<int64_t> v;
    for (const auto& e : *arr) {
      if (!e.is_integer()) fail(key, &e, "expected an array of integers");
      int64_t x = *e.value<int64_t>();
      if (x < lo || x > hi)
        fail(key, &e, "element " + std::to_string(x) + " is out of range [" + std::to_string(lo) +
                          ", " + std::to_string(hi) + "]");
      v.push_back(x);
    }
    out = v;
  }

  void check_range(const std::string& key, const toml::node* n, double v, double lo, double hi,
                   bool lo_open) const {
    if (!std::isfinite(v) || v < lo || v > hi || (lo_open && v == lo)) {
      std::ostringstream os;
      os << "value " << v << " is out of range " << (lo_open ? "(" : "[") << lo << ", " << hi
         << "]";
      fail(key, n, os.str());
    }
  }

  // Call after reading every known key.
  void reject_unknown() const {
    if (!table_) return;
    for (const auto& [k, v] : *table_) {
      std::string key(k.str());
      if (!used_.count(key)) fail(key, &v, "unknown key");
    }
  }

 private:
  const toml::table* table_;
  std::string prefix_;
  std::string source_;
  std::set<std::string> used_;
};

const toml::table* sub_table(const toml::table& root, const std::string& key,
                             const std::string& source) {
  const toml::node* n = root.get(key);
  if (!n) return nullptr;
  if (!n->is_table()) throw ScenarioError(where_of(source, n), key, "expected a table [" + key + "]");
  return n->as_table();
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
  try {
    toml::table parsed = toml::parse("v = " + value, std::string_view("--set"));
    if (const toml::node* v = parsed.get("v")) {
      t->insert_or_assign(parts.back(), *v);
      return;
    }
  } catch (const toml::parse_error&) {
  }
  t->insert_or_assign(parts.back(), value);
}

Scenario from_table(const toml::table& root, const std::string& source) {
  Scenario s;
  s.source = source;
  Section top(&root, "", source);
  top.read("name", s.name);
  if (s.name.empty() || s.name.find_first_of("/\\ ") != std::string::npos)
    top.fail("name", root.get("name"), "must be a non-empty name without '/', '\\' or spaces");
  int64_t seed = static_cast<int64_t>(s.seed);
  top.read("seed", seed, 0, std::numeric_limits<int64_t>::max());
  s.seed = static_cast<uint64_t>(seed);

  // [[devices]]
  const toml::node* dn = top.find("devices");
  if (!dn) throw ScenarioError(source, "devices", "missing: at least one [[devices]] group is needed");
  const toml::array* darr = dn->as_array();
  if (!darr || darr->empty() || !darr->is_array_of_tables())
    throw ScenarioError(where_of(source, dn), "devices", "expected one or more [[devices]] tables");
  int total = 0;
  for (size_t i = 0; i < darr->size(); ++i) {
    const toml::table* dt = darr->get(i)->as_table();
    Section d(dt, "devices[" + std::to_string(i) + "]", source);
    DeviceGroup g;
    g.name = "device" + std::to_string(i);
    d.read("name", g.name);
    d.read("count", g.count, 1, 100000);
    d.read("tflops", g.tflops, 0.0, 1e6, true);
    d.read("ram_gb", g.ram_gb, 0.0, 1e6, true);
    d.read("up_mbps", g.up_mbps, 0.0, 1e9, true);
    d.read("down_mbps", g.down_mbps, 0.0, 1e9, true);
    d.read("latency_ms", g.latency_ms, 0.0, 1e6);
    d.read("region", g.region);
    d.reject_unknown();
    total += g.count;
    s.devices.push_back(g);
  }
  if (total > 100000) throw ScenarioError(where_of(source, dn), "devices", "more than 100000 nodes");

  {
    Section m(sub_table(root, "model", source), "model", source);
    top.find("model");
    m.read("kind", s.model.kind, {"mlp", "cnn"});
    m.read("hidden", s.model.hidden, 1, 1 << 20, true);
    m.read("channels", s.model.channels, 1, 1 << 16, false);
    m.read("kernel", s.model.kernel, 1, 15);
    if (s.model.kernel % 2 == 0) m.fail("kernel", nullptr, "must be odd (padding keeps the size)");
    m.read("batch_norm", s.model.batch_norm);
    m.read("dropout", s.model.dropout, 0.0, 0.95);
    m.reject_unknown();
  }
  {
    Section d(sub_table(root, "data", source), "data", source);
    top.find("data");
    d.read("kind", s.data.kind, {"synthetic", "fashion-mnist", "digits"});
    d.read("batch_size", s.data.batch_size, 1, 1 << 20);
    d.read("train_samples", s.data.train_samples, 0, int64_t(1) << 40);
    d.read("test_samples", s.data.test_samples, 0, int64_t(1) << 40);
    d.read("path", s.data.path);
    d.read("side", s.data.side, 2, 1024);
    d.read("classes", s.data.classes, 2, 100000);
    d.read("noise", s.data.noise, 0.0, 1e6);
    d.reject_unknown();
  }
  {
    Section t(sub_table(root, "training", source), "training", source);
    top.find("training");
    t.read("algorithm", s.training.algorithm, {"ravnest", "gpipe", "sync-dp"});
    t.read("optimizer", s.training.optimizer, {"sgd", "adam"});
    t.read("lr", s.training.lr, 0.0, 100.0, true);
    t.read("momentum", s.training.momentum, 0.0, 0.9999);
    t.read("weight_decay", s.training.weight_decay, 0.0, 1.0);
    t.read("steps", s.training.steps, 1, int64_t(1) << 40);
    const toml::node* mif = t.find("max_in_flight");
    if (mif) {
      if (mif->is_string() && *mif->value<std::string>() == "stages") {
        s.training.max_in_flight = 0;
      } else if (mif->is_integer() && *mif->value<int64_t>() >= 1 &&
                 *mif->value<int64_t>() <= 1000000) {
        s.training.max_in_flight = *mif->value<int64_t>();
      } else {
        t.fail("max_in_flight", mif, "expected \"stages\" or an integer in [1, 1000000]");
      }
    }
    t.read("weight_stashing", s.training.weight_stashing);
    t.read("micro_batches", s.training.micro_batches, 1, 1 << 20);
    t.read("average_every", s.training.average_every, 1, int64_t(1) << 40);
    t.read("averaging", s.training.averaging, {"bulk-sync", "overlapped"});
    t.read("allreduce", s.training.allreduce, {"multi-ring", "single-ring", "gloo"});
    t.read("average_optimizer_state", s.training.average_optimizer_state);
    t.read("eval_every", s.training.eval_every, 0, int64_t(1) << 40);
    t.read("eval_samples", s.training.eval_samples, 0, int64_t(1) << 40);
    t.reject_unknown();
  }
  {
    Section p(sub_table(root, "planner", source), "planner", source);
    top.find("planner");
    p.read("method", s.planner.method, {"manual", "greedy", "ga", "ravnest-ga", "exhaustive"});
    p.read("population", s.planner.population, 0, 100000);
    p.read("generations", s.planner.generations, 0, 1000000);
    if (const toml::node* cn = p.find("cluster")) {
      const toml::array* arr = cn->as_array();
      if (!arr || (!arr->empty() && !arr->is_array_of_tables()))
        p.fail("cluster", cn, "expected [[planner.cluster]] tables");
      for (size_t i = 0; i < arr->size(); ++i) {
        Section c(arr->get(i)->as_table(), "planner.cluster[" + std::to_string(i) + "]", source);
        PlannerSpec::Cluster cl;
        c.read("nodes", cl.nodes, 0, 100000, false);
        if (cl.nodes.empty()) c.fail("nodes", arr->get(i), "missing: the cluster's nodes in pipeline order");
        c.read("stage_layers", cl.stage_layers, 1, 1 << 20, true);
        c.reject_unknown();
        s.planner.cluster.push_back(cl);
      }
    }
    const toml::node* c = p.find("clusters");
    if (c) {
      if (c->is_string() && *c->value<std::string>() == "auto") s.planner.clusters = 0;
      else if (c->is_integer() && *c->value<int64_t>() >= 1 && *c->value<int64_t>() <= 100000)
        s.planner.clusters = static_cast<int>(*c->value<int64_t>());
      else p.fail("clusters", c, "expected \"auto\" or a positive integer");
    }
    p.read("stage_layers", s.planner.stage_layers, 1, 1 << 20, true);
    p.reject_unknown();
  }
  {
    Section n(sub_table(root, "network", source), "network", source);
    top.find("network");
    n.read("topology", s.network.topology, {"star"});
    n.read("model", s.network.model, {"lv08", "ideal"});
    n.reject_unknown();
  }
  {
    Section m(sub_table(root, "sim", source), "sim", source);
    top.find("sim");
    m.read("mode", s.sim.mode, {"numeric", "timing"});
    m.reject_unknown();
  }
  {
    Section r(sub_table(root, "real", source), "real", source);
    top.find("real");
    r.read("timeout_s", s.real.timeout_s, 0.0, 86400.0, true);
    r.read("master_addr", s.real.master_addr);
    r.read("master_port", s.real.master_port, 0, 65535);
    r.read("emulate_speed", s.real.emulate_speed);
    r.reject_unknown();
  }
  {
    Section o(sub_table(root, "output", source), "output", source);
    top.find("output");
    o.read("dir", s.output.dir);
    if (s.output.dir.empty()) o.fail("dir", nullptr, "must not be empty");
    o.read("trace", s.output.trace);
    o.reject_unknown();
  }
  {
    Section f(sub_table(root, "faults", source), "faults", source);
    top.find("faults");
    f.read("node", s.faults.node, -1, 100000);
    f.read("crash_after_sends", s.faults.crash_after_sends, -1, int64_t(1) << 40);
    f.read("drop_every", s.faults.drop_every, 0, int64_t(1) << 40);
    f.read("delay_ms", s.faults.delay_ms, 0.0, 1e9);
    f.reject_unknown();
    if (s.faults.node >= 0 && s.faults.node >= total)
      f.fail("node", nullptr, "no node " + std::to_string(s.faults.node) + " in a pool of " + std::to_string(total));
  }
  top.reject_unknown();

  if (s.planner.clusters > total)
    throw ScenarioError(source, "planner.clusters",
                        "asks for " + std::to_string(s.planner.clusters) + " clusters but the pool has " +
                            std::to_string(total) + " nodes");
  return s;
}

}  // namespace

int Scenario::node_count() const {
  int n = 0;
  for (const auto& g : devices) n += g.count;
  return n;
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
  toml::table root;
  try {
    root = toml::parse(text, std::string_view(source));
  } catch (const toml::parse_error& e) {
    throw ScenarioError(source + ":" + std::to_string(e.source().begin.line), "",
                        "TOML syntax error: " + std::string(e.description()));
  }
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

std::string to_toml(const Scenario& s) {
  toml::table root;
  root.insert("name", s.name);
  root.insert("seed", static_cast<int64_t>(s.seed));
  auto ints = [](const std::vector<int64_t>& v) {
    toml::array a;
    for (auto x : v) a.push_back(x);
    return a;
  };
  root.insert("model", toml::table{{"kind", s.model.kind},
                                   {"hidden", ints(s.model.hidden)},
                                   {"channels", ints(s.model.channels)},
                                   {"kernel", s.model.kernel},
                                   {"batch_norm", s.model.batch_norm},
                                   {"dropout", s.model.dropout}});
  root.insert("data", toml::table{{"kind", s.data.kind},
                                  {"batch_size", s.data.batch_size},
                                  {"train_samples", s.data.train_samples},
                                  {"test_samples", s.data.test_samples},
                                  {"path", s.data.path},
                                  {"side", s.data.side},
                                  {"classes", s.data.classes},
                                  {"noise", s.data.noise}});
  root.insert("training",
              toml::table{{"algorithm", s.training.algorithm},
                          {"optimizer", s.training.optimizer},
                          {"lr", s.training.lr},
                          {"momentum", s.training.momentum},
                          {"weight_decay", s.training.weight_decay},
                          {"steps", s.training.steps},
                          {"weight_stashing", s.training.weight_stashing},
                          {"micro_batches", s.training.micro_batches},
                          {"average_every", s.training.average_every},
                          {"averaging", s.training.averaging},
                          {"allreduce", s.training.allreduce},
                          {"average_optimizer_state", s.training.average_optimizer_state},
                          {"eval_every", s.training.eval_every},
                          {"eval_samples", s.training.eval_samples}});
  auto* tr = root.get_as<toml::table>("training");
  if (s.training.max_in_flight == 0) tr->insert("max_in_flight", "stages");
  else tr->insert("max_in_flight", s.training.max_in_flight);
  toml::table planner{{"method", s.planner.method}};
  if (!s.planner.stage_layers.empty()) planner.insert("stage_layers", ints(s.planner.stage_layers));
  if (s.planner.population > 0) planner.insert("population", s.planner.population);
  if (s.planner.generations > 0) planner.insert("generations", s.planner.generations);
  if (!s.planner.cluster.empty()) {
    toml::array cs;
    for (const auto& c : s.planner.cluster) {
      toml::table t{{"nodes", ints(c.nodes)}};
      if (!c.stage_layers.empty()) t.insert("stage_layers", ints(c.stage_layers));
      cs.push_back(std::move(t));
    }
    planner.insert("cluster", std::move(cs));
  }
  if (s.planner.clusters == 0) planner.insert("clusters", "auto");
  else planner.insert("clusters", s.planner.clusters);
  root.insert("planner", planner);
  root.insert("network", toml::table{{"topology", s.network.topology}, {"model", s.network.model}});
  root.insert("sim", toml::table{{"mode", s.sim.mode}});
  root.insert("real", toml::table{{"timeout_s", s.real.timeout_s},
                                  {"master_addr", s.real.master_addr},
                                  {"master_port", s.real.master_port},
                                  {"emulate_speed", s.real.emulate_speed}});
  root.insert("output", toml::table{{"dir", s.output.dir}, {"trace", s.output.trace}});
  if (s.faults.node >= 0)
    root.insert("faults", toml::table{{"node", s.faults.node},
                                      {"crash_after_sends", s.faults.crash_after_sends},
                                      {"drop_every", s.faults.drop_every},
                                      {"delay_ms", s.faults.delay_ms}});
  toml::array devs;
  for (const auto& g : s.devices) {
    toml::table t{{"name", g.name},           {"count", g.count},
                  {"tflops", g.tflops},       {"ram_gb", g.ram_gb},
                  {"up_mbps", g.up_mbps},     {"down_mbps", g.down_mbps},
                  {"latency_ms", g.latency_ms}};
    if (!g.region.empty()) t.insert("region", g.region);
    devs.push_back(std::move(t));
  }
  root.insert("devices", std::move(devs));
  std::ostringstream os;
  os << "# Resolved scenario: every key, defaults filled in. Source: " << s.source << "\n";
  os << root << "\n";
  return os.str();
}

}  // namespace rv
