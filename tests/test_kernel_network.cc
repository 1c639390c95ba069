// The kernel shaper's packet path (real/kernel_network.h), seen from inside its namespaces: ping
// and TCP's own round trip (`ss -ti`) are the scenario's (2 x (lat_a + lat_b)), a bulk stream runs
// at the bottleneck's rate, each delay line passed packets and dropped none, and a device's
// drop-tail buffer drops what overflows it (and without one, nothing is dropped). Root only: each
// case prints "SKIPPED: why" and returns where namespaces or the delay line are missing.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <regex>
#include <sstream>
#include <string>
#include <thread>

#include "catch.h"
#include "core/scenario/scenario.h"
#include "core/spawn.h"
#include "real/kernel_network.h"
#include "snippets.h"

using namespace rv;
namespace fs = std::filesystem;

namespace {

const std::string kDelayLine = std::string(RV_BINARY_DIR) + "/rv-delay-line";
const std::string kTcp = std::string(RV_BINARY_DIR) + "/emu/delay_line/rv-dl-tcp";

// What `cmd` printed (stdout), run by the shell.
std::string output_of(const std::string& cmd) {
  std::string out;
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return out;
  char buf[4096];
  for (size_t n; (n = fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
  pclose(p);
  return out;
}

// Why this machine cannot run these cases, or "".
std::string cannot_run() {
  if (::geteuid() != 0) return "not root (namespaces and NFQUEUE need CAP_NET_ADMIN)";
  for (const std::string& p : {kDelayLine, kTcp})
    if (::access(p.c_str(), X_OK) != 0) return p + " is not built";
  for (const char* tool : {"ip", "ping", "ss", "nsenter", "iptables"})
    if (std::system(("command -v " + std::string(tool) + " >/dev/null 2>&1").c_str()) != 0)
      return std::string(tool) + " is not installed";
  return "";
}

// Two PCs: a (rank 0: 100/100 Mbit/s, 5 ms) and b (rank 1: 100 up, 10 down, 10 ms), b's buffer
// as given (a TOML line, or "").
Scenario two_pcs(const std::string& b_buffer) {
  const std::string text = std::string("name = \"kn\"\n") + test::kDigitsMlp +
                           "[[devices]]\nname = \"a\"\nup_mbps = 100\ndown_mbps = 100\n"
                           "latency_ms = 5\n"
                           "[[devices]]\nname = \"b\"\nup_mbps = 100\ndown_mbps = 10\n"
                           "latency_ms = 10\n" +
                           b_buffer + "\n";
  return parse_scenario(text, "kn.toml");
}

std::string in_ns(const KernelNetwork& net, int rank, const std::string& cmd) {
  return "nsenter --net=/run/netns/" + net.namespace_of(rank) + " -- " + cmd;
}

// A 3 s TCP stream from rank 0 to rank 1 (rv-dl-tcp); returns the receiver's rate in Mbit/s and
// sets `rtt_ms` to the sender's TCP round trip after 2 s (`ss -ti`), 0 if none was shown.
double stream(const KernelNetwork& net, const fs::path& dir, double& rtt_ms) {
  const std::vector<std::string> serve = net.wrap(1, {kTcp, "serve", "5301"});
  const pid_t server =
      spawn_process(serve[0], serve, {.output_file = (dir / "serve.out").string()});
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const std::vector<std::string> send = net.wrap(0, {kTcp, "send", net.address_of(1), "5301", "3"});
  const pid_t sender = spawn_process(send[0], send, {.output_file = (dir / "send.out").string()});
  std::this_thread::sleep_for(std::chrono::seconds(2));
  const std::string ss = output_of(in_ns(net, 0, "ss -tin dst " + net.address_of(1)));
  std::smatch m;
  rtt_ms = std::regex_search(ss, m, std::regex(R"( rtt:([0-9.]+))")) ? std::stod(m[1]) : 0;
  CHECK(wait_process(sender) == 0);
  CHECK(wait_process(server) == 0);
  std::ifstream in(dir / "serve.out");
  const std::string got((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  INFO(got);
  REQUIRE(std::regex_search(got, m, std::regex(R"(gbit_s=([0-9.]+))")));
  return std::stod(m[1]) * 1e3;
}

}  // namespace

TEST_CASE("the kernel shaper's delay lines give TCP the scenario's round trip", "[real][root]") {
  if (const std::string why = cannot_run(); !why.empty()) {
    std::cout << "SKIPPED: " << why << "\n";
    return;
  }
  const fs::path dir = fs::temp_directory_path() / ("rv-kn-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::optional<KernelNetwork> net;
  net.emplace(two_pcs(""), kDelayLine);
  // ping: 2 x (5 + 10) ms at least; the fastest of ten well under twice that (the latency counted
  // once). No bound on the mean: that would bound this host's load (the bench measures lateness).
  const std::string ping = output_of(in_ns(*net, 0, "ping -q -c 10 -i 0.05 " + net->address_of(1)));
  std::smatch m;
  INFO(ping);
  REQUIRE(std::regex_search(ping, m, std::regex(R"(= ([0-9.]+)/([0-9.]+)/)")));
  CHECK(std::stod(m[1]) >= 30.0);
  CHECK(std::stod(m[1]) < 45.0);
  double rtt_ms = 0;
  const double mbps = stream(*net, dir, rtt_ms);
  // TCP's smoothed round trip includes what queues at b's 10 Mbit/s downlink: at least the path's.
  CHECK(rtt_ms >= 30.0);
  CHECK(rtt_ms < 200.0);
  // The bottleneck (b's downlink, 10 Mbit/s) caps the stream; it carries a good part of it.
  CHECK(mbps > 5.0);
  CHECK(mbps < 10.5);
  const nlohmann::json record = nlohmann::json::parse(net->finish().json);
  INFO(record.dump(1));
  REQUIRE(record["delay_lines"].size() == 4u);  // a's and b's, up and down
  for (const auto& line : record["delay_lines"]) {
    CHECK(line["passed"].get<double>() > 0);
    CHECK(line["dropped"].get<double>() == 0);
    CHECK(line["kernel_dropped"].get<double>() == 0);
    CHECK(line["delay_ms"].get<double>() == (line["rank"] == 0 ? 5.0 : 10.0));
  }
  net.reset();
  CHECK(output_of("ip netns list | grep -c '^rv" + std::to_string(::getpid()) + "-' || true") ==
        "0\n");
  fs::remove_all(dir);
}

TEST_CASE("a device's drop-tail buffer drops what overflows it, and without one nothing drops",
          "[real][root]") {
  if (const std::string why = cannot_run(); !why.empty()) {
    std::cout << "SKIPPED: " << why << "\n";
    return;
  }
  const fs::path dir = fs::temp_directory_path() / ("rv-kn-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  // The drops at b's downlink (rank 1, "down") after a stream from a's faster uplink.
  auto drops_at_b = [&](const std::string& buffer, double& mbps) {
    std::optional<KernelNetwork> net;
    net.emplace(two_pcs(buffer), kDelayLine);
    double rtt_ms = 0;
    mbps = stream(*net, dir, rtt_ms);
    const nlohmann::json record = nlohmann::json::parse(net->finish().json);
    INFO(record.dump(1));
    for (const auto& q : record["queues"])
      if (q["rank"] == 1 && q["link"] == "down") return q["drops"].get<long long>();
    FAIL("no record of b's downlink");
    return -1LL;
  };
  double small_mbps = 0, default_mbps = 0;
  CHECK(drops_at_b("buffer_packets = 5", small_mbps) > 0);
  // The kernel's default queue (1,000 packets) holds what one stream keeps in flight.
  CHECK(drops_at_b("", default_mbps) == 0);
  // A 20 ms buffer (25 kB at 10 Mbit/s) drops too.
  double ms_mbps = 0;
  CHECK(drops_at_b("buffer_ms = 20", ms_mbps) > 0);
  CHECK(default_mbps > 5.0);
  fs::remove_all(dir);
}
