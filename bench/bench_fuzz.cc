// The fuzzer at scale (fuzz/): scenario mutations and malformed peer frames, in this process, and
// their counts: cases per mutation class, accepted, rejected with a placed message, failures (with
// their first cases), and the slowest case's CPU time (a case over 10 s of CPU counts as a hang;
// CPU, not wall time, so that what else runs on the machine does not count). Run it
// under AddressSanitizer and UndefinedBehaviorSanitizer with scripts/fuzz-sanitized.sh: a crash or
// a sanitizer report then ends it with the report.
//
//   bench_fuzz [--scenarios 100000] [--frames 100000] [--seed 1] [--jobs 1] [--out FILE]
//
// Counts are written as the run goes, not only at its end: with --out, FILE holds the totals so
// far ("complete": false) at least every --checkpoint-s seconds, so a run that is stopped or
// killed still leaves what it did. SIGINT or SIGTERM ends a run after the case in hand, with the
// counts written and "stopped_by" set; it does not touch crashes, which end the process as they
// would anyway.
//
// --jobs J runs J worker processes (this program again, with --worker K): worker K runs 1/J of
// the cases (share()), from its own case stream (seed + K), so the cases depend on J, and
// J = 1 gives exactly the cases of a single process. A worker that dies (a sanitizer abort, a
// signal) is named in the counts ("workers_crashed") and makes the exit status 1; its report is
// on stderr. A case that runs 120 s of CPU (--watchdog-cpu-s) is taken for a hang: a watchdog
// prints it and aborts (so a hang ends the run as a crash does, rather than never ending).
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "core/output/whole_file.h"
#include "fuzz/harness.h"

