#include "core/output/event_schema.h"

#include <cmath>
#include <cstdio>
#include <map>
#include <optional>
#include <ostream>
#include <sstream>
#include <stdexcept>
#include <type_traits>

#include "core/error.h"

namespace rv {

const std::vector<EventField>& event_fields() {
  static const std::vector<EventField> fields = {
      {"kind", &Event::kind, CsvFormat::kDefault, true},
      {"node", &Event::node, CsvFormat::kDefault, true},
      {"cluster", &Event::cluster},
      {"stage", &Event::stage},
      {"step", &Event::step},
      {"micro_batch", &Event::micro_batch},
      {"start_s", &Event::start, CsvFormat::kTime, true},
      {"end_s", &Event::end, CsvFormat::kTime, true},
      {"loss", &Event::loss},
      {"accuracy", &Event::accuracy},
      {"staleness", &Event::staleness},
      {"bytes", &Event::bytes},
      {"peer", &Event::peer},
      {"samples", &Event::samples},
      {"cpu_s", &Event::cpu},
      {"grad_norm2", &Event::grad_norm2},
      {"device_s", &Event::device},  // absent in run folders written before it
      {nullptr, &Event::count},
      {nullptr, &Event::values},
  };
  return fields;
}

const std::vector<EvalColumn>& eval_columns() {
  static const std::vector<EvalColumn> columns = {
      {"time_s", &Event::end, CsvFormat::kTime},
      {"node", &Event::node},
      {"cluster", &Event::cluster},
      {"step", &Event::step},
      {"train_samples", &Event::samples},
      {"test_loss", &Event::loss},
      {"test_accuracy", &Event::accuracy},
  };
  return columns;
}

namespace {

template <class T>
constexpr size_t encoded_size() {
  if constexpr (std::is_same_v<T, std::vector<float>>) return sizeof(int64_t);  // its count
  if constexpr (std::is_same_v<T, EventKind> || std::is_same_v<T, int>) return sizeof(int32_t);
  return sizeof(T);
}

void write_value(std::ostream& os, EventKind v, CsvFormat) { os << to_string(v); }
void write_value(std::ostream& os, int v, CsvFormat) { os << v; }
void write_value(std::ostream& os, int64_t v, CsvFormat) { os << v; }
void write_value(std::ostream& os, double v, CsvFormat format) {
  char buf[64];
  if (format == CsvFormat::kTime) {
    std::snprintf(buf, sizeof buf, "%.9f", v);
  } else {
    if (std::isnan(v)) return;
    std::snprintf(buf, sizeof buf, "%.9g", v);
  }
  os << buf;
}
void write_value(std::ostream&, const std::vector<float>&, CsvFormat) {}

// Event kinds by their metrics.csv name (every kind but kParams, which params.csv holds).
const std::map<std::string, EventKind>& kinds_by_name() {
  static const std::map<std::string, EventKind> kinds = [] {
    std::map<std::string, EventKind> m;
    for (int k = 1; k <= static_cast<int>(EventKind::kLastKind); ++k)
      if (k != static_cast<int>(EventKind::kParams))
        m[to_string(static_cast<EventKind>(k))] = static_cast<EventKind>(k);
    return m;
  }();
  return kinds;
}

// Parses one field into `v`; std::logic_error (std::stoi's) or rv::InputError when it is not one.
void read_value(const std::string& f, EventKind& v) {
  auto k = kinds_by_name().find(f);
  if (k == kinds_by_name().end()) throw InputError("unknown event kind '" + f + "'");
  v = k->second;
}
void read_value(const std::string& f, int& v) { v = std::stoi(f); }
void read_value(const std::string& f, int64_t& v) { v = std::stoll(f); }
void read_value(const std::string& f, double& v) { v = f.empty() ? kNaN : std::stod(f); }
void read_value(const std::string&, std::vector<float>&) {}

std::string join_header(const std::vector<const char*>& names) {
  std::string h;
  for (const char* n : names) h += (h.empty() ? "" : ",") + std::string(n);
  return h;
}

std::vector<std::string> split_row(const std::string& line) {
  std::vector<std::string> f;
  std::stringstream ss(line);
  for (std::string c; std::getline(ss, c, ',');) f.push_back(c);
  if (!line.empty() && line.back() == ',') f.push_back("");
  return f;
}

// The field each of the header's columns fills, checked: every column known and named once,
// every required column present.
std::vector<const EventField*> columns_of(const std::string& header, const std::string& where) {
  std::map<std::string, const EventField*> by_name;
  for (const EventField& f : event_fields())
    if (f.column != nullptr) by_name[f.column] = &f;
  std::vector<const EventField*> out;
  for (const std::string& name : split_row(header)) {
    auto it = by_name.find(name);
    if (it == by_name.end())
      throw InputError(where + ":1: not a metrics.csv header: unknown column '" + name + "'");
    for (const EventField* seen : out)
      if (seen == it->second)
        throw InputError(where + ":1: not a metrics.csv header: column '" + name + "' twice");
    out.push_back(it->second);
  }
  for (const EventField& f : event_fields()) {
    if (!f.required) continue;
    bool present = false;
    for (const EventField* c : out) present = present || c == &f;
    if (!present)
      throw InputError(where + ":1: not a metrics.csv header: no column '" + f.column + "'");
  }
  return out;
}

}  // namespace

size_t min_encoded_event_bytes() {
  size_t n = 0;
  for (const EventField& f : event_fields())
    std::visit([&](auto member) { n += encoded_size<std::decay_t<decltype(Event{}.*member)>>(); },
               f.member);
  return n;
}

const std::string& metrics_csv_header() {
  static const std::string header = [] {
    std::vector<const char*> names;
    for (const EventField& f : event_fields())
      if (f.column != nullptr) names.push_back(f.column);
    return join_header(names);
  }();
  return header;
}

const std::string& eval_csv_header() {
  static const std::string header = [] {
    std::vector<const char*> names;
    for (const EvalColumn& c : eval_columns()) names.push_back(c.column);
    return join_header(names);
  }();
  return header;
}

void append_event_row(std::ostream& os, const Event& e) {
  if (e.kind == EventKind::kParams) return;  // params.csv
  bool first = true;
  for (const EventField& f : event_fields()) {
    if (f.column == nullptr) continue;
    if (!first) os << ',';
    first = false;
    std::visit([&](auto member) { write_value(os, e.*member, f.format); }, f.member);
  }
  os << '\n';
}

void append_eval_row(std::ostream& os, const Event& e) {
  bool first = true;
  for (const EvalColumn& c : eval_columns()) {
    if (!first) os << ',';
    first = false;
    std::visit([&](auto member) { write_value(os, e.*member, c.format); }, c.member);
  }
  os << '\n';
}

std::string events_csv(const std::vector<Event>& events) {
  std::ostringstream os;
  os << metrics_csv_header() << "\n";
  for (const Event& e : events) append_event_row(os, e);
  return os.str();
}

std::vector<Event> parse_events_csv(std::istream& in, const std::string& where) {
  std::string line;
  if (!std::getline(in, line)) throw InputError(where + ":1: not a metrics.csv header: empty");
  const std::vector<const EventField*> columns = columns_of(line, where);
  std::vector<Event> out;
  for (int line_no = 2; std::getline(in, line); ++line_no) {
    if (line.empty()) continue;
    const std::string at = where + ":" + std::to_string(line_no) + ": ";
    const std::vector<std::string> f = split_row(line);
    if (f.size() != columns.size())
      throw InputError(at + "expected " + std::to_string(columns.size()) + " fields");
    Event e;
    try {
      for (size_t i = 0; i < columns.size(); ++i)
        std::visit([&](auto member) { read_value(f[i], e.*member); }, columns[i]->member);
    } catch (const InputError& ex) {
      throw InputError(at + ex.what());
    } catch (const std::logic_error& ex) {
      throw InputError(at + "bad field: " + ex.what());
    }
    out.push_back(std::move(e));
  }
  return out;
}

}  // namespace rv
