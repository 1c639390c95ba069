#include "core/compute/profile.h"

#include <toml++/toml.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "core/input/toml_input.h"

namespace rv {
namespace {

std::string number(double v) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return buf;
}

// A curve of (wait, value) points at `wait`: linear in the logarithm of the wait between points,
// 0 before the first, the last point's value after it.
template <class Point>
double on_curve(const std::vector<Point>& curve, double Point::*value, Seconds wait) {
  if (curve.empty() || !(wait >= curve.front().wait)) return 0;
  for (size_t i = 1; i < curve.size(); ++i) {
    if (wait >= curve[i].wait) continue;
    const Point& a = curve[i - 1];
    const Point& b = curve[i];
    const double x = std::log(wait / a.wait) / std::log(b.wait / a.wait);
    return a.*value + x * (b.*value - a.*value);
  }
  return curve.back().*value;
}

}  // namespace

double cold_fraction(const ComputeProfile& p, Seconds idle) {
  return on_curve(p.idle_cold, &ComputeProfile::Cooling::cold, idle);
}

Seconds wake_cost(const ComputeProfile& p, Seconds wait) {
  return on_curve(p.idle_op, &ComputeProfile::Waking::op, wait);
}

Seconds wake_span_cost(const ComputeProfile& p, Seconds wait) {
  return on_curve(p.idle_op, &ComputeProfile::Waking::span, wait);
}

Seconds DeviceHistory::begin(const Work& work, const ComputeProfile& profile, Seconds start,
                             SavedActivations saved) {
  double out = 0;
  if (saved.use == SavedActivations::Use::kWrites && work.saved_bytes() > 0) {
    kept_[saved.micro_batch] = {touches_, touches_, work.saved_bytes()};
    ++touches_;
    trim();
  } else if (saved.use == SavedActivations::Use::kReads) {
    out = evicted(saved.micro_batch, profile);
  }
  const Seconds idle = start - last_end_;
  if (profile.idle_op.empty()) return time_of(work, profile, idle, 0, out);
  if (wake_cost(profile, idle) > 0 ||
      wake_span_cost(profile, idle) > 0) {  // a wait the curve charges: a new busy period
    woke_after_ = idle;
    warm_.clear();
  }
  Seconds wake = 0;
  const uint64_t code = work.code();
  if (woke_after_ > 0 && std::find(warm_.begin(), warm_.end(), code) == warm_.end()) {
    wake = woke_after_;
    warm_.push_back(code);
  }
  return time_of(work, profile, idle, wake, out);
}

double evicted_bytes(double own, double others, const ComputeProfile& p) {
  if (!(p.memory_bytes_per_s > 0 && p.cache_bytes > 0)) return 0;
  return own - std::clamp(p.cache_bytes - others, 0.0, own);
}

double DeviceHistory::evicted(int64_t micro_batch, const ComputeProfile& profile) {
  const auto it = kept_.find(micro_batch);
  if (it == kept_.end() || it->second.written < 0) return 0;
  double others = 0;  // each other micro-batch's once
  for (const auto& [mb, k] : kept_)
    if (mb != micro_batch && k.touched > it->second.written) others += k.bytes;
  const double own = it->second.bytes;
  it->second.written = -1;
  it->second.touched = touches_++;
  trim();
  return evicted_bytes(own, others, profile);
}

void DeviceHistory::trim() {
  for (;;) {
    auto oldest = kept_.end();  // the oldest forward still waiting for its backward
    for (auto it = kept_.begin(); it != kept_.end(); ++it)
      if (it->second.written >= 0 &&
          (oldest == kept_.end() || it->second.written < oldest->second.written))
        oldest = it;
    const int64_t from = oldest == kept_.end() ? touches_ : oldest->second.written;
    for (auto it = kept_.begin(); it != kept_.end();)
      it = it->second.written < 0 && it->second.touched < from ? kept_.erase(it) : std::next(it);
    if (kept_.size() <= kMaxKept || oldest == kept_.end()) return;
    oldest->second.written = -1;  // forgotten: its backward, if it comes, as one never seen
  }
}

