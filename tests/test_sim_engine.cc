// SimGrid users' habits (sim/engine_options.h, network.platform): --cfg and --log reach the engine
// and bad ones are refused before any run folder exists; a SimGrid platform file gives the
// network (its routes' latency and bandwidth, shared links), while compute keeps the devices'
// model whatever the file's host speeds.
#include <filesystem>
#include <fstream>

#include "catch.h"
#include "core/compute/profile.h"
#include "core/compute/work.h"
#include "core/error.h"
#include "sim/engine_options.h"
#include "sim/sim_runner.h"
#include "test_support.h"

using namespace rv;

namespace {

// Node 0 is host "a", nodes 1 and 2 hosts "b-0" and "b-1" of tests/data/lab_platform.xml.
std::string lab(const std::string& platform = "lab_platform.xml") {
  return "name = \"lab\"\n[network]\nmodel = \"ideal\"\nplatform = \"" + platform +
         "\"\n[[devices]]\nname = \"a\"\ntflops = 0.002\n[[devices]]\nname = \"b\"\ncount = "
         "2\ntflops = 0.004\n";
}

Scenario lab_scenario(const std::string& platform = "lab_platform.xml") {
  // Relative to the scenario's folder: the scenario is named as if it were in tests/data.
  return parse_scenario(lab(platform), test::source_path("tests/data/lab.toml"));
}

std::string refusal(const Scenario& s, const EngineOptions& o) {
  try {
    preflight(s, o);
  } catch (const InputError& e) {
    return e.what();
  }
  FAIL("preflight took it");
  return "";
}

}  // namespace

TEST_CASE("a platform file's routes carry the messages: latency plus bytes over a shared link",
          "[sim][platform]") {
  const Scenario s = lab_scenario();
  CHECK(std::filesystem::path(s.network.platform).is_absolute());
  const Bytes bytes = 1'000'000;
  std::vector<Seconds> arrived(3, -1);
  simulate(s, {0, 1, 2}, false, [&](NodeEnv& env, int node) {
    if (node == 0) {
      for (int to : {1, 2}) {
        Message m;
        m.kind = MsgKind::kForward;
        m.bytes = bytes;
        env.transport.send(to, std::move(m));
      }
      env.transport.flush();
    } else {
      env.transport.recv();
      arrived[static_cast<size_t>(node)] = env.clock.now();
    }
  });
  // Both cross link "ab" (10 MB/s, 20 ms) at once.
  CHECK(arrived[1] == Approx(0.020 + 2.0 * bytes / 10e6).epsilon(1e-6));
  CHECK(arrived[2] == Approx(0.020 + 2.0 * bytes / 10e6).epsilon(1e-6));
}

TEST_CASE(
    "on a platform file's host a unit of work takes the device model's time, not the host's speed",
    "[sim][platform]") {
  const Scenario s = lab_scenario();
  Work w;
  w.add(OpKind::kMatmul, Pass::kForward, 1e9, 1e6, 3);
  std::vector<Seconds> took(3, -1);
  simulate(s, {0, 1}, false, [&](NodeEnv& env, int node) {
    const Seconds start = env.clock.now();
    env.compute.run(w, {}, [] {});
    took[static_cast<size_t>(node)] = env.clock.now() - start;
  });
  // Host a computes at 1 Gflop/s in the file, b-0 at 5: the devices say 2 and 4 TFLOPS.
  CHECK(took[0] == Approx(time_of(w, s.device_of(0).compute_profile())).epsilon(1e-9));
  CHECK(took[1] == Approx(time_of(w, s.device_of(1).compute_profile())).epsilon(1e-9));
  CHECK(took[0] == Approx(3.0 * 1e9 / 2e9).epsilon(1e-9));
}