namespace {

using nlohmann::json;

volatile sig_atomic_t g_stop = 0;
void on_stop(int sig) { g_stop = sig; }

void install_stop_handlers() {
  struct sigaction sa {};
  sa.sa_handler = on_stop;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
}

// A worker's or the whole run's state: the counts, cases over the hang limit, and what was asked.
struct Tally {
  rv::fuzz::Counts counts;
  int64_t scenarios_asked = 0, frames_asked = 0;
  bool complete = false;
  int stopped_by = 0;  // the signal that stopped it early, or 0
};

json to_json(const Tally& t) {
  const rv::fuzz::Counts& c = t.counts;
  json j;
  j["complete"] = t.complete;
  j["scenario_cases_asked"] = t.scenarios_asked;
  j["frame_cases_asked"] = t.frames_asked;
  j["scenario_cases"] = c.scenario_cases;
  j["accepted"] = c.accepted;
  j["planned"] = c.planned;
  j["rejected_placed"] = c.rejected;
  j["frame_cases"] = c.frame_cases;
  j["frame_decodes_accepted"] = c.frames_accepted;
  j["frame_decodes_rejected"] = c.frames_rejected;
  j["failures"] = c.failures;
  j["cases_by_kind"] = c.cases_by_kind;
  j["slowest_case_cpu_s"] = c.slowest_case_cpu_s;
  j["slowest_kind"] = c.slowest_kind;
  j["slowest_input"] = c.slowest_input;
  j["cases_over_10_s_cpu"] = c.hangs;
  j["first_failures"] = json::array();
  for (const auto& f : c.first_failures)
    j["first_failures"].push_back({{"kind", f.kind}, {"what", f.what}, {"input", f.input}});
  if (t.stopped_by != 0) j["stopped_by"] = t.stopped_by == SIGINT ? "SIGINT" : "SIGTERM";
#if defined(__SANITIZE_ADDRESS__)
  j["sanitizers"] = "address,undefined";
#else
  j["sanitizers"] = "none";
#endif
  return j;
}

Tally from_json(const json& j) {
  Tally t;
  rv::fuzz::Counts& c = t.counts;
  t.complete = j.at("complete").get<bool>();
  t.scenarios_asked = j.at("scenario_cases_asked").get<int64_t>();
  t.frames_asked = j.at("frame_cases_asked").get<int64_t>();
  c.scenario_cases = j.at("scenario_cases").get<int64_t>();
  c.accepted = j.at("accepted").get<int64_t>();
  c.planned = j.at("planned").get<int64_t>();
  c.rejected = j.at("rejected_placed").get<int64_t>();
  c.frame_cases = j.at("frame_cases").get<int64_t>();
  c.frames_accepted = j.at("frame_decodes_accepted").get<int64_t>();
  c.frames_rejected = j.at("frame_decodes_rejected").get<int64_t>();
  c.failures = j.at("failures").get<int64_t>();
  c.cases_by_kind = j.at("cases_by_kind").get<std::map<std::string, int64_t>>();
  c.slowest_case_cpu_s = j.at("slowest_case_cpu_s").get<double>();
  c.slowest_kind = j.at("slowest_kind").get<std::string>();
  c.slowest_input = j.at("slowest_input").get<std::string>();
  c.hangs = j.at("cases_over_10_s_cpu").get<int64_t>();
  for (const auto& f : j.at("first_failures"))
    c.first_failures.push_back({f.at("kind").get<std::string>(), f.at("what").get<std::string>(),
                                f.at("input").get<std::string>()});
  if (j.contains("stopped_by")) t.stopped_by = j["stopped_by"] == "SIGINT" ? SIGINT : SIGTERM;
  return t;
}

// `into` += `t` (counts summed, the slowest case kept, the first failures up to 20).
void add(Tally& into, const Tally& t) {
  rv::fuzz::Counts& a = into.counts;
  const rv::fuzz::Counts& b = t.counts;
  a.scenario_cases += b.scenario_cases;
  a.accepted += b.accepted;
  a.planned += b.planned;
  a.rejected += b.rejected;
  a.frame_cases += b.frame_cases;
  a.frames_accepted += b.frames_accepted;
  a.frames_rejected += b.frames_rejected;
  a.failures += b.failures;
  for (const auto& [k, v] : b.cases_by_kind) a.cases_by_kind[k] += v;
  a.hangs += b.hangs;
  if (b.slowest_case_cpu_s > a.slowest_case_cpu_s) {
    a.slowest_case_cpu_s = b.slowest_case_cpu_s;
    a.slowest_kind = b.slowest_kind;
    a.slowest_input = b.slowest_input;
  }
  for (const auto& f : b.first_failures)
    if (a.first_failures.size() < 20) a.first_failures.push_back(f);
  into.scenarios_asked += t.scenarios_asked;
  into.frames_asked += t.frames_asked;
  if (t.stopped_by != 0) into.stopped_by = t.stopped_by;
}

// Ends the process (abort, so as a crash) when one case has run `limit_cpu_s` of CPU: a
// case that never returns would otherwise hang the run rather than be counted. The case's input
// is printed first.
class Watchdog {
 public:
  explicit Watchdog(double limit_cpu_s) : limit_(limit_cpu_s) {
    pthread_getcpuclockid(pthread_self(), &clock_);
    thread_ = std::thread([this] { watch(); });
  }
  ~Watchdog() {
    {
      std::lock_guard<std::mutex> l(m_);
      done_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  // The case now starting on the watched (constructing) thread.
  void start(const rv::fuzz::ScenarioCase& c) {
    std::lock_guard<std::mutex> l(m_);
    kind_ = c.kind;
    input_ = c.text.substr(0, 4000);
    for (const auto& o : c.overrides) input_ += "\n--set " + o.substr(0, 300);
    started_ = cpu();
  }

 private:
  double cpu() const {
    timespec t{};
    clock_gettime(clock_, &t);
    return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
  }
  void watch() {
    std::unique_lock<std::mutex> l(m_);
    const auto every = std::chrono::duration<double>(std::min(1.0, limit_ / 4));
    while (!cv_.wait_for(l, every, [this] { return done_; })) {
      if (started_ >= 0 && cpu() - started_ > limit_) {
        std::cerr << "bench_fuzz: a " << kind_ << " case ran over " << limit_
                  << " s of CPU (a hang); its input:\n"
                  << input_ << "\n";
        std::abort();
      }
    }
  }
  const double limit_;
  clockid_t clock_{};
  std::mutex m_;
  std::condition_variable cv_;
  bool done_ = false;
  double started_ = -1;
  std::string kind_, input_;
  std::thread thread_;
};

// How many of n cases worker `worker` of `jobs` runs (n / jobs, the first n % jobs one more).
int64_t share(int64_t n, int jobs, int worker) { return n / jobs + (worker < n % jobs ? 1 : 0); }

// Runs one worker's share and returns its tally, writing it to `out` (if set) as it goes.
Tally run_worker(int64_t scenarios, int64_t frames, uint64_t seed, const std::string& out,
                 double checkpoint_s, double watchdog_cpu_s, std::vector<std::string>* rejections) {
  const auto seeds = rv::fuzz::shipped_seeds(RV_SOURCE_DIR);
  const std::string source = rv::fuzz::case_source(RV_SOURCE_DIR);
  Tally t;
  t.scenarios_asked = scenarios;
  t.frames_asked = frames;
  t.counts.rejections = rejections;
  auto last = std::chrono::steady_clock::now();
  auto checkpoint = [&](bool force) {
    if (out.empty()) return;
    const auto now = std::chrono::steady_clock::now();
    if (!force && std::chrono::duration<double>(now - last).count() < checkpoint_s) return;
    last = now;
    rv::write_whole_file(out, to_json(t).dump(2) + "\n");
  };
  rv::fuzz::ScenarioMutator sm(seeds, seed);
  Watchdog watchdog(watchdog_cpu_s);
  for (int64_t i = 0; i < scenarios && !g_stop; ++i) {
    const rv::fuzz::ScenarioCase c = sm.next();
    watchdog.start(c);
    rv::fuzz::run_scenario_case(c, source, t.counts);
    if ((i + 1) % 10000 == 0)
      std::cerr << "scenario cases: " << i + 1 << ", failures " << t.counts.failures << "\n";
    checkpoint(false);
  }
  rv::fuzz::FrameMutator fm(seed);
  for (int64_t i = 0; i < frames && !g_stop; ++i) {
    rv::fuzz::run_frame_case(fm.next(), t.counts);
    if (i % 1000 == 0) checkpoint(false);
  }
  t.stopped_by = g_stop;
  t.complete = g_stop == 0;
  checkpoint(true);
  return t;
}

struct Worker {
  pid_t pid = -1;
  std::string part;  // its counts file
  int status = 0;
  bool done = false;
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"bench_fuzz: scenario and frame fuzzing, counts as JSON"};
  int64_t scenarios = 100000, frames = 100000;
  uint64_t seed = 1;
  int jobs = 1, worker = -1;
  double checkpoint_s = 30, watchdog_cpu_s = 120;
  std::string out, messages;
  app.add_option("--scenarios", scenarios, "scenario cases")->check(CLI::NonNegativeNumber);
  app.add_option("--frames", frames, "frame cases")->check(CLI::NonNegativeNumber);
  app.add_option("--seed", seed, "the cases' seed");
  app.add_option("--jobs", jobs, "worker processes")->check(CLI::Range(1, 256));
  app.add_option("--checkpoint-s", checkpoint_s, "write the counts so far at least this often (s)")
      ->check(CLI::PositiveNumber);
  app.add_option("--out", out, "also write the figures here, as the run goes");
  app.add_option("--watchdog-cpu-s", watchdog_cpu_s,
                 "abort, printing the case, when one case runs this much CPU")
      ->check(CLI::PositiveNumber);
  app.add_option("--messages", messages,
                 "write every rejection's message to this file, one per line (--jobs 1)");
  app.add_option("--worker", worker,
                 "(internal) run worker K of --jobs, writing its counts to --out");
  std::string replay;
  app.add_option(
      "--case", replay,
      "run this one scenario file as a case (a reported case, saved) and print its counts");
  CLI11_PARSE(app, argc, argv);
  if (!replay.empty()) {
    std::ifstream in(replay);
    if (!in) {
      std::cerr << "bench_fuzz: cannot read " << replay << "\n";
      return 2;
    }
    std::stringstream text;
    text << in.rdbuf();
    Tally t;
    t.scenarios_asked = 1;
    rv::fuzz::run_scenario_case({text.str(), {}, "replay"}, rv::fuzz::case_source(RV_SOURCE_DIR),
                                t.counts);
    t.complete = true;
    std::cout << to_json(t).dump(2) << "\n";
    return t.counts.failures == 0 ? 0 : 1;
  }
  if (jobs > 1 && !messages.empty()) {
    std::cerr << "bench_fuzz: --messages needs --jobs 1\n";
    return 2;
  }
  install_stop_handlers();

  if (worker >= 0) {  // one worker of a --jobs run: its share, from its own stream
    if (worker >= jobs || out.empty()) {
      std::cerr << "bench_fuzz: --worker K needs K < --jobs and --out\n";
      return 2;
    }
    const Tally t = run_worker(share(scenarios, jobs, worker), share(frames, jobs, worker),
                               seed + worker, out, checkpoint_s, watchdog_cpu_s, nullptr);
    return t.complete ? 0 : 3;
  }

  Tally total;
  std::vector<std::string> rejections;
  std::vector<std::string> crashed;
  if (jobs == 1) {
    total = run_worker(scenarios, frames, seed, out, checkpoint_s, watchdog_cpu_s,
                       messages.empty() ? nullptr : &rejections);
  } else {
    // The parts live beside --out (or in a folder of our own) and are merged into it as they grow.
    std::string dir;
    if (out.empty()) {
      char tmpl[] = "/tmp/bench-fuzz-XXXXXX";
      if (!mkdtemp(tmpl)) {
        std::cerr << "bench_fuzz: cannot make a temporary folder\n";
        return 1;
      }
      dir = tmpl;
    }
    const std::string base = out.empty() ? dir + "/counts.json" : out;
    std::vector<Worker> ws(static_cast<size_t>(jobs));
    const std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
    for (int k = 0; k < jobs; ++k) {
      ws[k].part = base + ".part" + std::to_string(k);
      std::vector<std::string> args = {self,
                                       "--scenarios",
                                       std::to_string(scenarios),
                                       "--frames",
                                       std::to_string(frames),
                                       "--seed",
                                       std::to_string(seed),
                                       "--jobs",
                                       std::to_string(jobs),
                                       "--worker",
                                       std::to_string(k),
                                       "--out",
                                       ws[k].part,
                                       "--checkpoint-s",
                                       std::to_string(checkpoint_s),
                                       "--watchdog-cpu-s",
                                       std::to_string(watchdog_cpu_s)};
      std::vector<char*> argv2;
      for (auto& a : args) argv2.push_back(a.data());
      argv2.push_back(nullptr);
      const pid_t pid = fork();
      if (pid == 0) {
        const int null = open("/dev/null", O_WRONLY);
        if (null >= 0) dup2(null, STDOUT_FILENO);  // workers report through their parts only
        execv(self.c_str(), argv2.data());
        _exit(127);
      }
      ws[k].pid = pid;
    }
    auto merged = [&] {
      Tally t;
      t.complete = true;
      for (int k = 0; k < jobs; ++k) {
        Tally part;
        part.scenarios_asked = share(scenarios, jobs, k);
        part.frames_asked = share(frames, jobs, k);
        try {
          std::ifstream in(ws[k].part);
          if (in) part = from_json(json::parse(in));
        } catch (const std::exception&) {
          // a part caught mid-rename cannot happen (whole-file writes); one not yet written counts
          // as empty
        }
        t.complete = t.complete && part.complete;
        add(t, part);
      }
      return t;
    };
    auto last = std::chrono::steady_clock::now();
    int left = jobs;
    bool forwarded = false;
    while (left > 0) {
      int status = 0;
      const pid_t pid = waitpid(-1, &status, WNOHANG);
      if (pid > 0) {
        for (auto& w : ws)
          if (w.pid == pid) {
            w.status = status;
            w.done = true;
            --left;
          }
        continue;
      }
      if (g_stop && !forwarded) {  // a stop sent to us alone reaches the workers too
        for (auto& w : ws)
          if (!w.done) kill(w.pid, g_stop);
        forwarded = true;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      if (!out.empty() &&
          std::chrono::duration<double>(std::chrono::steady_clock::now() - last).count() >=
              checkpoint_s) {
        last = std::chrono::steady_clock::now();
        Tally t = merged();
        t.complete = false;
        rv::write_whole_file(out, to_json(t).dump(2) + "\n");
      }
    }
    total = merged();
    for (int k = 0; k < jobs; ++k) {
      const int s = ws[k].status;
      if (WIFSIGNALED(s))
        crashed.push_back("worker " + std::to_string(k) + " ended by signal " +
                          std::to_string(WTERMSIG(s)) + " (" + strsignal(WTERMSIG(s)) + ")");
      else if (WIFEXITED(s) && WEXITSTATUS(s) != 0 && WEXITSTATUS(s) != 1 && WEXITSTATUS(s) != 3)
        crashed.push_back("worker " + std::to_string(k) + " exited with status " +
                          std::to_string(WEXITSTATUS(s)));
    }
    if (!crashed.empty()) total.complete = false;
    std::error_code ec;
    if (!dir.empty()) std::filesystem::remove_all(dir, ec);
  }

  json j = to_json(total);
  j["jobs"] = jobs;
  j["seed"] = seed;
  j["workers_crashed"] = crashed;
  std::cout << j.dump(2) << "\n";
  if (!out.empty()) {
    rv::write_whole_file(out, j.dump(2) + "\n");
    for (int k = 0; jobs > 1 && k < jobs; ++k)
      std::filesystem::remove(out + ".part" + std::to_string(k));
  }
  if (!messages.empty()) {
    std::ofstream m(messages);
    for (const auto& r : rejections) m << r.substr(0, 300) << "\n";
  }
  const bool clean = total.counts.failures == 0 && total.counts.hangs == 0 && crashed.empty();
  if (!total.complete && crashed.empty()) return 3;  // stopped early: the counts are partial
  return clean ? 0 : 1;
}