void DeviceHistory::end(Seconds at) { last_end_ = at; }

Seconds time_of(const Work& work, const ComputeProfile& p, Seconds idle, Seconds wake,
                double evicted) {
  Seconds t = 0;
  for (int q = 0; q < kPasses; ++q)
    for (int k = 0; k < kOpKinds; ++k) {
      const auto pass = static_cast<Pass>(q);
      const auto kind = static_cast<OpKind>(k);
      const KindCost& cost = p.of(pass, kind);
      for (int c = 0; c < kOpClasses; ++c) {
        const double ops = work.ops(kind, pass, c);
        if (ops == 0) continue;
        t += ops * cost.overhead + cost.first +
             work.flops(kind, pass, c) /
                 (p.peak_flops_per_s * cost.efficiency[static_cast<size_t>(c)]);
      }
    }
  if (p.memory_bytes_per_s > 0) {
    const double missed =
        p.cache_bytes > 0 && work.resident_bytes() > p.cache_bytes ? work.cold_bytes() : 0;
    const double rest =
        std::max(0.0, work.cold_bytes() + work.idle_cold_bytes() - missed - evicted);
    t += (missed + evicted + cold_fraction(p, idle) * rest) / p.memory_bytes_per_s;
  }
  if (!p.idle_op.empty()) {
    if (idle > 0) t += wake_span_cost(p, idle);
    if (wake > 0) t += work.codes() * wake_cost(p, wake);
  }
  return t;
}

namespace {

// A profile file's TOML, read step by step; each refusal names the source and the key.
class ProfileReader {
 public:
  ProfileReader(const std::string& text, const std::string& source)
      : root_(parse_toml(text, source)), source_(source) {}

  ComputeProfile read() {
    check_keys();
    ComputeProfile p;
    p.name = root_["name"].value_or(std::string("profile"));
    read_peak_and_threads(p);
    read_memory(p);
    read_idle_curves(p);
    for (int q = 0; q < kPasses; ++q) read_pass(p, static_cast<Pass>(q));
    read_first_ops(p);
    return p;
  }

 private:
  // A curve's point: a wait and one value, or two where the curve names a second.
  struct Point {
    Seconds wait;
    double value, second;
  };

  [[noreturn]] void fail(const std::string& key, const std::string& what) const {
    throw InputError(source_ + ": key '" + key + "': " + what);
  }

  void check_keys() const {
    for (const auto& [k, v] : root_) {
      const std::string key(k.str());
      if (key != "name" && key != "peak_tflops" && key != "threads" && key != "memory_gbps" &&
          key != "cache_mib" && key != "idle_cold" && key != "idle_cold_ms" &&
          key != "idle_op_us" && key != "first_op_us" && key != "forward" && key != "backward")
        fail(key,
             "unknown key (expected name, peak_tflops, threads, memory_gbps, cache_mib, idle_cold "
             "(or idle_cold_ms), idle_op_us, first_op_us, [forward], [backward])");
    }
  }

  void read_peak_and_threads(ComputeProfile& p) const {
    const auto peak = root_["peak_tflops"].value<double>();
    if (!peak || !(*peak > 0) || *peak > 1e6) fail("peak_tflops", "expected a number in (0, 1e6]");
    p.peak_flops_per_s = *peak * kTflopsToFlopsPerSecond;
    if (root_.contains("threads")) {
      const auto threads = root_["threads"].value<int64_t>();
      if (!threads || *threads < 0 || *threads > 4096)
        fail("threads", "expected an integer in [0, 4096]");
      p.threads = static_cast<int>(*threads);
    }
  }

