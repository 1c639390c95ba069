#include "core/compute/profile.h"

#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>

#include <toml++/toml.h>

#include "core/error.h"

namespace rv {
namespace {

constexpr double kMaxEfficiency = 1.5;

std::string number(double v) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return buf;
}

}  // namespace

Seconds time_of(const Work& work, const ComputeProfile& p) {
  Seconds t = 0;
  for (int k = 0; k < kOpKinds; ++k) {
    const auto kind = static_cast<OpKind>(k);
    for (int c = 0; c < kSizeClasses; ++c) {
      const double ops = work.ops(kind, c);
      if (ops == 0) continue;
      t += ops * p.op_overhead + work.flops(kind, c) / (p.peak_flops_per_s * p.efficiency_of(kind, c));
    }
  }
  return t;
}

ComputeProfile parse_profile(const std::string& text, const std::string& source) {
  toml::table root;
  try {
    root = toml::parse(text, std::string_view(source));
  } catch (const toml::parse_error& e) {
    std::ostringstream os;
    os << source << ":" << e.source().begin.line << ": " << e.description();
    throw InputError(os.str());
  }
  auto fail = [&](const std::string& key, const std::string& what) -> void {
    throw InputError(source + ": key '" + key + "': " + what);
  };
  for (const auto& [k, v] : root) {
    const std::string key(k.str());
    if (key != "name" && key != "peak_tflops" && key != "op_overhead_us" && key != "threads" &&
        key != "efficiency")
      fail(key, "unknown key");
  }
  ComputeProfile p;
  p.name = root["name"].value_or(std::string("profile"));
  const auto peak = root["peak_tflops"].value<double>();
  if (!peak || !(*peak > 0) || *peak > 1e6) fail("peak_tflops", "expected a number in (0, 1e6]");
  p.peak_flops_per_s = *peak * kTflopsToFlopsPerSecond;
  const auto overhead = root["op_overhead_us"].value<double>();
  if (!overhead || !(*overhead >= 0) || *overhead > 1e6)
    fail("op_overhead_us", "expected a number in [0, 1e6]");
  p.op_overhead = *overhead * 1e-6;
  if (root.contains("threads")) {
    const auto threads = root["threads"].value<int64_t>();
    if (!threads || *threads < 0 || *threads > 4096) fail("threads", "expected an integer in [0, 4096]");
    p.threads = static_cast<int>(*threads);
  }
  const toml::table* eff = root["efficiency"].as_table();
  if (eff == nullptr) fail("efficiency", "expected a table of matmul, conv and elementwise");
  for (const auto& [k, v] : *eff) {
    const std::string key(k.str());
    if (key != "matmul" && key != "conv" && key != "elementwise") fail("efficiency." + key, "unknown key");
  }
  for (int k = 0; k < kOpKinds; ++k) {
    const std::string key = std::string("efficiency.") + op_kind_name(static_cast<OpKind>(k));
    const toml::array* a = (*eff)[op_kind_name(static_cast<OpKind>(k))].as_array();
    if (a == nullptr || a->size() != kSizeClasses)
      fail(key, "expected an array of 3 numbers (small, medium, large operations)");
    for (int c = 0; c < kSizeClasses; ++c) {
      const auto e = (*a)[static_cast<size_t>(c)].value<double>();
      if (!e || !(*e > 0) || *e > kMaxEfficiency) fail(key, "expected numbers in (0, 1.5]");
      p.efficiency[static_cast<size_t>(k)][static_cast<size_t>(c)] = *e;
    }
  }
  return p;
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
  os << "op_overhead_us = " << number(p.op_overhead * 1e6) << "\n";
  os << "threads = " << p.threads << "\n";
  os << "[efficiency]  # achieved / peak: small, medium, large operations\n";
  for (int k = 0; k < kOpKinds; ++k) {
    os << op_kind_name(static_cast<OpKind>(k)) << " = [";
    for (int c = 0; c < kSizeClasses; ++c)
      os << (c ? ", " : "") << number(p.efficiency_of(static_cast<OpKind>(k), c));
    os << "]\n";
  }
  return os.str();
}

void write_profile(const std::string& path, const ComputeProfile& p, const std::string& comment) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << profile_to_toml(p, comment);
    if (!out) throw Error(path + ": cannot write the compute profile");
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) throw Error(path + ": cannot write the compute profile");
}

}  // namespace rv
