#include "real/kernel_network.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <tuple>

#include "core/error.h"
#include "core/spawn.h"

extern char** environ;

namespace rv {
namespace {

std::string find_tool(const char* name) {
  for (const char* dir : {"/usr/sbin", "/sbin", "/usr/bin", "/bin"}) {
    const std::string path = std::string(dir) + "/" + name;
    if (::access(path.c_str(), X_OK) == 0) return path;
  }
  return "";
}

std::string joined(const std::vector<std::string>& argv) {
  std::string s;
  for (const auto& a : argv) s += (s.empty() ? "" : " ") + a;
  return s;
}

// Runs argv to completion; returns "" if it exited 0, else what it printed (or why it did not run).
std::string run_tool(const std::vector<std::string>& argv) {
  char out_path[] = "/tmp/ravnest-tool-XXXXXX";
  const int out = ::mkstemp(out_path);
  if (out < 0) return std::string("cannot create a temporary file: ") + std::strerror(errno);
  std::string result;
  pid_t pid = -1;
  try {
    pid = spawn_process(argv[0], argv, {.output_fd = out});
  } catch (const Error& e) {
    result = e.what();
  }
  ::close(out);
  if (pid >= 0) {
    if (wait_process(pid) != 0) {
      std::ifstream in(out_path);
      result = std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
      while (!result.empty() && (result.back() == '\n' || result.back() == ' ')) result.pop_back();
      if (result.empty()) result = "it failed without a message";
    }
  }
  ::unlink(out_path);
  return result;
}

constexpr const char* kNetnsDir = "/run/netns";

// Whether `path` is a mount point (/proc/self/mountinfo's fifth field).
bool is_mount_point(const std::string& path) {
  std::ifstream in("/proc/self/mountinfo");
  for (std::string line; std::getline(in, line);) {
    std::istringstream fields(line);
    std::string f[5];
    for (auto& x : f) fields >> x;
    if (f[4] == path) return true;
  }
  return false;
}

std::string bits_per_s(double bytes_per_s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.0fbit", std::max(8.0, std::round(bytes_per_s * 8)));
  return buf;
}

}  // namespace

std::vector<std::string> KernelNetwork::inside(const std::string& ns,
                                               const std::vector<std::string>& argv) const {
  std::vector<std::string> out = {nsenter_, "--net=/run/netns/" + ns, "--"};
  out.insert(out.end(), argv.begin(), argv.end());
  return out;
}

KernelNetwork::KernelNetwork(const Scenario& s)
    : ip_(find_tool("ip")),
      tc_(find_tool("tc")),
      nsenter_(find_tool("nsenter")),
      netns_mounted_before_(is_mount_point(kNetnsDir)) {
  if (ip_.empty() || tc_.empty() || nsenter_.empty())
    throw InputError(
        "real.shaper = \"kernel\" needs iproute2 (`ip`, `tc`) and util-linux (`nsenter`), not "
        "found");
  const int n = s.node_count();
  if (n > 65000) throw InputError("real.shaper = \"kernel\": at most 65,000 nodes");
  const std::string tag = "rv" + std::to_string(::getpid());
  auto step = [&](const std::vector<std::string>& argv) {
    const std::string err = run_tool(argv);
    if (err.empty()) return;
    teardown();
    throw InputError("real.shaper = \"kernel\": `" + joined(argv) + "` failed: " + err +
                     (::geteuid() != 0 ? " (it needs root)" : ""));
  };
  core_ns_ = tag + "-core";
  step({ip_, "netns", "add", core_ns_});
  step(inside(core_ns_, {ip_, "link", "add", "br0", "type", "bridge"}));
  step(inside(core_ns_, {ip_, "link", "set", "br0", "up"}));
  for (int r = 0; r < n; ++r) {
    const DeviceGroup& d = s.device_of(r);
    const std::string ns = tag + "-" + std::to_string(r);
    step({ip_, "netns", "add", ns});
    node_ns_.push_back(ns);
    const std::string port = "n" + std::to_string(r);  // the node's port on the core's bridge
    step(inside(core_ns_, {ip_, "link", "add", port, "type", "veth", "peer", "name", kInterface,
                           "netns", ns}));
    step(inside(core_ns_, {ip_, "link", "set", port, "master", "br0", "up"}));
    step(inside(ns, {ip_, "addr", "add", address_of(r) + "/16", "dev", kInterface}));
    step(inside(ns, {ip_, "link", "set", kInterface, "up"}));
    step(inside(ns, {ip_, "link", "set", "lo", "up"}));
    // Uplink: what the node sends; downlink: what the core sends it.
    for (const auto& [where, dev, rate] :
         {std::tuple<std::string, std::string, double>{ns, kInterface, d.up_bytes_per_s()},
          {core_ns_, port, d.down_bytes_per_s()}}) {
      step(inside(
          where, {tc_, "qdisc", "add", "dev", dev, "root", "handle", "1:", "htb", "default", "1"}));
      step(inside(where, {tc_, "class", "add", "dev", dev, "parent", "1:", "classid", "1:1", "htb",
                          "rate", bits_per_s(rate), "ceil", bits_per_s(rate)}));
    }
  }
}

KernelNetwork::~KernelNetwork() { teardown(); }

void KernelNetwork::teardown() {
  // Removing a namespace removes its interfaces, and so both ends of its veth pairs.
  for (const auto& ns : node_ns_) run_tool({ip_, "netns", "delete", ns});
  if (!core_ns_.empty()) run_tool({ip_, "netns", "delete", core_ns_});
  node_ns_.clear();
  core_ns_.clear();
  // `ip netns add` leaves /run/netns mounted on itself; undo that if this run made it and no
  // namespace is left there (another run's would be).
  std::error_code ec;
  if (!netns_mounted_before_ && is_mount_point(kNetnsDir) &&
      std::filesystem::is_empty(kNetnsDir, ec) && !ec)
    ::umount2(kNetnsDir, MNT_DETACH);
}

std::string KernelNetwork::address_of(int rank) const {
  const int host = rank + 1;  // 10.213.0.1, 10.213.0.2, ...
  return "10.213." + std::to_string(host / 256) + "." + std::to_string(host % 256);
}

std::vector<std::string> KernelNetwork::wrap(int rank, const std::vector<std::string>& argv) const {
  return inside(namespace_of(rank), argv);
}

}  // namespace rv