  void read_memory(ComputeProfile& p) const {
    if (!root_.contains("memory_gbps") && !root_.contains("cache_mib")) return;
    const auto gbps = root_["memory_gbps"].value<double>();
    const auto mib = root_["cache_mib"].value<double>();
    if (!gbps || !(*gbps > 0) || *gbps > 1e6)
      fail("memory_gbps", "expected a number in (0, 1e6] (with cache_mib)");
    if (!mib || !(*mib > 0) || *mib > 1e6)
      fail("cache_mib", "expected a number in (0, 1e6] (with memory_gbps)");
    p.memory_bytes_per_s = *gbps * 1e9;
    p.cache_bytes = *mib * 1048576.0;
  }

  // The cooling curve (idle_cold, or its one step idle_cold_ms) and the wake-up costs
  // (idle_op_us).
  void read_idle_curves(ComputeProfile& p) const {
    if (root_.contains("idle_cold") && root_.contains("idle_cold_ms"))
      fail("idle_cold_ms",
           "give the cooling curve (idle_cold) or its step (idle_cold_ms), not both");
    if (root_.contains("idle_cold_ms")) {
      const auto ms = root_["idle_cold_ms"].value<double>();
      if (!ms || !(*ms >= 0) || *ms > 1e6)
        fail("idle_cold_ms", "expected a number in [0, 1e6] (0: never)");
      if (*ms > 0 && p.memory_bytes_per_s <= 0)
        fail("idle_cold_ms", "needs memory_gbps and cache_mib");
      if (*ms > 0) p.idle_cold.push_back({*ms * 1e-3, 1.0});
    }
    if (root_.contains("idle_cold")) {
      const auto points = curve("idle_cold", "fraction cold", 1,
                                "fractions must not decrease (a cache does not warm up idle)");
      if (!points.empty() && p.memory_bytes_per_s <= 0)
        fail("idle_cold", "needs memory_gbps and cache_mib");
      for (const Point& q : points) p.idle_cold.push_back({q.wait, q.value});
    }
    if (root_.contains("idle_op_us")) {
      for (const Point& q :
           curve("idle_op_us", "us per operation", 1e6,
                 "costs must not decrease (a longer wait loses no less)", "us per span"))
        p.idle_op.push_back({q.wait, q.value * 1e-6, q.second * 1e-6});
    }
  }

  // A curve's [wait ms, value] points, or [wait ms, value, second] where `second` names one:
  // waits increasing, values in [0, most] and each nondecreasing (the second 0 where absent).
  std::vector<Point> curve(const std::string& key, const std::string& value, double most,
                           const std::string& rising, const std::string& second = "") const {
    std::vector<Point> points;
    const std::string form =
        "[wait ms, " + value + (second.empty() ? "" : " (, " + second + ", 0 if absent)") + "]";
    const toml::array* a = root_[key].as_array();
    if (a == nullptr) fail(key, "expected an array of " + form + " points");
    for (size_t i = 0; i < a->size(); ++i) {
      const std::string at = key + "[" + std::to_string(i) + "]";
      const toml::array* point = (*a)[i].as_array();
      const size_t n = point ? point->size() : 0;
      if (n != 2 && (second.empty() || n != 3)) fail(at, "expected " + form);  // not an array: 0
      const auto ms = (*point)[0].value<double>();
      const auto v = (*point)[1].value<double>();
      const auto w = n == 3 ? (*point)[2].value<double>() : std::optional<double>(0.0);
      if (!ms || !v || !w) fail(at, "expected " + form);
      if (!(*ms > 0) || *ms > 1e6) fail(at, "expected a wait in (0, 1e6] ms");
      if (!(*v >= 0) || *v > most)
        fail(at, "expected a " + value + " in [0, " + number(most) + "]");
      if (!(*w >= 0) || *w > most)
        fail(at, "expected a " + second + " in [0, " + number(most) + "]");
      if (i > 0 && !(*ms * 1e-3 > points.back().wait)) fail(at, "waits must increase");
      if (i > 0 && (*v < points.back().value || *w < points.back().second)) fail(at, rising);
      points.push_back({*ms * 1e-3, *v, *w});
    }
    return points;
  }

