#include "core/checkpoint/checkpoint.h"

#include <ATen/ATen.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <type_traits>

#include "core/error.h"
#include "core/output/event_schema.h"
#include "core/output/whole_file.h"

namespace fs = std::filesystem;

namespace rv {
namespace {

constexpr char kMagic[8] = {'R', 'V', 'C', 'K', 'P', 'T', '0', '2'};  // 02: events carry `device`
constexpr char kEventsMagic[8] = {'R', 'V', 'E', 'V', 'T', 'S', '0', '1'};
constexpr int64_t kMaxDims = 8;
constexpr const char* kComplete = "complete.json";

class Writer {
 public:
  template <class T>
  void put(T v) {
    static_assert(std::is_trivially_copyable_v<T>);
    out_.append(reinterpret_cast<const char*>(&v), sizeof v);
  }
  void raw(const void* p, size_t n) { out_.append(static_cast<const char*>(p), n); }
  std::string take() { return std::move(out_); }

 private:
  std::string out_;
};

class Reader {
 public:
  Reader(const std::string& bytes, const std::string& where) : b_(bytes), where_(where) {}
  template <class T>
  T get() {
    T v;
    need(sizeof v);
    std::memcpy(&v, b_.data() + pos_, sizeof v);
    pos_ += sizeof v;
    return v;
  }
  void raw(void* p, size_t n) {
    need(n);
    std::memcpy(p, b_.data() + pos_, n);
    pos_ += n;
  }
  // A count of items of `item` bytes each that must fit in what remains.
  int64_t count(size_t item) {
    const auto n = get<int64_t>();
    if (n < 0 || (item > 0 && static_cast<uint64_t>(n) > (b_.size() - pos_) / item))
      fail("a count beyond the file's end");
    return n;
  }
  void magic(const char (&m)[8]) {
    char got[8];
    raw(got, 8);
    if (std::memcmp(got, m, 8) != 0) fail("not a checkpoint file of this version");
  }
  void end() {
    if (pos_ != b_.size()) fail("trailing bytes");
  }
  size_t remaining() const { return b_.size() - pos_; }
  [[noreturn]] void fail(const std::string& what) const {
    throw InputError(where_ + ": malformed checkpoint (" + what + " at byte " +
                     std::to_string(pos_) + ")");
  }

