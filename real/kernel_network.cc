#include "real/kernel_network.h"

#include <fcntl.h>
#include <signal.h>
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
#include <nlohmann/json.hpp>
#include <sstream>
#include <tuple>
#include <utility>

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

std::string text_of_file(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// Runs argv to completion; returns "" if it exited 0, else what it printed (or why it did not run).
// `printed`, when given, receives what it printed in either case.
std::string run_tool(const std::vector<std::string>& argv, std::string* printed = nullptr) {
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
    const int status = wait_process(pid);
    const std::string text = text_of_file(out_path);
    if (printed != nullptr) *printed = text;
    if (status != 0) {
      result = text;
      while (!result.empty() && (result.back() == '\n' || result.back() == ' ')) result.pop_back();
      if (result.empty()) result = "it failed without a message";
    }
  }
  ::unlink(out_path);
  return result;
}

// The program `name` in the running program's own folder (where the build and `install` put
// rv-delay-line beside ravnest), or "" if it is not there.
std::string beside_self(const char* name) {
  std::error_code ec;
  const auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) return "";
  const std::string path = (self.parent_path() / name).string();
  return ::access(path.c_str(), X_OK) == 0 ? path : "";
}

// The value of ` key=` in rv-delay-line's counts line, or NaN.
double count_in(const std::string& line, const std::string& key) {
  const size_t at = line.find(" " + key + "=");
  if (at == std::string::npos) return std::nan("");
  return std::strtod(line.c_str() + at + key.size() + 2, nullptr);
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

// The leaf queue of a link of `bytes_per_s` under device `d`'s buffer: a drop-tail fifo of
// buffer_ms at the link's rate (at least one MTU) or of buffer_packets; empty: the kernel's
// default.
std::vector<std::string> buffer_queue(const DeviceGroup& d, double bytes_per_s) {
  if (d.buffer_packets > 0) return {"pfifo", "limit", std::to_string(d.buffer_packets)};
  if (d.buffer_ms > 0) {
    // Dilated alike: rate / k times ms x k, the same bytes.
    const double bytes = d.buffer_ms * 1e-3 * d.dilation * bytes_per_s;
    return {"bfifo", "limit", std::to_string(std::max<long long>(1514, std::llround(bytes)))};
  }
  return {};
}

constexpr int kRtPriority = 10;  // the delay lines' SCHED_FIFO priority, where allowed

}  // namespace

std::vector<std::string> KernelNetwork::inside(const std::string& ns,
                                               const std::vector<std::string>& argv) const {
  std::vector<std::string> out = {nsenter_, "--net=/run/netns/" + ns, "--"};
  out.insert(out.end(), argv.begin(), argv.end());
  return out;
}

std::string KernelNetwork::installed_delay_line() { return beside_self("rv-delay-line"); }

KernelNetwork::KernelNetwork(const Scenario& s, std::string delay_line)
    : ip_(find_tool("ip")),
      tc_(find_tool("tc")),
      nsenter_(find_tool("nsenter")),
      iptables_(find_tool("iptables")),
      delay_line_(std::move(delay_line)),
      netns_mounted_before_(is_mount_point(kNetnsDir)) {
  if (ip_.empty() || tc_.empty() || nsenter_.empty())
    throw InputError(
        "real.shaper = \"kernel\" needs iproute2 (`ip`, `tc`) and util-linux (`nsenter`), not "
        "found");
  if (s.node_count() > 32000) throw InputError("real.shaper = \"kernel\": at most 32,000 nodes");
  try {
    build_star(s);
    start_delay_lines(s);
  } catch (...) {
    teardown();
    throw;
  }
}

// Runs one step of the setup; rv::InputError naming it and why it failed.
void KernelNetwork::step(const std::vector<std::string>& argv) const {
  const std::string err = run_tool(argv);
  if (err.empty()) return;
  throw InputError("real.shaper = \"kernel\": `" + joined(argv) + "` failed: " + err +
                   (::geteuid() != 0 ? " (it needs root)" : ""));
}

void KernelNetwork::build_star(const Scenario& s) {
  const int n = s.node_count();
  const std::string tag = "rv" + std::to_string(::getpid());
  // A buffer counted in packets or bytes holds the packets a router would: of one MTU each, so no
  // node sends larger (segmentation) ones when any device sets one.
  const bool buffers = std::any_of(s.devices.begin(), s.devices.end(), [](const DeviceGroup& d) {
    return d.buffer_ms > 0 || d.buffer_packets > 0;
  });
  core_ns_ = tag + "-core";
  step({ip_, "netns", "add", core_ns_});
  step(inside(core_ns_, {ip_, "link", "add", "br0", "type", "bridge"}));
  step(inside(core_ns_, {ip_, "link", "set", "br0", "up"}));
  for (int r = 0; r < n; ++r) {
    const DeviceGroup& d = s.device_of(r);
    const std::string ns = tag + "-" + std::to_string(r);
    step({ip_, "netns", "add", ns});
    node_ns_.push_back(ns);
    const std::string port = port_of(r);
    step(inside(core_ns_, {ip_, "link", "add", port, "type", "veth", "peer", "name", kInterface,
                           "netns", ns}));
    step(inside(core_ns_, {ip_, "link", "set", port, "master", "br0", "up"}));
    step(inside(ns, {ip_, "addr", "add", address_of(r) + "/16", "dev", kInterface}));
    if (buffers) step(inside(ns, {ip_, "link", "set", "dev", kInterface, "gso_max_segs", "1"}));
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
      std::vector<std::string> queue = buffer_queue(d, rate);
      if (queue.empty()) continue;
      std::vector<std::string> argv = {tc_,      "qdisc", "add",    "dev", dev,
                                       "parent", "1:1",   "handle", "10:"};
      argv.insert(argv.end(), queue.begin(), queue.end());
      step(inside(where, argv));
    }
  }
}