// sim.shared_cores: the nodes compute on one machine of that many cores (a real run on one host).
// Three nodes of one device start a unit of work each at 0, then node 0 runs one more alone: the
// times each first unit and that second one end, and the unit's modeled time. (One simulation a
// process: SimGrid starts once.)
struct MachineEnds {
  std::vector<Seconds> first = std::vector<Seconds>(3, -1);
  Seconds second = -1;
  Seconds t = 0;
};
MachineEnds machine_ends(int cores) {
  const Scenario s =
      parse_scenario("name = \"machine\"\n[sim]\nshared_cores = " + std::to_string(cores) +
                         "\n[network]\nmodel = \"ideal\"\n[[devices]]\nname = \"a\"\ncount = 3\n"
                         "tflops = 0.0023\n",
                     "machine");
  Work w;
  w.add(OpKind::kMatmul, Pass::kForward, 1.2345678e9, 1e6, 3);
  MachineEnds out;
  out.t = time_of(w, s.device_of(0).compute_profile());
  simulate(s, {0, 1, 2}, false, [&](NodeEnv& env, int node) {
    env.compute.run(w, {}, [] {});
    out.first[static_cast<size_t>(node)] = env.clock.now();
    if (node != 0) return;
    env.compute.run(w, {}, [] {});
    out.second = env.clock.now();
  });
  return out;
}

TEST_CASE("on a machine of as many cores as nodes each unit of work takes its modeled time",
          "[sim][shared_cores]") {
  const MachineEnds e = machine_ends(3);
  for (const Seconds f : e.first) CHECK(f == Approx(e.t).epsilon(1e-9));
  CHECK(e.second == Approx(2 * e.t).epsilon(1e-9));
}

TEST_CASE("on a machine of fewer cores than nodes, units of work computing at once share them",
          "[sim][shared_cores]") {
  // Two cores for three units: each at two thirds of a core, 1.5 t; then one alone, t more.
  const MachineEnds e = machine_ends(2);
  for (const Seconds f : e.first) CHECK(f == Approx(1.5 * e.t).epsilon(1e-9));
  CHECK(e.second == Approx(2.5 * e.t).epsilon(1e-9));
}

TEST_CASE("on a machine of one core, units of work computing at once take turns",
          "[sim][shared_cores]") {
  const MachineEnds e = machine_ends(1);
  for (const Seconds f : e.first) CHECK(f == Approx(3 * e.t).epsilon(1e-9));
  CHECK(e.second == Approx(4 * e.t).epsilon(1e-9));
}

TEST_CASE("a machine of shared cores is refused beside a platform file", "[sim][shared_cores]") {
  Scenario s = lab_scenario();
  s.sim.shared_cores = 2;
  const std::string why = refusal(s, EngineOptions{});
  CHECK(why.find("sim.shared_cores") != std::string::npos);
  CHECK(why.find("network.platform") != std::string::npos);
}

// On the scenario's own platform a unit of work is one sleep of the modeled time (sim/sim_env.h):
// exactly time_of, one unit after another, on every node at once.
TEST_CASE("on the scenario's own platform a unit of work takes exactly the device model's time",
          "[sim]") {
  const Scenario s = parse_scenario(
      "name = \"own\"\n[network]\nmodel = \"ideal\"\n[[devices]]\nname = \"a\"\ntflops = 0.0023\n"
      "[[devices]]\nname = \"b\"\ncount = 2\ntflops = 0.0037\n",
      "own");
  Work w;
  w.add(OpKind::kMatmul, Pass::kForward, 1.2345678e9, 1e6, 3);
  std::vector<Seconds> first(3, -1), second(3, -1);
  simulate(s, {0, 1, 2}, false, [&](NodeEnv& env, int node) {
    env.compute.run(w, {}, [] {});
    first[static_cast<size_t>(node)] = env.clock.now();
    env.compute.run(w, {}, [] {});
    second[static_cast<size_t>(node)] = env.clock.now();
  });
  for (int node = 0; node < 3; ++node) {
    const Seconds t = time_of(w, s.device_of(node).compute_profile());
    CHECK(first[static_cast<size_t>(node)] == t);
    CHECK(second[static_cast<size_t>(node)] == t + t);
  }
  CHECK(first[0] == Approx(3.0 * 1.2345678e9 / 2.3e9).epsilon(1e-12));
}

