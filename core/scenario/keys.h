// The scenario key table: every key of a scenario file declared once, with its type, unit, range,
// help and the Scenario member that stores it (in the manner of CLI11 options or SimGrid's --cfg).
//
// Contract: the reader (parse_scenario), the writer of the resolved scenario (to_toml), the error
// messages and the README's key list are all driven by this table. A key's default is the initial
// value of its struct member, read from a default-constructed struct; it is not written here.
// Adding a key is one row in keys.cc plus the struct field that stores it.
//
// The table is built once, on first use, and is immutable afterwards (safe to read from any
// thread).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <variant>
#include <vector>

#include "core/scenario/scenario.h"

namespace rv {

enum class KeyType {
  kString,         // any string (optionally non-empty)
  kChoice,         // a string, one of `choices`
  kBool,           // true or false
  kInteger,        // an integer in [lo, hi]
  kReal,           // a number in [real_lo, real_hi], or (real_lo, real_hi] when lo_open
  kIntegerList,    // an array of integers, each in [lo, hi]; empty only when allow_empty
  kIntegerOrWord,  // `word` (stored as 0) or an integer in [lo, hi]
  kToggle,         // `word` ("auto", stored as Toggle::kAuto) or true or false
};

// One key's value (KeyValue, core/scenario/scenario.h), whatever struct member holds it.

// One row of the table.
struct KeySpec {
  std::string table;  // "" (top level), "model", ..., "devices", "planner.cluster"
  std::string name;   // the key inside its table
  KeyType type = KeyType::kString;
  std::string unit;  // "Mbit/s", "GiB", "ms", "TFLOPS", "s" or ""
  std::string help;
  std::vector<std::string> choices;  // kChoice, in the order documented
  std::string word;                  // kIntegerOrWord: the word that stands for 0
  int64_t lo = 0, hi = 0;            // kInteger, kIntegerOrWord, kIntegerList's elements
  double real_lo = 0, real_hi = 0;   // kReal
  bool lo_open = false;              // kReal: the lower bound itself is out of range
  bool allow_empty = true;           // kString, kIntegerList
  std::string default_text;          // the default as documented (a TOML value, "device<i>")
  // The default of element `index` of the key's table (index 0 outside arrays of tables).
  std::function<KeyValue(size_t index)> default_at;
  // Reads and writes the bound member; `index` picks the element of an array of tables. `set`
  // takes a value of the row's type, already validated.
  std::function<KeyValue(const Scenario&, size_t index)> get;
  std::function<void(Scenario&, size_t index, const KeyValue&)> set;

  // "training.lr"; inside an array of tables the element index: "devices[1].up_mbps".
  std::string dotted(size_t index = 0) const;
};

// One table of the file, in file order. Arrays of tables ([[devices]]) have a size and resize.
struct TableSpec {
  std::string path;       // "" (top level), "model", "devices", "planner.cluster"
  bool is_array = false;  // [[path]]
  bool required = false;  // arrays: at least one element is needed
  std::function<size_t(const Scenario&)> size;    // arrays only
  std::function<void(Scenario&, size_t)> resize;  // arrays only
};

const std::vector<TableSpec>& scenario_tables();
const std::vector<KeySpec>& scenario_keys();  // grouped by table, in the order of scenario_tables()

// `extra_choices` supplies the choices of keys the scenario module does not list itself
// (training.algorithm: the algorithm registry's names), by dotted key ("training.algorithm").
using ExtraChoices = std::map<std::string, std::vector<std::string>>;

// The key list as a Markdown table (key, type, unit, default, range or choices, help), one row per
// key, grouped by table; the README holds it between `<!-- keys:begin -->` and `<!-- keys:end -->`.
// `extra_rows` (rows declared outside the table, below) follow the last row of their table.
std::string keys_markdown(const ExtraChoices& extra_choices = {},
                          const std::vector<KeySpec>& extra_rows = {});
// The same list for a terminal: a header per table, two lines per key.
std::string keys_text(const ExtraChoices& extra_choices = {},
                      const std::vector<KeySpec>& extra_rows = {});

// ---- Keys declared outside the table ----
// An algorithm declares its own [training] keys in its file (algo/registry.h: Algorithm::keys).
// The reader keeps such keys as read in TrainingSpec::algorithm_keys; the registry checks them
// against the algorithm's rows (read_key_value) and fills in the defaults. These rows carry a
// name, type, range, default and help; their get and set are empty.
KeySpec training_real_key(const char* name, double default_value, double lo, double hi,
                          bool lo_open, const char* help);
KeySpec training_integer_key(const char* name, int64_t default_value, int64_t lo, int64_t hi,
                             const char* help);
KeySpec training_flag_key(const char* name, bool default_value, const char* help);

// `value` as read checked against `key` as the reader checks a key of the table (type, range),
// and returned as the key's type (an integer given for a real key as a double); ScenarioError at
// `where` ("quick.toml:12") otherwise. Defined in scenario.cc.
KeyValue read_key_value(const KeySpec& key, const KeyValue& value, const std::string& where);
// The value of a row declared outside the table in `training`: the one stored there, checked
// unless it has the key's type already (the registry's check leaves it so), or the row's default.
KeyValue stored_value(const TrainingSpec& training, const KeySpec& key);

// `value` written as a TOML value of the row's type ("stages" for kIntegerOrWord's 0).
std::string toml_value_text(const KeySpec& key, const KeyValue& value);

}  // namespace rv