void KernelNetwork::start_delay_lines(const Scenario& s) {
  const int n = s.node_count();
  bool any = false;
  for (int r = 0; r < n; ++r) any = any || s.device_of(r).latency_s() > 0;
  if (!any) return;
  if (delay_line_.empty() || ::access(delay_line_.c_str(), X_OK) != 0)
    throw InputError(
        "real.shaper = \"kernel\": rv-delay-line (the links' latency) is not beside this "
        "program; build the project with libnetfilter-queue-dev installed "
        "(scripts/install-deps.sh, scripts/build.sh)");
  if (iptables_.empty())
    throw InputError(
        "real.shaper = \"kernel\" with latency needs iptables (the packet path's delay lines), "
        "not found");
  // Bridged IPv4 through iptables in the core namespace (br_netfilter, per namespace).
  if (!std::filesystem::exists("/proc/sys/net/bridge"))
    if (const std::string modprobe = find_tool("modprobe"); !modprobe.empty())
      run_tool({modprobe, "br_netfilter"});
  step(
      inside(core_ns_, {"/bin/sh", "-c", "echo 1 > /proc/sys/net/bridge/bridge-nf-call-iptables"}));
  char dir[] = "/tmp/ravnest-delay-XXXXXX";
  if (::mkdtemp(dir) == nullptr)
    throw Error(std::string("cannot make a temporary folder: ") + std::strerror(errno));
  temp_dir_ = dir;
  int rt_priority = kRtPriority;
  for (int r = 0; r < n; ++r) {
    const Seconds latency = s.device_of(r).latency_s();
    if (latency <= 0) continue;
    for (const bool uplink : {true, false}) {
      DelayLineProcess p;
      p.rank = r;
      p.uplink = uplink;
      p.queue = 2 * r + (uplink ? 0 : 1);
      p.output = temp_dir_ + "/queue-" + std::to_string(p.queue);
      start_delay_line(p, latency, rt_priority);
      delay_lines_.push_back(p);
    }
  }
  rt_priority_ = rt_priority;
  // The rules last, once every queue has its reader (a queue without one drops what it is sent).
  for (const DelayLineProcess& p : delay_lines_)
    step(inside(core_ns_,
                {iptables_, "-t", "mangle", "-A", p.uplink ? "PREROUTING" : "POSTROUTING", "-m",
                 "physdev", p.uplink ? "--physdev-in" : "--physdev-out", port_of(p.rank), "-j",
                 "NFQUEUE", "--queue-num", std::to_string(p.queue)}));
}

// Starts `p`'s delay line of `latency` and waits until it serves its queue; rv::InputError if it
// does not. Where SCHED_FIFO is refused (a container without CAP_SYS_NICE), sets `rt_priority` to 0
// (the default policy) and starts it again.
void KernelNetwork::start_delay_line(DelayLineProcess& p, Seconds latency, int& rt_priority) {
  char ms[32];
  std::snprintf(ms, sizeof ms, "%.6f", latency * 1e3);
  for (;;) {
    std::vector<std::string> argv = {delay_line_, "--queue", std::to_string(p.queue), "--delay-ms",
                                     ms};
    if (rt_priority > 0) argv.insert(argv.end(), {"--rt-priority", std::to_string(rt_priority)});
    argv = inside(core_ns_, argv);
    p.pid = spawn_process(argv[0], argv, {.output_file = p.output});
    const std::string failed = await_serving(p);
    if (failed.empty()) return;
    if (rt_priority > 0 && failed.find("sched_setscheduler") != std::string::npos) {
      rt_priority = 0;
      continue;
    }
    throw InputError("real.shaper = \"kernel\": rv-delay-line on queue " + std::to_string(p.queue) +
                     " did not start: " + failed);
  }
}

// Waits until delay line `p` serves its queue: "" then, else what it printed before it ended (or
// that it did not answer within 10 s, when it is killed).
std::string KernelNetwork::await_serving(DelayLineProcess& p) {
  for (int i = 0; i < 1000; ++i) {
    if (text_of_file(p.output).find("serving queue") != std::string::npos) return "";
    int status = 0;
    if (::waitpid(p.pid, &status, WNOHANG) == p.pid) {
      p.pid = -1;
      std::string text = text_of_file(p.output);
      while (!text.empty() && text.back() == '\n') text.pop_back();
      return text.empty() ? "it ended without a message" : text;
    }
    ::usleep(10000);
  }
  ::kill(p.pid, SIGKILL);
  wait_process(p.pid);
  p.pid = -1;
  return "it did not answer within 10 s";
}