  // [forward] or [backward]: per kind, the fixed cost and the efficiency of each class.
  void read_pass(ComputeProfile& p, Pass q) const {
    const std::string pass = pass_name(q);
    const toml::table* t = root_[pass].as_table();
    if (t == nullptr)
      fail(pass, "expected a table with matmul, conv, norm, pool, elementwise (and random)");
    for (const auto& [k, v] : *t) {
      bool known = false;
      for (int i = 0; i < kOpKinds; ++i) known |= k.str() == op_kind_name(static_cast<OpKind>(i));
      if (!known) fail(pass + "." + std::string(k.str()), "unknown kind");
    }
    for (int k = 0; k < kOpKinds; ++k) {
      const std::string key = pass + "." + op_kind_name(static_cast<OpKind>(k));
      const toml::array* a = (*t)[op_kind_name(static_cast<OpKind>(k))].as_array();
      if (a == nullptr && static_cast<OpKind>(k) == OpKind::kRandom &&
          !t->contains(op_kind_name(OpKind::kRandom))) {
        // A profile from before the random kind: dropout as elementwise (profile.h).
        p.of(q, OpKind::kRandom) = p.of(q, OpKind::kElementwise);
        continue;
      }
      // kOpClasses efficiencies, or the 12 of a profile from before the middle footprint (work.h).
      constexpr size_t kTwoFootprints = 2 * kIntensities;
      if (a == nullptr || (a->size() != 1 + kOpClasses && a->size() != 1 + kTwoFootprints))
        fail(key,
             "expected [fixed cost in us, then 18 efficiencies: intensity < 4, < 8, < 16, < 32, < "
             "64, >= 64 flop/B within 1 MiB, the same up to 8 MiB, the same beyond] (or 12: within "
             "1 MiB, beyond)");
      const bool two = a->size() == 1 + kTwoFootprints;
      KindCost& cost = p.of(q, static_cast<OpKind>(k));
      const auto overhead = (*a)[0].value<double>();
      if (!overhead || !(*overhead >= 0) || *overhead > 1e6)
        fail(key, "expected a fixed cost in [0, 1e6] us first");
      cost.overhead = *overhead * 1e-6;
      for (int c = 0; c < kOpClasses; ++c) {
        const int from = two && c >= kTwoFootprints ? c - kIntensities : c;
        const auto e = (*a)[static_cast<size_t>(from + 1)].value<double>();
        if (!e || !(*e > 0) || *e > kMaxEfficiency) fail(key, "expected efficiencies in (0, 16]");
        cost.efficiency[static_cast<size_t>(c)] = *e;
      }
    }
  }

  // first_op_us: per pass and kind, what its first operation in a span costs more.
  void read_first_ops(ComputeProfile& p) const {
    if (!root_.contains("first_op_us")) return;
    const std::string form =
        "expected [[6 forward], [6 backward]] us: matmul, conv, norm, pool, elementwise, random "
        "(or 5 each, without random)";
    const toml::array* a = root_["first_op_us"].as_array();
    if (a == nullptr || a->size() != kPasses) fail("first_op_us", form);
    for (int q = 0; q < kPasses; ++q) {
      const toml::array* pass = (*a)[static_cast<size_t>(q)].as_array();
      // Five: a profile from before the random kind, which takes elementwise's (profile.h).
      if (pass == nullptr || (pass->size() != kOpKinds && pass->size() != kOpKinds - 1))
        fail("first_op_us[" + std::to_string(q) + "]", form);
      for (int k = 0; k < static_cast<int>(pass->size()); ++k) {
        const auto us = (*pass)[static_cast<size_t>(k)].value<double>();
        const std::string at = "first_op_us[" + std::to_string(q) + "][" + std::to_string(k) + "]";
        if (!us || !(*us >= 0) || *us > 1e6) fail(at, "expected a cost in [0, 1e6] us");
        p.of(static_cast<Pass>(q), static_cast<OpKind>(k)).first = *us * 1e-6;
      }
      if (pass->size() == kOpKinds - 1)
        p.of(static_cast<Pass>(q), OpKind::kRandom).first =
            p.of(static_cast<Pass>(q), OpKind::kElementwise).first;
    }
  }