 private:
  void need(size_t n) {
    if (b_.size() - pos_ < n) fail("it ends early");
  }
  const std::string& b_;
  std::string where_;
  size_t pos_ = 0;
};

// An event's fields in the schema's order (core/output/event_schema.h): EventKind and int as
// int32, the rest as they are, the values array as its count and its floats.
void put_event(Writer& w, const Event& e) {
  for_each_event_field(e, [&](const EventField&, const auto& v) {
    using T = std::decay_t<decltype(v)>;
    if constexpr (std::is_same_v<T, std::vector<float>>) {
      w.put(static_cast<int64_t>(v.size()));
      w.raw(v.data(), v.size() * sizeof(float));
    } else if constexpr (std::is_same_v<T, EventKind> || std::is_same_v<T, int>) {
      w.put(static_cast<int32_t>(v));
    } else {
      w.put(v);
    }
  });
}

Event get_event(Reader& r) {
  Event e;
  for_each_event_field(e, [&](const EventField&, auto& v) {
    using T = std::decay_t<decltype(v)>;
    if constexpr (std::is_same_v<T, std::vector<float>>) {
      v.resize(static_cast<size_t>(r.count(sizeof(float))));
      r.raw(v.data(), v.size() * sizeof(float));
    } else if constexpr (std::is_same_v<T, EventKind>) {
      const auto kind = r.get<int32_t>();
      if (kind < 1 || kind > static_cast<int32_t>(EventKind::kLastKind))
        r.fail("an unknown event kind");
      v = static_cast<EventKind>(kind);
    } else if constexpr (std::is_same_v<T, int>) {
      v = r.get<int32_t>();
    } else {
      v = r.get<T>();
    }
  });
  return e;
}

void put_events(Writer& w, const std::vector<Event>& events) {
  w.put(static_cast<int64_t>(events.size()));
  for (const Event& e : events) put_event(w, e);
}

std::vector<Event> get_events(Reader& r) {
  // A count beyond what remains is malformed before any allocation.
  const int64_t n = r.count(min_encoded_event_bytes());
  std::vector<Event> out;
  out.reserve(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) out.push_back(get_event(r));
  return out;
}

void put_tensor(Writer& w, const at::Tensor& t) {
  if (!t.defined()) {
    w.put(int64_t{-1});
    return;
  }
  const at::Tensor c = t.to(at::kFloat).contiguous();
  w.put(static_cast<int64_t>(c.dim()));
  for (int64_t d = 0; d < c.dim(); ++d) w.put(static_cast<int64_t>(c.size(d)));
  w.raw(c.data_ptr<float>(), static_cast<size_t>(c.numel()) * sizeof(float));
}

at::Tensor get_tensor(Reader& r) {
  const auto dims = r.get<int64_t>();
  if (dims == -1) return {};
  if (dims < 0 || dims > kMaxDims) r.fail("a tensor of " + std::to_string(dims) + " dimensions");
  std::vector<int64_t> shape;
  int64_t numel = 1;
  for (int64_t d = 0; d < dims; ++d) {
    const int64_t n = r.count(0);
    if (n > 0 && numel > (int64_t{1} << 40) / n) r.fail("a tensor too large");
    numel *= n;
    shape.push_back(n);
  }
  if (static_cast<uint64_t>(numel) > r.remaining() / sizeof(float))
    r.fail("a tensor beyond the file's end");
  at::Tensor t = at::empty(shape, at::kFloat);
  r.raw(t.data_ptr<float>(), static_cast<size_t>(numel) * sizeof(float));
  return t;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(path + ": cannot read the checkpoint file");
  std::ostringstream os;
  os << in.rdbuf();
  return os.str();
}

}  // namespace

std::string encode_node_state(const NodeState& s) {
  Writer w;
  w.raw(kMagic, 8);
  w.put(static_cast<int32_t>(s.node));
  w.put(static_cast<int32_t>(s.cluster));
  w.put(static_cast<int32_t>(s.stage));
  w.put(s.done);
  w.put(s.time);
  w.put(s.version);
  w.put(s.trained);
  w.put(s.averagings);
  w.put(s.peak_memory);
  w.put(s.stage_version);
  w.put(s.optimizer_steps);
  put_tensor(w, s.state);
  put_events(w, s.events);
  return w.take();
}

NodeState decode_node_state(const std::string& bytes, const std::string& where) {
  Reader r(bytes, where);
  r.magic(kMagic);
  NodeState s;
  s.node = r.get<int32_t>();
  s.cluster = r.get<int32_t>();
  s.stage = r.get<int32_t>();
  s.done = r.get<int64_t>();
  s.time = r.get<double>();
  s.version = r.get<int64_t>();
  s.trained = r.get<int64_t>();
  s.averagings = r.get<int64_t>();
  s.peak_memory = r.get<Bytes>();
  s.stage_version = r.get<int64_t>();
  s.optimizer_steps = r.get<int64_t>();
  s.state = get_tensor(r);
  s.events = get_events(r);
  r.end();
  if (s.node < 0 || s.done < 0) r.fail("a negative node or update count");
  return s;
}

std::string encode_log(const LogState& log) {
  Writer w;
  w.raw(kEventsMagic, 8);
  put_events(w, log.events);
  put_events(w, log.totals);
  return w.take();
}

LogState decode_log(const std::string& bytes, const std::string& where) {
  Reader r(bytes, where);
  r.magic(kEventsMagic);
  LogState out;
  out.events = get_events(r);
  out.totals = get_events(r);
  r.end();
  return out;
}

LogState read_log(const std::string& path) { return decode_log(read_file(path), path); }

std::string round_folder(const std::string& dir, int64_t done) {
  return (fs::path(dir) / ("round-" + std::to_string(done))).string();
}

std::string node_state_file(const std::string& folder, int node) {
  return (fs::path(folder) / ("node-" + std::to_string(node) + ".state")).string();
}

std::string events_file(const std::string& folder) {
  return (fs::path(folder) / "events.state").string();
}

std::string node_state_path(const std::string& dir, int64_t done, int node) {
  return node_state_file(round_folder(dir, done), node);
}

std::string events_path(const std::string& dir, int64_t done) {
  return events_file(round_folder(dir, done));
}

void write_node_state(const std::string& dir, const NodeState& s) {
  std::error_code ec;
  fs::create_directories(round_folder(dir, s.done), ec);
  if (ec)
    throw Error(round_folder(dir, s.done) + ": cannot make the checkpoint folder (" + ec.message() +
                ")");
  write_whole_file(node_state_path(dir, s.done, s.node), encode_node_state(s));
}

NodeState read_node_state(const std::string& path) {
  return decode_node_state(read_file(path), path);
}

NodeState read_node_state(const CheckpointInfo& point, int node) {
  const std::string file = node_state_file(point.folder, node);
  NodeState s = read_node_state(file);
  if (s.node != node || s.done != point.done)
    throw InputError(file + ": holds node " + std::to_string(s.node) + " after " +
                     std::to_string(s.done) + " updates, not node " + std::to_string(node) +
                     " after " + std::to_string(point.done));
  return s;
}

void complete_checkpoint(const std::string& dir, const CheckpointInfo& info) {
  nlohmann::json j{{"done", info.done}, {"time_s", info.time}, {"nodes", info.nodes}};
  const std::string folder = round_folder(dir, info.done);
  write_whole_file((fs::path(folder) / kComplete).string(), j.dump(1) + "\n");
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("round-", 0) == 0 && entry.path() != fs::path(folder))
      fs::remove_all(entry.path(), ec);
  }
}

