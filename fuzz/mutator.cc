#include "fuzz/mutator.h"

#include <ATen/ATen.h>
#include <toml++/toml.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>

#include "core/input/toml_input.h"
#include "core/scenario/keys.h"
#include "real/wire_format.h"

namespace rv::fuzz {
namespace {

template <class T>
const T& pick(std::mt19937_64& rng, const std::vector<T>& v) {
  return v[std::uniform_int_distribution<size_t>(0, v.size() - 1)(rng)];
}

int below(std::mt19937_64& rng, int n) { return std::uniform_int_distribution<int>(0, n - 1)(rng); }

bool chance(std::mt19937_64& rng, double p) { return std::bernoulli_distribution(p)(rng); }

const std::vector<int64_t>& edge_integers() {
  static const std::vector<int64_t> v = {0,
                                         -1,
                                         1,
                                         2,
                                         3,
                                         7,
                                         64,
                                         1000,
                                         65535,
                                         65536,
                                         100000,
                                         100001,
                                         1 << 20,
                                         (1 << 20) + 1,
                                         int64_t{1} << 31,
                                         int64_t{1} << 40,
                                         int64_t{1} << 62,
                                         std::numeric_limits<int64_t>::max(),
                                         std::numeric_limits<int64_t>::min(),
                                         4294967297};
  return v;
}

const std::vector<double>& edge_reals() {
  static const std::vector<double> v = {0.0,
                                        -0.0,
                                        1e-300,
                                        1e-9,
                                        0.5,
                                        1.0,
                                        1.5,
                                        100.0,
                                        1e6,
                                        1e9,
                                        1e300,
                                        -1.0,
                                        std::nan(""),
                                        std::numeric_limits<double>::infinity(),
                                        -std::numeric_limits<double>::infinity()};
  return v;
}

const std::vector<std::string>& edge_strings() {
  static const std::vector<std::string> v = {"",
                                             ".",
                                             "..",
                                             "../x",
                                             "a/b",
                                             "/tmp",
                                             "-x",
                                             "a b",
                                             "auto",
                                             "stages",
                                             "none",
                                             "x\ty",
                                             "\xff\xfe",
                                             "caf\xc3\xa9",
                                             "ring",
                                             "nan",
                                             std::string(200, 'n'),
                                             std::string(70000, 'l')};
  return v;
}

// A value for `k`: mostly of its own type at an edge, sometimes of another type.
// A value of `k`'s type inside its range (log-uniform for wide ranges), or one of its choices.
bool set_valid(std::mt19937_64& rng, toml::table& t, const std::string& name, const KeySpec& k) {
  auto in_range = [&](double lo, double hi) {
    if (lo > 0 && hi / lo > 1e3)
      return std::exp(std::uniform_real_distribution<double>(std::log(lo), std::log(hi))(rng));
    return std::uniform_real_distribution<double>(lo, hi)(rng);
  };
  auto integer = [&] {
    const double hi = std::min<double>(static_cast<double>(k.hi),
                                       static_cast<double>(std::max<int64_t>(k.lo, 0)) + 4096);
    return static_cast<int64_t>(std::llround(
               in_range(static_cast<double>(std::max<int64_t>(k.lo, 1)), std::max(hi, 1.0)))) -
           (k.lo <= 0 && chance(rng, 0.2) ? 1 : 0);
  };
  switch (k.type) {
    case KeyType::kChoice:
      if (k.choices.empty()) return false;
      t.insert_or_assign(name, pick(rng, k.choices));
      return true;
    case KeyType::kBool:
      t.insert_or_assign(name, chance(rng, 0.5));
      return true;
    case KeyType::kInteger:
      t.insert_or_assign(name, std::clamp<int64_t>(integer(), k.lo, k.hi));
      return true;
    case KeyType::kIntegerOrWord:
      if (chance(rng, 0.3))
        t.insert_or_assign(name, k.word);
      else
        t.insert_or_assign(name, std::clamp<int64_t>(integer(), k.lo, k.hi));
      return true;
    case KeyType::kReal:
      t.insert_or_assign(name, in_range(k.lo_open ? std::max(k.real_lo, 1e-6) : k.real_lo,
                                        std::min(k.real_hi, 1e4)));
      return true;
    case KeyType::kIntegerList: {
      toml::array a;
      const int n = 1 + below(rng, 4);
      for (int i = 0; i < n; ++i) a.push_back(std::clamp<int64_t>(integer(), k.lo, k.hi));
      t.insert_or_assign(name, std::move(a));
      return true;
    }
    case KeyType::kToggle:
      if (chance(rng, 0.5))
        t.insert_or_assign(name, k.word);
      else
        t.insert_or_assign(name, chance(rng, 0.5));
      return true;
    default:
      return false;
  }
}

void set_value(std::mt19937_64& rng, toml::table& t, const std::string& name, const KeySpec* k) {
  if (k && chance(rng, 0.6) && set_valid(rng, t, name, *k)) return;
  const int kind = k && chance(rng, 0.7) ? static_cast<int>(k->type) : below(rng, 8);
  switch (kind) {
    case static_cast<int>(KeyType::kChoice):
      if (k && !k->choices.empty() && chance(rng, 0.6)) {
        t.insert_or_assign(name, pick(rng, k->choices));
        return;
      }
      [[fallthrough]];
    case static_cast<int>(KeyType::kString):
      t.insert_or_assign(name, pick(rng, edge_strings()));
      return;
    case static_cast<int>(KeyType::kBool):
      t.insert_or_assign(name, chance(rng, 0.5));
      return;
    case static_cast<int>(KeyType::kInteger):
    case static_cast<int>(KeyType::kIntegerOrWord):
      if (k && chance(rng, 0.4)) {
        // A bound, or one past it (where 64 bits have room: one past INT64_MAX is no integer).
        const int64_t x = chance(rng, 0.5) ? k->lo : k->hi;
        int64_t past = x;
        if (x == k->lo && x > std::numeric_limits<int64_t>::min()) past = x - 1;
        if (x == k->hi && x < std::numeric_limits<int64_t>::max()) past = x + 1;
        t.insert_or_assign(name, chance(rng, 0.5) ? x : past);
        return;
      }
      t.insert_or_assign(name, pick(rng, edge_integers()));
      return;
    case static_cast<int>(KeyType::kReal):
      t.insert_or_assign(name, chance(rng, 0.3) && k ? (chance(rng, 0.5) ? k->real_lo : k->real_hi)
                                                     : pick(rng, edge_reals()));
      return;
    case static_cast<int>(KeyType::kIntegerList): {
      toml::array a;
      const int n = chance(rng, 0.1) ? 5000 : below(rng, 6);
      for (int i = 0; i < n; ++i)
        a.push_back(chance(rng, 0.7) ? int64_t(below(rng, 8)) : pick(rng, edge_integers()));
      if (chance(rng, 0.1)) a.push_back("x");
      t.insert_or_assign(name, std::move(a));
      return;
    }
    case static_cast<int>(KeyType::kToggle):
      t.insert_or_assign(name, toml::table{});
      return;
    default: {
      toml::array a;
      a.push_back(toml::table{});
      t.insert_or_assign(name, std::move(a));
      return;
    }
  }
}

// The table at `path` ("" root, "model", "devices" element i, "planner.cluster" element i),
// created if absent; nullptr where something else stands in the way.
toml::table* table_at(std::mt19937_64& rng, toml::table& root, const TableSpec& spec) {
  if (spec.path.empty()) return &root;
  toml::table* cur = &root;
  std::stringstream ss(spec.path);
  std::vector<std::string> parts;
  for (std::string p; std::getline(ss, p, '.');) parts.push_back(p);
  for (size_t i = 0; i < parts.size(); ++i) {
    const bool last = i + 1 == parts.size();
    if (last && spec.is_array) {
      if (!cur->contains(parts[i])) cur->insert(parts[i], toml::array{});
      toml::array* a = cur->get(parts[i])->as_array();
      if (!a) return nullptr;
      if (a->empty() || chance(rng, 0.1)) a->push_back(toml::table{});
      toml::node* e = a->get(std::uniform_int_distribution<size_t>(0, a->size() - 1)(rng));
      return e ? e->as_table() : nullptr;
    }
    if (!cur->contains(parts[i])) cur->insert(parts[i], toml::table{});
    cur = cur->get(parts[i])->as_table();
    if (!cur) return nullptr;
  }
  return cur;
}

// Every table in the tree (for removals and unknown keys).
void all_tables(toml::table& t, std::vector<toml::table*>& out) {
  out.push_back(&t);
  for (auto&& [k, v] : t) {
    if (auto* sub = v.as_table()) all_tables(*sub, out);
    if (auto* arr = v.as_array())
      for (auto& e : *arr)
        if (auto* sub = e.as_table()) all_tables(*sub, out);
  }
}

void edit_tree(std::mt19937_64& rng, toml::table& root) {
  const auto& keys = scenario_keys();
  const auto& tables = scenario_tables();
  switch (below(rng, 10)) {
    case 0: {  // remove a key or table (the root's tables less often)
      std::vector<toml::table*> ts;
      all_tables(root, ts);
      toml::table* t = ts.size() > 1 && chance(rng, 0.8)
                           ? ts[1 + below(rng, static_cast<int>(ts.size()) - 1)]
                           : ts[0];
      if (t->empty()) return;
      auto it = t->begin();
      std::advance(it, below(rng, static_cast<int>(t->size())));
      t->erase(it);
      return;
    }
    case 1: {  // an unknown key
      std::vector<toml::table*> ts;
      all_tables(root, ts);
      pick(rng, ts)->insert_or_assign(chance(rng, 0.5) ? "unknown_key" : "hidden", int64_t(1));
      return;
    }
    case 2: {  // a table replaced by a scalar, or a scalar where a table is expected
      const TableSpec& spec = pick(rng, tables);
      if (spec.path.empty() || spec.path.find('.') != std::string::npos) return;
      if (chance(rng, 0.5))
        root.insert_or_assign(spec.path, int64_t(1));
      else
        root.insert_or_assign(spec.path, "x");
      return;
    }
    case 3: {  // a device group duplicated, or the pool grown
      toml::array* devices = root["devices"].as_array();
      if (!devices || devices->empty()) return;
      if (chance(rng, 0.5)) {
        toml::node* first = devices->get(0);
        if (first && first->as_table()) devices->push_back(*first->as_table());
      } else if (toml::table* d = devices->get(0)->as_table()) {
        d->insert_or_assign("count", int64_t(chance(rng, 0.5) ? 65 : 100000));
      }
      return;
    }
    default: {  // a known key set
      const KeySpec& k = pick(rng, keys);
      const TableSpec* spec = nullptr;
      for (const TableSpec& t : tables)
        if (t.path == k.table) spec = &t;
      if (!spec) return;
      if (toml::table* t = table_at(rng, root, *spec)) set_value(rng, *t, k.name, &k);
      return;
    }
  }
}

// A --set override: a known key (dotted, arrays by index) or a made-up path, and a value.
std::string random_override(std::mt19937_64& rng) {
  const KeySpec& k = pick(rng, scenario_keys());
  std::string path = k.table.empty() ? k.name : k.table + "." + k.name;
  if (k.table == "devices") path = "devices." + std::to_string(below(rng, 3)) + "." + k.name;
  if (chance(rng, 0.1))
    path =
        pick(rng, std::vector<std::string>{"a..b", ".x", "x.", "model.hidden.0", "devices.-1.count",
                                           "devices.99999999999999999999.count",
                                           "a.b.c.d.e.f.g.h.i.j.k.l.m.n.o.p.q"});
  std::string value;
  switch (below(rng, 6)) {
    case 0:
      value = std::to_string(pick(rng, edge_integers()));
      break;
    case 1:
      value = "[1, 2";
      break;
    case 2:
      value = pick(rng, edge_strings()).substr(0, 300);
      break;
    case 3:
      value = k.choices.empty() ? "1.5" : pick(rng, k.choices);
      break;
    case 4:
      value = std::string(40, '[') + std::string(40, ']');
      break;
    default:
      value = "{ a = 1 }";
      break;
  }
  return chance(rng, 0.05) ? path : path + "=" + value;
}

}  // namespace

ScenarioMutator::ScenarioMutator(std::vector<std::string> seeds, uint64_t seed)
    : seeds_(std::move(seeds)), rng_(seed) {}

ScenarioCase ScenarioMutator::next() {
  const int r = below(rng_, 100);
  if (r < 55) return structural();
  if (r < 90) return bytes();
  return limits();
}

ScenarioCase ScenarioMutator::structural() {
  toml::table root = parse_toml(pick(rng_, seeds_), "seed");
  const int edits = 1 + (chance(rng_, 0.5) ? 0 : below(rng_, 4));
  for (int i = 0; i < edits; ++i) edit_tree(rng_, root);
  std::ostringstream os;
  os << root;
  ScenarioCase c{os.str(), {}, "structure"};
  if (chance(rng_, 0.2)) {
    c.overrides.push_back(random_override(rng_));
    c.kind = "structure+set";
  }
  return c;
}

ScenarioCase ScenarioMutator::bytes() {
  std::string t = pick(rng_, seeds_);
  static const std::vector<std::string> tokens = {
      "[",       "]",     "[[",     "]]",  "{",   "}",  "=",          "\"",
      "'",       "'''",   "\"\"\"", ".",   ",",   "#",  "\n",         "\\",
      "\\u0000", "1e999", "-",      "inf", "nan", "0x", "1979-05-27", std::string(1, '\0')};
  const int edits = 1 + below(rng_, 16);
  for (int i = 0; i < edits && !t.empty(); ++i) {
    const size_t at = std::uniform_int_distribution<size_t>(0, t.size() - 1)(rng_);
    switch (below(rng_, 6)) {
      case 0:
        t[at] = static_cast<char>(chance(rng_, 0.8) ? 32 + below(rng_, 95) : below(rng_, 256));
        break;
      case 1:
        t[at] = static_cast<char>(t[at] ^ (1 << below(rng_, 8)));
        break;
      case 2:
        t.erase(at, 1 + below(rng_, 8));
        break;
      case 3:
        t.insert(at, pick(rng_, tokens));
        break;
      case 4: {
        const size_t len = std::min<size_t>(t.size() - at, 1 + below(rng_, 200));
        t.insert(std::uniform_int_distribution<size_t>(0, t.size())(rng_), t.substr(at, len));
        break;
      }
      default:
        t.resize(at);
        break;
    }
  }
  return {t, {}, "bytes"};
}

ScenarioCase ScenarioMutator::limits() {
  const TomlLimits lim;
  std::string t = pick(rng_, seeds_);
  std::string add;
  auto repeat = [](const std::string& s, size_t n) {
    std::string out;
    for (size_t i = 0; i < n; ++i) out += s;
    return out;
  };
  // At the limit minus one, at it, or one past it.
  const auto near = [&](size_t limit) { return limit - 1 + static_cast<size_t>(below(rng_, 3)); };
  switch (below(rng_, 5)) {
    case 0: {  // a deep header
      const size_t parts = chance(rng_, 0.2) ? 40000 : near(static_cast<size_t>(lim.max_key_parts));
      add = "\n[" + std::string("x") + repeat(".x", parts - 1) + "]\ny = 1\n";
      break;
    }
    case 1: {  // a deep dotted key
      const size_t parts =
          chance(rng_, 0.2) ? 100000 : near(static_cast<size_t>(lim.max_key_parts));
      add = "\nx" + repeat(".x", parts - 1) + " = 1\n";
      break;
    }
    case 2: {  // nested arrays or inline tables
      const size_t depth = chance(rng_, 0.2) ? 5000 : near(static_cast<size_t>(lim.max_nesting));
      add = chance(rng_, 0.5)
                ? "\nx = " + repeat("[", depth) + repeat("]", depth) + "\n"
                : "\nx = " + repeat("{ y = ", depth) + "1" + repeat("}", depth) + "\n";
      break;
    }
    case 3:  // a long string
      add = "\nx = \"" + std::string(near(lim.max_string_bytes) - 2, 's') + "\"\n";
      break;
    default:  // a long array
      add = "\nx = [" + repeat("0,", near(lim.max_array_elements)) + "]\n";
      break;
  }
  // Into the text at a line start: the end, or before a random line.
  size_t at = t.size();
  if (chance(rng_, 0.5)) {
    const size_t nl = t.find('\n', std::uniform_int_distribution<size_t>(0, t.size())(rng_));
    if (nl != std::string::npos) at = nl;
  }
  t.insert(at, add);
  return {t, {}, "limits"};
}

FrameMutator::FrameMutator(uint64_t seed) : rng_(seed) {}

FrameCase FrameMutator::next() {
  using namespace wire;
  // A real header first: a message of a random kind with 0 to 3 payload tensors.
  Message m;
  m.kind = static_cast<MsgKind>(1 + below(rng_, static_cast<int>(MsgKind::kLast)));
  m.id = below(rng_, 1000);
  m.step = below(rng_, 1000);
  m.bytes = below(rng_, 1 << 20);
  std::vector<at::Tensor> payload;
  int64_t elems = 0;
  const int tensors = below(rng_, 4);
  for (int i = 0; i < tensors; ++i) {
    std::vector<int64_t> shape(static_cast<size_t>(below(rng_, 4)));
    for (auto& d : shape) d = below(rng_, 5);
    payload.push_back(at::zeros(shape, at::kFloat));
    elems += payload.back().numel();
  }
  const bool inl = elems > 0 && chance(rng_, 0.7);
  at::Tensor flat = elems > 0 ? at::cat(std::vector<at::Tensor>([&] {
    std::vector<at::Tensor> v;
    for (auto& p : payload) v.push_back(p.reshape({-1}));
    return v;
  }()))
                              : at::Tensor();
  at::Tensor h = encode_header(m, payload, elems, inl ? flat : at::Tensor());
  FrameCase c;
  c.words.assign(h.data_ptr<int64_t>(), h.data_ptr<int64_t>() + h.numel());
  const int r = below(rng_, 10);
  if (r < 6) {  // words set to edge values
    c.kind = "frame-words";
    const int edits = 1 + below(rng_, 4);
    for (int i = 0; i < edits; ++i) {
      const size_t w = below(rng_, 4) == 0 ? below(rng_, static_cast<int>(c.words.size()))
                                           : static_cast<size_t>(below(rng_, kWShapes + 8));
      if (w >= c.words.size()) continue;
      c.words[w] = chance(rng_, 0.7) ? pick(rng_, edge_integers()) : static_cast<int64_t>(rng_());
    }
  } else if (r < 8) {  // cut short
    c.kind = "frame-short";
    c.words.resize(static_cast<size_t>(below(rng_, static_cast<int>(c.words.size()) + 1)));
  } else {  // random throughout, sometimes with the magic word
    c.kind = "frame-random";
    for (auto& w : c.words) w = static_cast<int64_t>(rng_());
    if (chance(rng_, 0.5) && !c.words.empty()) c.words[0] = kMagic;
  }
  return c;
}

}  // namespace rv::fuzz