TEST_CASE("a platform file that lacks a node's host or cannot be read is refused naming the key",
          "[sim][platform]") {
  Scenario s = lab_scenario();
  s.devices[1].count = 3;  // b-2 is not in the file
  CHECK_THAT(refusal(s, {}),
             Catch::Contains("network.platform") && Catch::Contains("no host named \"b-2\""));
  const std::string broken =
      (std::filesystem::temp_directory_path() / "rv-broken-platform.xml").string();
  {
    std::ofstream f(broken);
    f << "<platform version=\"4.1\"><zone id=\"z\" routing=\"Full\"><host id=\"a\"";
  }
  Scenario b = lab_scenario(broken);
  CHECK_THAT(refusal(b, {}),
             Catch::Contains("network.platform") && Catch::Contains("cannot load it"));
  std::filesystem::remove(broken);
  CHECK_THROWS_WITH(lab_scenario("missing.xml"),
                    Catch::Contains("network.platform") && Catch::Contains("no such file"));
  const std::string regions =
      "name = \"lab\"\n[network]\ntopology = \"regions\"\nplatform = "
      "\"lab_platform.xml\"\n[[network.link]]\n"
      "a = \"x\"\nb = \"y\"\n[[devices]]\nregion = \"x\"\n[[devices]]\nregion = \"y\"\n";
  CHECK_THROWS_WITH(parse_scenario(regions, test::source_path("tests/data/lab.toml")),
                    Catch::Contains("network.platform") && Catch::Contains("star"));
}

TEST_CASE("SimGrid's cfg and log options reach the engine and a bad one is refused before the run",
          "[sim][engine]") {
  const Scenario s = lab_scenario();
  CHECK_THAT(refusal(s, {{"nonsense/key:1"}, {}}),
             Catch::Contains("--cfg=nonsense/key:1") && Catch::Contains("Bad config key"));
  CHECK_THAT(refusal(s, {{"network/TCP-gamma:many"}, {}}),
             Catch::Contains("--cfg=network/TCP-gamma:many"));
  // SimGrid ends the process on these; the child it runs in says why.
  CHECK_THAT(refusal(s, {{"contexts/factory:none-such"}, {}}), Catch::Contains("valid factory"));
  CHECK_THAT(refusal(s, {{}, {"root.thresh:loud"}}), Catch::Contains("--log=root.thresh:loud"));
  CHECK_THAT(refusal(s, {{"network/model:CM02"}, {}}), Catch::Contains("network.model"));
  CHECK_THAT(refusal(s, {{"no-colon"}, {}}), Catch::Contains("name:value"));
  CHECK_NOTHROW(preflight(
      s, {{"network/TCP-gamma:1e6", "contexts/stack-size:16384"}, {"root.thresh:critical"}}));
  // A --cfg is in force in the run: TCP's window over a route of 20 ms caps a flow at gamma / 40
  // ms.
  Scenario lv = s;
  const Bytes bytes = 1'000'000;
  Seconds arrived = -1;
  simulate(
      lv, {0, 1}, false,
      [&](NodeEnv& env, int node) {
        if (node == 0) {
          Message m;
          m.kind = MsgKind::kForward;
          m.bytes = bytes;
          env.transport.send(1, std::move(m));
          env.transport.flush();
        } else {
          env.transport.recv();
          arrived = env.clock.now();
        }
      },
      nullptr, {}, EngineOptions{{"network/TCP-gamma:100000"}, {}});
  // 100 kB / (2 x 20 ms) = 2.5 MB/s, below the link's 10 MB/s.
  CHECK(arrived == Approx(0.020 + bytes / 2.5e6).epsilon(1e-3));
}
