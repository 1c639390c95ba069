// What an idle wait costs the work after it, by kind (not a test: wall-clock figures). After a
// sleep of each wait, the extra time over the same work back to back (the median of --rounds
// rounds, every wait in turn within a round):
//   relu_chain   n ReLUs in a row on 32 x 64 floats (n = 1, 4, 16, 64): a cost paid once per span
//                (the first operation after the wait) shows as an extra that hardly grows with n;
//                a cost per operation, as one that grows n-fold (profile.h: the wake-up curve)
//   read         a read of one float per cache line of a set of 64 KiB to 8 MiB: the caches a
//                wait loses (profile.h: the cooling curve)
//   arithmetic   a dependent floating-point loop of about 5 us, 50 us and 0.5 ms, touching no
//                memory: whether the core itself runs slower after a wait (clock speed)
// One LibTorch thread; sleeps end when asked (no timer slack).
//
//   bench_wake [--rounds 61] [--out FILE]
#include <ATen/ATen.h>
#include <sys/prctl.h>

#include <CLI/CLI.hpp>
#include <thread>

#include "bench/bench_common.h"
#include "core/memory/allocator.h"
#include "exec/compute_threads.h"

using namespace rv;

namespace {

const std::vector<double> kWaits{0, 5e-5, 3e-4, 1e-3, 3e-3};  // s; 0: back to back

// {wait in ms: median extra seconds over back to back} of `work`, each run after a run of it and
// a sleep of the wait.
nlohmann::json extras(int rounds, const std::function<void()>& work) {
  std::vector<std::vector<double>> t(kWaits.size());
  for (int r = 0; r < rounds; ++r)
    for (size_t i = 0; i < kWaits.size(); ++i) {
      work();
      if (kWaits[i] > 0) std::this_thread::sleep_for(std::chrono::duration<double>(kWaits[i]));
      const double a = bench::wall_now();
      work();
      t[i].push_back(bench::wall_now() - a);
    }
  const double warm = bench::median(t[0]);
  nlohmann::json j = {{"back_to_back_us", warm * 1e6}};
  for (size_t i = 1; i < kWaits.size(); ++i)
    j["extra_us_after_" + std::to_string(static_cast<int>(kWaits[i] * 1e6)) + "_us"] =
        (bench::median(t[i]) - warm) * 1e6;
  return j;
}

}  // namespace

int main(int argc, char** argv) try {
  rv::configure_allocator();
  int rounds = 61;
  std::string out;
  CLI::App app{"what an idle wait costs the work after it"};
  app.add_option("--rounds", rounds)->check(CLI::Range(3, 100000));
  app.add_option("--out", out);
  CLI11_PARSE(app, argc, argv);
  set_compute_threads(1);
  prctl(PR_SET_TIMERSLACK, 1, 0, 0, 0);

  nlohmann::json chains = nlohmann::json::array();
  const at::Tensor x = at::randn({32, 64});
  for (int n : {1, 4, 16, 64}) {
    nlohmann::json j = extras(rounds, [&] {
      at::Tensor y = x;
      for (int i = 0; i < n; ++i) y = at::relu(y);
    });
    j["relus"] = n;
    chains.push_back(j);
  }
  nlohmann::json reads = nlohmann::json::array();
  volatile float sink = 0;
  for (size_t kib : {64, 256, 512, 1024, 2048, 8192}) {
    std::vector<float> set(kib * 1024 / sizeof(float), 1.0f);
    nlohmann::json j = extras(rounds, [&] {
      float s = 0;
      for (size_t i = 0; i < set.size(); i += 16) s += set[i];
      sink = s;
    });
    j["set_kib"] = kib;
    reads.push_back(j);
  }
  nlohmann::json loops = nlohmann::json::array();
  volatile double sink_d = 0;
  for (long n : {2500L, 25000L, 250000L}) {
    nlohmann::json j = extras(rounds, [&] {
      double v = 1.0;
      for (long i = 0; i < n; ++i) v = v * 1.0000001 + 1e-9;
      sink_d = v;
    });
    j["iterations"] = n;
    loops.push_back(j);
  }
  bench::emit({{"benchmark", "wake"},
               {"rounds", rounds},
               {"relu_chain", chains},
               {"read", reads},
               {"arithmetic", loops}},
              out);
} catch (const std::exception& e) {
  return bench::failed(e);
}