CheckpointInfo read_checkpoint(const std::string& folder) {
  const fs::path complete = fs::path(folder) / kComplete;
  const std::string where = complete.string();
  std::error_code ec;
  if (!fs::is_regular_file(complete, ec))
    throw InputError(folder + ": not a complete checkpoint (no " + kComplete + ")");
  CheckpointInfo info;
  try {
    const nlohmann::json j = nlohmann::json::parse(read_file(where));
    info.done = j.at("done").get<int64_t>();
    info.time = j.at("time_s").get<double>();
    info.nodes = j.at("nodes").get<std::vector<int>>();
  } catch (const nlohmann::json::exception& e) {
    throw InputError(where + ": malformed (" + e.what() + ")");
  }
  fs::path normal = fs::path(folder).lexically_normal();
  if (normal.filename().empty()) normal = normal.parent_path();  // "…/round-100/"
  const std::string name = normal.filename().string();
  if (name != "round-" + std::to_string(info.done))
    throw InputError(where + ": says round " + std::to_string(info.done) + " in folder " + name);
  info.folder = folder;
  return info;
}

std::optional<CheckpointInfo> last_checkpoint(const std::string& dir) {
  std::error_code ec;
  std::optional<CheckpointInfo> best;
  if (!fs::is_directory(dir, ec)) return best;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("round-", 0) != 0 || !fs::is_regular_file(entry.path() / kComplete, ec))
      continue;
    CheckpointInfo info = read_checkpoint(entry.path().string());
    if (!best || info.done > best->done) best = info;
  }
  return best;
}

std::string checkpoint_dir(const std::string& configured, const std::string& run_folder) {
  return configured.empty() ? (fs::path(run_folder) / "checkpoints").string() : configured;
}

}  // namespace rv