  const toml::table root_;
  const std::string source_;
};

}  // namespace

ComputeProfile parse_profile(const std::string& text, const std::string& source) {
  return ProfileReader(text, source).read();
}

ComputeProfile read_profile(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw InputError(path + ": cannot read the compute profile");
  std::stringstream ss;
  ss << in.rdbuf();
  return parse_profile(ss.str(), path);
}

std::string profile_to_toml(const ComputeProfile& p, const std::string& comment) {
  std::ostringstream os;
  if (!comment.empty()) os << "# " << comment << "\n";
  std::string name;
  for (char ch : p.name) {
    if (ch == '"' || ch == '\\') name += '\\';
    if (static_cast<unsigned char>(ch) >= 0x20) name += ch;
  }
  os << "name = \"" << name << "\"\n";
  os << "peak_tflops = " << number(p.peak_flops_per_s / kTflopsToFlopsPerSecond) << "\n";
  os << "threads = " << p.threads << "\n";
  if (p.memory_bytes_per_s > 0 && p.cache_bytes > 0) {
    os << "memory_gbps = " << number(p.memory_bytes_per_s / 1e9) << "\n";
    os << "cache_mib = " << number(p.cache_bytes / 1048576.0) << "\n";
    if (!p.idle_cold.empty()) {
      os << "idle_cold = [";
      for (size_t i = 0; i < p.idle_cold.size(); ++i)
        os << (i ? ", [" : "[") << number(p.idle_cold[i].wait * 1e3) << ", "
           << number(p.idle_cold[i].cold) << "]";
      os << "]  # [wait ms, fraction cold]\n";
    }
  }
  if (!p.idle_op.empty()) {
    os << "idle_op_us = [";
    for (size_t i = 0; i < p.idle_op.size(); ++i)
      os << (i ? ", [" : "[") << number(p.idle_op[i].wait * 1e3) << ", "
         << number(p.idle_op[i].op * 1e6) << ", " << number(p.idle_op[i].span * 1e6) << "]";
    os << "]  # [wait ms, us more per operation, us more for the span that ends the wait]\n";
  }
  bool firsts = false;
  for (const auto& pass : p.cost)
    for (const KindCost& c : pass) firsts |= c.first > 0;
  if (firsts) {
    os << "first_op_us = [";
    for (int q = 0; q < kPasses; ++q) {
      os << (q ? ", [" : "[");
      for (int k = 0; k < kOpKinds; ++k)
        os << (k ? ", " : "")
           << number(p.of(static_cast<Pass>(q), static_cast<OpKind>(k)).first * 1e6);
      os << "]";
    }
    os << "]  # [forward, backward] per kind (matmul, conv, norm, pool, elementwise, random): us "
          "more for a span's first operation of the kind in each class\n";
  }
  for (int q = 0; q < kPasses; ++q) {
    os << "[" << pass_name(static_cast<Pass>(q)) << "]";
    if (q == 0)
      os << "  # per kind: [fixed cost in us, efficiency at intensity < 4, < 8, < 16, < 32, < 64, "
            ">= 64 flop/B within 1 MiB, the same up to 8 MiB, the same beyond]";
    os << "\n";
    for (int k = 0; k < kOpKinds; ++k) {
      const KindCost& cost = p.of(static_cast<Pass>(q), static_cast<OpKind>(k));
      os << op_kind_name(static_cast<OpKind>(k)) << " = [" << number(cost.overhead * 1e6);
      for (double e : cost.efficiency) os << ", " << number(e);
      os << "]\n";
    }
  }
  return os.str();
}

}  // namespace rv