KernelNetwork::~KernelNetwork() { teardown(); }

void KernelNetwork::stop_delay_lines() {
  for (const DelayLineProcess& p : delay_lines_)
    if (p.pid > 0) ::kill(p.pid, SIGTERM);
  for (DelayLineProcess& p : delay_lines_) {
    if (p.pid <= 0) continue;
    wait_process(p.pid);
    p.pid = -1;
    // Its counts line: the last it printed (rv-delay-line's README).
    std::istringstream lines(text_of_file(p.output));
    for (std::string line; std::getline(lines, line);)
      if (line.rfind("rv-delay-line: queue=", 0) == 0) p.counts = line;
  }
}

KernelNetwork::Record KernelNetwork::finish() {
  stop_delay_lines();
  nlohmann::json lines = nlohmann::json::array();
  std::string late, lost;
  for (const DelayLineProcess& p : delay_lines_) {
    nlohmann::json j = {{"rank", p.rank}, {"link", p.uplink ? "up" : "down"}, {"queue", p.queue}};
    for (const char* key :
         {"delay_ms", "passed", "dropped", "flushed", "mean_lateness_us", "p50_lateness_us",
          "p99_lateness_us", "p999_lateness_us", "max_lateness_us", "kernel_dropped",
          "verdict_errors", "cpu_user_s", "cpu_sys_s"}) {
      const double v = count_in(p.counts, key);
      j[key] = std::isnan(v) ? nlohmann::json(nullptr) : nlohmann::json(v);
    }
    const std::string name = "rank " + std::to_string(p.rank) + (p.uplink ? " (up)" : " (down)");
    if (count_in(p.counts, "p99_lateness_us") > kLateUs) late += (late.empty() ? "" : ", ") + name;
    if (count_in(p.counts, "kernel_dropped") > 0 || count_in(p.counts, "dropped") > 0)
      lost += (lost.empty() ? "" : ", ") + name;
    lines.push_back(std::move(j));
  }
  // Each shaped queue's drops (tc's statistics of the htb root: its leaf's included).
  nlohmann::json queues = nlohmann::json::array();
  std::string full;
  for (size_t r = 0; r < node_ns_.size(); ++r) {
    for (const bool uplink : {true, false}) {
      std::string out;
      const std::string dev = uplink ? std::string(kInterface) : port_of(static_cast<int>(r));
      run_tool(
          inside(uplink ? node_ns_[r] : core_ns_, {tc_, "-s", "-j", "qdisc", "show", "dev", dev}),
          &out);
      long long drops = -1, sent = -1;
      const nlohmann::json shown = nlohmann::json::parse(out, nullptr, false);
      if (shown.is_array())
        for (const auto& q : shown)
          if (q.value("root", false)) {
            drops = q.value("drops", -1LL);
            sent = q.value("packets", -1LL);
          }
      queues.push_back(
          {{"rank", r}, {"link", uplink ? "up" : "down"}, {"packets", sent}, {"drops", drops}});
      if (drops > 0)
        full += (full.empty() ? "" : ", ") + ("rank " + std::to_string(r)) +
                (uplink ? " (up)" : " (down)");
    }
  }
  Record record;
  record.json = nlohmann::json{{"delay_lines", lines},
                               {"rt_priority", rt_priority_},
                               {"late_us", kLateUs},
                               {"queues", queues}}
                    .dump(1) +
                "\n";
  if (!late.empty())
    record.warning += "the delay lines of " + late + " were late by more than " +
                      std::to_string(static_cast<int>(kLateUs)) +
                      " µs at their 99th percentile (a busy host): latencies were longer than the "
                      "scenario's. ";
  if (!lost.empty())
    record.warning += "the delay lines of " + lost + " dropped packets (TCP resent them). ";
  if (!full.empty())
    record.warning += "the buffers of " + full + " dropped packets (full: TCP resent them). ";
  return record;
}

void KernelNetwork::teardown() {
  stop_delay_lines();
  delay_lines_.clear();
  if (!temp_dir_.empty()) {
    std::error_code ec;
    std::filesystem::remove_all(temp_dir_, ec);
    temp_dir_.clear();
  }
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

std::string KernelNetwork::port_of(int rank) { return "n" + std::to_string(rank); }

std::string KernelNetwork::address_of(int rank) const {
  const int host = rank + 1;  // 10.213.0.1, 10.213.0.2, ...
  return "10.213." + std::to_string(host / 256) + "." + std::to_string(host % 256);
}

std::vector<std::string> KernelNetwork::wrap(int rank, const std::vector<std::string>& argv) const {
  return inside(namespace_of(rank), argv);
}

}  // namespace rv
