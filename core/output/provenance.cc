#include "core/output/provenance.h"

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>

#include "build_info.h"  // generated at build time (cmake/build_info.cmake)

namespace rv {

std::string shell_join(const std::vector<std::string>& args) {
  std::string out;
  for (const std::string& a : args) {
    if (!out.empty()) out += ' ';
    const bool plain = !a.empty() && a.find_first_not_of(
                                         "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                         "0123456789_-./=:,+@%") == std::string::npos;
    if (plain) {
      out += a;
      continue;
    }
    out += '\'';
    for (const char c : a) {
      if (c == '\'')
        out += "'\\''";
      else
        out += c;
    }
    out += '\'';
  }
  return out;
}

std::string this_command_line() {
  if (const char* v = std::getenv(kCommandLineEnv); v != nullptr && *v != '\0') return v;
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  const std::string raw((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::string> args;
  std::string cur;
  for (const char c : raw) {
    if (c == '\0') {
      args.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  if (!cur.empty()) args.push_back(cur);
  return shell_join(args);
}

Provenance provenance_of_run(double started_unix_s) {
  Provenance p;
  p.version = RV_VERSION;
  p.commit = RV_COMMIT;
  p.command_line = this_command_line();
  char host[256] = {};
  if (gethostname(host, sizeof host - 1) == 0) p.host = host;
  if (!(started_unix_s >= 0)) return p;
  const auto whole_ms = static_cast<int64_t>(std::llround(started_unix_s * 1000.0));
  const auto secs = static_cast<std::time_t>(whole_ms / 1000);
  const int64_t ms = whole_ms % 1000;
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[40];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S", &tm);
  char with_ms[48];
  std::snprintf(with_ms, sizeof with_ms, "%s.%03dZ", buf, static_cast<int>(ms));
  p.started_utc = with_ms;
  return p;
}

nlohmann::json to_json(const Provenance& p) {
  return {{"version", p.version},
          {"commit", p.commit},
          {"command_line", p.command_line},
          {"host", p.host},
          {"started_utc", p.started_utc}};
}

}  // namespace rv
