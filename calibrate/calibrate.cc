#include "calibrate/calibrate.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <c10/core/GradMode.h>
#include <spawn.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <torch/csrc/autograd/autograd.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <memory>
#include <numeric>
#include <random>
#include <sstream>
#include <thread>

#include "core/error.h"
#include "core/model/layers.h"
#include "core/spawn.h"
#include "exec/compute_threads.h"

namespace rv {
namespace {

Seconds now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// The median time of `op`, in seconds, each call after its own untimed `setup`: `warmup` untimed
// calls, then repeats until `budget` seconds have passed, setups included (at least 5, at most 200
// repeats).
Seconds median_time(const std::function<void()>& setup, const std::function<void()>& op,
                    Seconds budget, int warmup = 1) {
  for (int i = 0; i < warmup; ++i) {
    setup();
    op();
  }
  std::vector<Seconds> t;
  Seconds spent = 0;
  while (t.size() < 5 || (spent < budget && t.size() < 200)) {
    const Seconds s = now();
    setup();
    const Seconds a = now();
    op();
    const Seconds b = now();
    t.push_back(b - a);
    spent += b - s;
  }
  std::nth_element(t.begin(), t.begin() + static_cast<std::ptrdiff_t>(t.size() / 2), t.end());
  return t[t.size() / 2];
}

double median(std::vector<double> v) {
  RV_CHECK(!v.empty(), "calibrate: median of nothing");
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

std::string dims(const std::vector<int64_t>& d) {
  std::string s;
  for (int64_t x : d) s += (s.empty() ? "" : "x") + std::to_string(x);
  return s;
}

// One layer on one input shape (with the batch first).
struct LayerCase {
  OpKind kind;
  LayerPtr layer;
  std::vector<int64_t> input;
  std::string label;
  bool fixed_cost = false;
  bool first = false;  // timed as a network's first layer: its input needs no gradient
};

// A case's forward and backward samples with the work.h conventions, their times still 0.
std::pair<CalibrationSample, CalibrationSample> describe(const LayerCase& c) {
  const std::vector<int64_t> sample(c.input.begin() + 1, c.input.end());
  const LayerProfile prof = c.layer->profile(sample);
  const double batch = static_cast<double>(c.input[0]);
  double in_elems = batch;
  for (int64_t d : sample) in_elems *= static_cast<double>(d);
  const double bytes =
      static_cast<double>(kFloatBytes) *
      (in_elems + batch * static_cast<double>(prof.out_elems) + static_cast<double>(prof.params));
  const double ops = prof.forward_ops;
  const Flops flops = batch * prof.forward_flops;
  const bool gemm = c.kind == OpKind::kMatmul || c.kind == OpKind::kConv;
  const double grads = gemm ? (c.first ? 1 : 2) : 1;  // a first layer's: the weights' alone
  return {{Pass::kForward, c.kind, c.label, ops, flops, bytes, 0, c.fixed_cost},
          {Pass::kBackward, c.kind, c.label, grads * ops, grads * flops, bytes, 0, c.fixed_cost}};
}

}  // namespace

at::Tensor image_like_field(const std::vector<int64_t>& nchw) {
  RV_CHECK(nchw.size() == 4, "image_like_field: a shape of 4 dimensions (N, C, H, W)");
  const int64_t h = nchw[2], w = nchw[3];
  return at::upsample_bilinear2d(
      at::randn({nchw[0], nchw[1], std::max<int64_t>(1, h / 4), std::max<int64_t>(1, w / 4)}),
      {h, w}, false);
}

at::Tensor network_activations(const at::Tensor& field) {
  const int64_t channels = field.size(1);
  const at::Tensor weight =
      at::randn({channels, channels, 3, 3}) / std::sqrt(9.0 * static_cast<double>(channels));
  return at::relu(at::batch_norm(at::conv2d(field, weight, {}, 1, 1), {}, {}, {}, {}, true, 0.1,
                                 1e-5, false))
      .contiguous();
}

namespace {

// One case's layer, input and gradient, ready to run its forward (autograd recording) and its
// backward (to the weights and the input; a first layer's to the weights alone) again and again.
class LayerRun {
 public:
  static constexpr int kKept = 4;            // outputs kept alive, as a stage keeps its last ones
  static constexpr int kWarmup = kKept + 1;  // calls before the heap reuses what they free
  explicit LayerRun(const LayerCase& c) : c_(c) {
    auto gen = at::make_generator<at::CPUGeneratorImpl>(1);
    params_ = c.layer->init_params(gen);
    buffers_ = c.layer->init_buffers();
    // As in a stage, every call's input and incoming gradient are fresh tensors (just written by
    // the layer before), not the same warm buffers again: that costs elementwise kinds up to 3x.
    // Pooling is fed what a network feeds it (network_activations, calibrate.h).
    if (c.kind == OpKind::kPool) {
      source_ = network_activations(image_like_field(c.input));
    } else {
      source_ = at::randn(c.input);
    }
    ctx_.train = true;
    ctx_.update_buffers = true;
    ctx_.dropout_seed = 1;
    fresh_input();
    forward();
    gradient_ = at::randn_like(y_);
  }
  void fresh_input() { x_ = source_.clone().requires_grad_(!c_.first); }
  void forward() {
    c10::AutoGradMode grad(true);
    y_ = c_.layer->forward(x_, params_.data(), buffers_.empty() ? nullptr : buffers_.data(), ctx_);
    keep(y_);
  }
  void before_backward() {
    fresh_input();
    forward();
    fresh_gradient();
  }
  void fresh_gradient() { g_ = gradient_.clone(); }
  void backward() {
    std::vector<at::Tensor> inputs = params_;
    if (!c_.first) inputs.push_back(x_);
    for (const at::Tensor& t : torch::autograd::grad({y_}, inputs, {g_})) keep(t);
  }

 private:
  // As in a stage, a call's outputs stay alive a while (a stage keeps them for the backward), so
  // the next call writes to other memory rather than to the same warm block again.
  void keep(const at::Tensor& t) { kept_[next_++ % kept_.size()] = t; }

  const LayerCase& c_;
  std::vector<at::Tensor> params_, buffers_;
  at::Tensor source_, gradient_, x_, y_, g_;
  ForwardContext ctx_;
  std::array<at::Tensor, kKept> kept_;
  size_t next_ = 0;
};

// The largest cache of cpu0 up to `max_level` (2: the core's own; 9: the last level), as the kernel
// describes it (/sys/devices/system/cpu/cpu0/cache), or as the C library reports it; 0 if neither
// knows.
double cache_bytes(int max_level) {
  double best = 0;
  const std::string dir = "/sys/devices/system/cpu/cpu0/cache/index";
  for (int i = 0; i < 8; ++i) {
    std::ifstream in(dir + std::to_string(i) + "/size"), lv(dir + std::to_string(i) + "/level");
    std::string size;
    int level = 0;
    if (!(in >> size) || size.empty() || !(lv >> level) || level > max_level) continue;
    double v = std::atof(size.c_str());
    const char unit = size.back();
    if (unit == 'K') v *= 1024;
    if (unit == 'M') v *= 1048576;
    best = std::max(best, v);
  }
  if (best > 0) return best;
  for (int name : {_SC_LEVEL3_CACHE_SIZE, _SC_LEVEL2_CACHE_SIZE}) {
    if (name == _SC_LEVEL3_CACHE_SIZE && max_level < 3) continue;
    const long v = sysconf(name);
    if (v > 0) return static_cast<double>(v);
  }
  return 0;
}

// A working set of `bytes` read in a random cyclic order of its cache lines, each line's address
// taken from the line before it: no prefetcher hides a miss, so a read's time per line says where
// the set is (a core's caches: 5-70 ns here; memory: 150-300 ns).
class PointerChase {
 public:
  PointerChase(double bytes, std::mt19937_64& rng)
      : lines_(std::max<size_t>(1, static_cast<size_t>(bytes) / 64)),
        next_(lines_ * kWordsPerLine) {
    std::vector<uint64_t> order(lines_);
    std::iota(order.begin(), order.end(), uint64_t{0});
    std::shuffle(order.begin(), order.end(), rng);
    for (size_t i = 0; i < lines_; ++i)
      next_[order[i] * kWordsPerLine] = order[(i + 1) % lines_] * kWordsPerLine;
  }
  // Reads every line once; seconds per line.
  Seconds read() {
    const Seconds a = now();
    for (size_t i = 0; i < lines_; ++i) at_ = next_[at_];
    const Seconds t = (now() - a) / static_cast<double>(lines_);
    volatile uint64_t sink = at_;
    (void)sink;
    return t;
  }

 private:
  static constexpr size_t kWordsPerLine = 64 / sizeof(uint64_t);
  size_t lines_;
  std::vector<uint64_t> next_;
  uint64_t at_ = 0;
};

// Each working set of `sizes` (bytes) read as a PointerChase: seconds per line, the median of 3
// reads after an untimed one.
std::vector<std::pair<double, Seconds>> cache_sweep(const std::vector<double>& sizes) {
  std::vector<std::pair<double, Seconds>> out;
  std::mt19937_64 rng(1);
  for (double bytes : sizes) {
    PointerChase set(bytes, rng);
    set.read();
    std::vector<Seconds> t;
    for (int r = 0; r < 3; ++r) t.push_back(set.read());
    out.emplace_back(bytes, median(t));
  }
  return out;
}

// Pushes what the core's own caches hold out of them: a write of every cache line of twice their
// size (1 MiB where the size is unknown). In a stage's span an operation runs after its stage's
// other operations, spans and the transport went through the core: its code, its dispatch path's
// data and its weights are no longer there (a ReLU on 32 x 512 values took 4.4 us over and over
// on the host measured, 18.8 us once per micro-batch in its stage), though what the operation
// before it just ran (the dispatcher, the allocator, its input) is.
class CoreCacheEviction {
 public:
  CoreCacheEviction()
      : lines_(static_cast<size_t>(2 * std::max(cache_bytes(2), double{1 << 20})) / 64) {}
  void operator()() {
    for (auto& l : lines_) l.bytes[0] = static_cast<char>(l.bytes[0] + 1);
  }

 private:
  struct alignas(64) Line {
    char bytes[64];
  };
  std::vector<Line> lines_;
};

// Times a layer's forward and backward, each over and over, and adds both samples.
void time_layer(const LayerCase& c, Seconds budget, std::vector<CalibrationSample>& out) {
  LayerRun run(c);
  // Untimed until the kept outputs have gone round once: from then on each call's buffers take
  // the places the calls before freed, the heap's steady state, as a stage's loop reaches it after
  // its first steps (before that, every call faults in fresh pages: a ReLU over 3 million floats
  // took 42 ms in its first calls, 0.6 ms after).
  const Seconds tf =
      median_time([&] { run.fresh_input(); }, [&] { run.forward(); }, budget, LayerRun::kWarmup);
  const Seconds tb = median_time([&] { run.before_backward(); }, [&] { run.backward(); }, budget,
                                 LayerRun::kWarmup);
  auto [f, b] = describe(c);
  f.time = tf;
  b.time = tb;
  out.push_back(f);
  out.push_back(b);
}

// Times the fixed-cost cases as a network runs its layers: one after the other, each call
// between calls of the others, never the same operation twice in a row (whose code, dispatch
// path and allocations a tight loop keeps warm: a third of what a layer costs in a network).
// `cold`: each call as a span's first operation of its kind runs (KindCost::first): the core's
// caches emptied (CoreCacheEviction), then the call of the nearest case before it in the pass's
// order that is of another kind (untimed: it warms what every operation runs, the dispatcher,
// the allocator, autograd, as the operation before it in a span has), then its input written.
// Adds each case's forward and backward samples, the median of `repeats` rounds.
void time_chain(const std::vector<const LayerCase*>& cases, int repeats, bool cold,
                std::vector<CalibrationSample>& out) {
  std::vector<std::unique_ptr<LayerRun>> runs;
  for (const LayerCase* c : cases) runs.push_back(std::make_unique<LayerRun>(*c));
  const size_t n = runs.size();
  // The case `step` places from i (n - 1: the one before in the forward's order, 1: in the
  // backward's) nearest to it of another kind; i itself if there is none.
  auto other_kind = [&](size_t i, size_t step) {
    for (size_t j = (i + step) % n; j != i; j = (j + step) % n)
      if (cases[j]->kind != cases[i]->kind) return j;
    return i;
  };
  CoreCacheEviction empty_caches;
  std::vector<std::vector<Seconds>> tf(n), tb(n);
  for (int r = 0; r < repeats; ++r) {
    for (size_t i = 0; i < n; ++i) {
      if (cold) {
        empty_caches();
        LayerRun& before = *runs[other_kind(i, n - 1)];
        before.fresh_input();
        before.forward();
      }
      runs[i]->fresh_input();
      const Seconds a = now();
      runs[i]->forward();
      tf[i].push_back(now() - a);
    }
    for (size_t i = n; i-- > 0;) {  // backward in the reverse order, as a network's
      runs[i]->before_backward();
      if (cold) {
        empty_caches();
        LayerRun& before = *runs[other_kind(i, 1)];
        before.before_backward();
        before.backward();
      }
      runs[i]->fresh_gradient();
      const Seconds a = now();
      runs[i]->backward();
      tb[i].push_back(now() - a);
    }
  }
  for (size_t i = 0; i < cases.size(); ++i) {
    auto [f, b] = describe(*cases[i]);
    f.time = median(tf[i]);
    b.time = median(tb[i]);
    out.push_back(f);
    out.push_back(b);
  }
}

// The calibration's cases as they are listed, each named by its layer and its input's dimensions.
class CaseList {
 public:
  void add(OpKind kind, LayerPtr layer, std::vector<int64_t> input, const std::string& label,
           bool fixed = false, bool first = false) {
    cases_.push_back({kind, std::move(layer), input,
                      label + " " + dims(input) + (first ? " (first)" : ""), fixed, first});
  }
  std::vector<LayerCase> take() { return std::move(cases_); }

 private:
  std::vector<LayerCase> cases_;
};

// Fixed costs: layers on a handful of values, three batch sizes each. (A batch of one takes other
// code paths, matrix-vector products and the like: two at least.)
void fixed_cost_cases(CaseList& list) {
  for (int64_t b : {2, 3, 4}) {
    list.add(OpKind::kMatmul, make_linear(4, 4), {b, 4}, "linear", true);
    list.add(OpKind::kConv, make_conv2d(1, 1, 3, 1), {b, 1, 4, 4}, "conv3x3", true);
    list.add(OpKind::kNorm, make_batch_norm2d(2), {b, 2, 2, 2}, "batchnorm", true);
    list.add(OpKind::kPool, make_max_pool2d(2), {b, 1, 4, 4}, "maxpool2", true);
    list.add(OpKind::kElementwise, make_relu(), {b, 4}, "relu", true);
    list.add(OpKind::kRandom, make_dropout(0.25), {b, 4}, "dropout", true);
  }
}

// Linear layers of several widths over several batches. Sizes avoid powers of two, whose
// allocations and cache sets some hosts handle pathologically.
void linear_cases(CaseList& list, bool quick) {
  const std::vector<int64_t> batches =
      quick ? std::vector<int64_t>{16} : std::vector<int64_t>{16, 32, 64, 128, 256};
  struct Wide {
    int64_t in, out;
  };
  const std::vector<Wide> linears =
      quick ? std::vector<Wide>{{256, 16}, {512, 512}}
            : std::vector<Wide>{{32, 32},   {256, 16},   {64, 2048},  {512, 128},
                                {128, 512}, {2048, 256}, {1024, 1024}};
  for (int64_t b : batches)
    for (const Wide& w : linears)
      list.add(OpKind::kMatmul, make_linear(w.in, w.out), {b, w.in}, "linear");
}

// Convolutions, batch normalisation and pooling on image-like maps.
void image_cases(CaseList& list, bool quick) {
  struct Conv {
    int64_t cin, cout, side;
  };
  const std::vector<Conv> convs =
      quick ? std::vector<Conv>{{1, 8, 20}, {16, 32, 6}}
            : std::vector<Conv>{{1, 16, 30},  {1, 32, 20},  {3, 32, 30},  {8, 8, 30},  {8, 16, 24},
                                {16, 16, 20}, {16, 32, 12}, {32, 64, 12}, {64, 64, 6}, {32, 16, 6}};
  const std::vector<int64_t> image_batches =
      quick ? std::vector<int64_t>{8} : std::vector<int64_t>{8, 32, 128};
  // A convolution of an image's 1 or 3 channels is a network's first layer: its backward computes
  // the weights' gradient alone (the model charges it so: core/model/model.cc backward_work). The
  // input's gradient of so few channels runs at a fraction of the weights' rate, and would pass
  // for the efficiency of the one gradient such a layer computes (2.4x its time here).
  for (int64_t b : image_batches)
    for (const Conv& c : convs)
      list.add(OpKind::kConv, make_conv2d(c.cin, c.cout, 3, 1), {b, c.cin, c.side, c.side},
               "conv3x3", false, c.cin <= 3);

  struct Map {
    int64_t channels, side;
  };
  const std::vector<Map> maps =
      quick ? std::vector<Map>{{8, 12}} : std::vector<Map>{{8, 30}, {16, 20}, {32, 12}, {64, 6}};
  for (int64_t b : image_batches)
    for (const Map& m : maps) {
      list.add(OpKind::kNorm, make_batch_norm2d(m.channels), {b, m.channels, m.side, m.side},
               "batchnorm");
      list.add(OpKind::kPool, make_max_pool2d(2), {b, m.channels, m.side, m.side}, "maxpool2");
    }
}

// Kernels that stream their elements: a ReLU over sizes from a core's cache to memory, and
// dropout, which draws each element of its mask from a generator (the random kind, work.h): a
// rate of its own, over the sizes of a network's hidden layers and a transformer's activations.
void stream_cases(CaseList& list, bool quick) {
  const std::vector<int64_t> sizes =
      quick ? std::vector<int64_t>{12000, 300000}
            : std::vector<int64_t>{3000,   12000,  50000,   100000, 200000,
                                   400000, 800000, 1500000, 3000000};
  for (int64_t n : sizes) list.add(OpKind::kElementwise, make_relu(), {n}, "relu");
  const std::vector<int64_t> random_sizes =
      quick ? std::vector<int64_t>{12000}
            : std::vector<int64_t>{3000, 12000, 50000, 200000, 800000, 3000000};
  for (int64_t n : random_sizes) list.add(OpKind::kRandom, make_dropout(0.25), {n}, "dropout");
}

std::vector<LayerCase> layer_cases(bool quick) {
  CaseList list;
  fixed_cost_cases(list);
  linear_cases(list, quick);
  image_cases(list, quick);
  stream_cases(list, quick);
  return list.take();
}

// While alive, this thread's sleeps end when asked, not up to Linux's default 50 us of timer slack
// later (the waits of the curves below are measured, and the shortest is wanted short).
class TightSleeps {
 public:
  TightSleeps() : slack_(prctl(PR_GET_TIMERSLACK, 0, 0, 0, 0)) {
    prctl(PR_SET_TIMERSLACK, 1, 0, 0, 0);
  }
  ~TightSleeps() {
    if (slack_ > 0) prctl(PR_SET_TIMERSLACK, static_cast<unsigned long>(slack_), 0, 0, 0);
  }
  TightSleeps(const TightSleeps&) = delete;
  TightSleeps& operator=(const TightSleeps&) = delete;

 private:
  int slack_;
};

// The wake-up curve (profile.h, idle_op): the fixed-cost cases (layers on a handful of values,
// whose time is their operations' fixed costs) run in a network's order, every forward and then
// every backward in the reverse order (on the same inputs each time: what a wait costs is the
// difference), back to back (warm) and after a wait of each of kWakeWaits, the other devices'
// load running; and so does a span of one operation (the first elementwise case's forward). What
// a wait adds to each, e1 and eN for spans of n1 and N operation codes (as the model counts them:
// describe(), Work::codes), gives the point's costs: per code (eN - e1) / (N - n1), per span the
// rest of e1 (most of it here: the first operation after a wait pays it). Its wait is the one
// measured from the end of the chain before, the one-operation span's sleeps taken to end as late
// (a sleep wakes late: the shortest came out at 0.08 ms here; the model charges nothing below the
// first point); costs made nondecreasing, none below 0. Rounds go
// over warm and every wait in turn, so that a stretch of a slow host lands on all of them; each
// figure is the median of its rounds. Empty if no wait costs anything.
constexpr std::array<double, 7> kWakeWaits{{3e-5, 1e-4, 3e-4, 1e-3, 3e-3, 1e-2, 3e-2}};  // s

std::vector<ComputeProfile::Waking> wake_curve(const std::vector<const LayerCase*>& cases,
                                               bool quick) {
  std::vector<std::unique_ptr<LayerRun>> runs;
  Work chain_work, single_work;  // their operation codes (Work::codes)
  LayerRun* single_run = nullptr;
  for (const LayerCase* c : cases) {
    runs.push_back(std::make_unique<LayerRun>(*c));
    runs.back()->before_backward();  // its incoming gradient
    const auto [f, b] = describe(*c);
    for (const CalibrationSample& s : {f, b})
      chain_work.add(s.kind, s.pass, s.flops / s.ops, s.bytes, s.ops);
    if (single_run == nullptr && c->kind == OpKind::kElementwise) {
      single_run = runs.back().get();
      single_work.add(f.kind, f.pass, f.flops / f.ops, f.bytes, f.ops);
    }
  }
  const double codes = chain_work.codes(), single_codes = single_work.codes();
  RV_CHECK(single_run != nullptr && codes > single_codes,
           "calibrate: no elementwise fixed-cost case");
  Seconds last_end = 0;
  auto chain = [&] {
    const Seconds a = now();
    for (auto& r : runs) r->forward();
    for (size_t i = runs.size(); i-- > 0;) runs[i]->backward();
    last_end = now();
    return last_end - a;
  };
  auto single = [&] {
    const Seconds a = now();
    single_run->forward();
    last_end = now();
    return last_end - a;
  };
  const TightSleeps tight;
  std::vector<double> warm, warm_single;
  std::vector<std::vector<double>> after(kWakeWaits.size()), after_single(kWakeWaits.size()),
      waited(kWakeWaits.size());
  // More rounds than the cooling curve's: after the shorter waits a point is a few percent of
  // the chain's time.
  for (int r = 0; r < (quick ? 3 : 41); ++r) {
    chain();
    warm.push_back(chain());
    single();
    warm_single.push_back(single());
    for (size_t i = 0; i < kWakeWaits.size(); ++i) {
      chain();
      std::this_thread::sleep_for(std::chrono::duration<double>(kWakeWaits[i]));
      waited[i].push_back(now() - last_end);
      after[i].push_back(chain());
      single();
      std::this_thread::sleep_for(std::chrono::duration<double>(kWakeWaits[i]));
      after_single[i].push_back(single());
    }
  }
  const double w = median(warm), w1 = median(warm_single);
  std::vector<ComputeProfile::Waking> curve;
  double per_op = 0, per_span = 0;
  for (size_t i = 0; i < kWakeWaits.size(); ++i) {
    const Seconds wait = median(waited[i]);
    if (!curve.empty() && !(wait > curve.back().wait)) continue;  // waits must increase
    const double e1 = std::max(0.0, median(after_single[i]) - w1),
                 en = std::max(0.0, median(after[i]) - w);
    const double op = std::max(0.0, (en - e1) / (codes - single_codes));
    per_op = std::max(per_op, op);
    per_span =
        std::max(per_span, e1 - per_op * single_codes);  // with the cost per code the point keeps
    curve.push_back({wait, per_op, per_span});
  }
  if (per_op <= 0 && per_span <= 0) return {};
  return curve;
}

// The load processes of a shared calibration: started with it, stopped (and reaped) with it.
class LoadProcesses {
 public:
  LoadProcesses(int count, int threads) {
    const std::string parent = std::to_string(getpid()), t = std::to_string(threads);
    for (int i = 0; i < count; ++i) {
      std::vector<std::string> args{
          "rv-calibrate-load", "calibrate", "--threads", t, "--load", parent};
      pids_.push_back(spawn_process("/proc/self/exe", args));
    }
    if (count > 0) std::this_thread::sleep_for(std::chrono::milliseconds(500));  // let them start
  }
  ~LoadProcesses() {
    for (pid_t p : pids_) kill(p, SIGTERM);
    for (pid_t p : pids_) waitpid(p, nullptr, 0);
  }
  LoadProcesses(const LoadProcesses&) = delete;
  LoadProcesses& operator=(const LoadProcesses&) = delete;

 private:
  std::vector<pid_t> pids_;
};

// Per pass and kind, the median time per operation of `samples`' fixed-cost cases; a kind without
// one takes the median of its pass's others. rv::InputError if a pass has none.
void fit_fixed_costs(const std::vector<CalibrationSample>& samples, ComputeProfile& p) {
  for (int q = 0; q < kPasses; ++q) {
    const auto pass = static_cast<Pass>(q);
    std::vector<double> all;
    for (int k = 0; k < kOpKinds; ++k) {
      std::vector<double> fixed;
      for (const auto& s : samples)
        if (s.pass == pass && s.kind == static_cast<OpKind>(k) && s.fixed_cost)
          fixed.push_back(s.time / s.ops);
      p.of(pass, static_cast<OpKind>(k)).overhead = fixed.empty() ? -1 : median(fixed);
      all.insert(all.end(), fixed.begin(), fixed.end());
    }
    if (all.empty())
      throw InputError(std::string("calibration samples: no fixed-cost case in the ") +
                       pass_name(pass) + " pass");
    for (int k = 0; k < kOpKinds; ++k)
      if (p.of(pass, static_cast<OpKind>(k)).overhead < 0)
        p.of(pass, static_cast<OpKind>(k)).overhead = median(all);
  }
}

// The cooling curve (profile.h, idle_cold): how far a working set the size of a stage's
// (kIdleSetBytes, or half the device's cache `cache` where that is less: beyond a core's own
// cache, within the device's) is from warm to cold after each idle wait of kIdleWaits, the other
// devices' load running (as in a real run of them on this host). The set is read as a
// PointerChase: a sequential read's prefetcher hid most of a miss, so that cold read within
// 1.1-1.3x of warm, and noise put the curve's fraction at 1 from 1 ms on in one calibration and 0
// up to 10 ms in the next, 20 minutes apart; chased, a cold line took 3-10x a warm one. Its read
// back to back is warm; after a write of every cache line of `evict` (the bandwidth's 64 MiB),
// cold; after a wait, the fraction (t - warm) / (cold - warm), clamped to [0, 1] and made
// nondecreasing. Rounds go over warm, cold and every wait in turn, so that a stretch of a slow host
// lands on all of them; each figure is the median of its rounds. Empty if a cold read is no
// slower than a warm one (an idle core keeps its caches).
constexpr size_t kIdleSetBytes = size_t{8} << 20;
constexpr std::array<double, 7> kIdleWaits{{1e-4, 3e-4, 1e-3, 2e-3, 4e-3, 1e-2, 3e-2}};  // s

std::vector<ComputeProfile::Cooling> idle_cooling(const at::Tensor& evict, double cache,
                                                  bool quick) {
  std::mt19937_64 rng(2);
  PointerChase set(std::min<double>(kIdleSetBytes, cache / 2), rng);
  float* other = evict.data_ptr<float>();
  const int64_t other_floats = evict.numel();
  auto read_after = [&](const std::function<void()>& before) {
    set.read();
    before();
    return set.read();
  };
  const TightSleeps tight;
  std::vector<double> warm, cold;
  std::vector<std::vector<double>> after(kIdleWaits.size());
  for (int r = 0; r < (quick ? 3 : 15); ++r) {
    warm.push_back(read_after([] {}));
    cold.push_back(read_after([&] {
      for (int64_t i = 0; i < other_floats; i += 16) other[i] += 1.0f;
    }));
    for (size_t i = 0; i < kIdleWaits.size(); ++i)
      after[i].push_back(read_after(
          [i] { std::this_thread::sleep_for(std::chrono::duration<double>(kIdleWaits[i])); }));
  }
  const double w = median(warm), c = median(cold);
  if (!(c > w)) return {};
  std::vector<ComputeProfile::Cooling> curve;
  double fraction = 0;
  for (size_t i = 0; i < kIdleWaits.size(); ++i) {
    fraction = std::max(fraction, std::clamp((median(after[i]) - w) / (c - w), 0.0, 1.0));
    curve.push_back({kIdleWaits[i], fraction});
  }
  if (fraction == 0) return {};
  return curve;
}

}  // namespace

void calibration_load(const CalibrateOptions& options, int parent) {
  set_compute_threads(options.threads > 0 ? options.threads : 1);
  const std::vector<LayerCase> cases = layer_cases(options.quick);
  std::vector<CalibrationSample> discard;
  for (;;)
    for (const LayerCase& c : cases) {
      if (getppid() != parent) return;
      time_layer(c, 0.01, discard);
      discard.clear();
    }
}

double cache_knee(const std::vector<std::pair<double, Seconds>>& sweep) {
  if (sweep.size() < 2) return 0;
  const Seconds from_memory = sweep.back().second;
  double knee = 0;
  for (const auto& [bytes, per_line] : sweep) {
    if (!(per_line < 0.5 * from_memory)) break;
    knee = bytes;
  }
  return knee;
}

double achieved_efficiency(const CalibrationSample& s, const ComputeProfile& p) {
  const Seconds fixed = s.ops * p.of(s.pass, s.kind).overhead;
  return s.flops / std::max(s.time - fixed, 0.1 * s.time) / p.peak_flops_per_s;
}

namespace {

// The peak: the best large plain matmul, flops per second.
double measure_peak(bool quick, Seconds budget) {
  at::NoGradGuard no_grad;
  const std::vector<int64_t> sides =
      quick ? std::vector<int64_t>{256} : std::vector<int64_t>{512, 1024};
  double peak = 0;
  for (int64_t n : sides) {
    at::Tensor a = at::rand({n, n}), b = at::rand({n, n});
    const Seconds t = median_time([] {}, [&] { at::mm(a, b); }, budget);
    peak = std::max(peak, 2.0 * n * n * n / t);
  }
  return peak;
}

// The cache this device has to itself, measured (cache_sweep, cache_knee) with the other
// devices' load running, not read from the system: a VM reports its host's last-level cache,
// which other tenants share (480 MiB here, where random reads of 24 MiB or more already came from
// memory, 150-300 ns a line against 50-70 ns up to 20 MiB). Where the sweep finds no knee, the
// system's size over the share.
double measure_cache(const CalibrateOptions& options) {
  std::vector<double> sizes;
  for (double mib : options.quick
                        ? std::vector<double>{1, 4, 16, 64}
                        : std::vector<double>{1, 2, 4, 6, 8, 12, 16, 20, 24, 32, 48, 64, 128})
    sizes.push_back(mib * 1048576.0);
  const double knee = cache_knee(cache_sweep(sizes));
  return knee > 0 ? knee : cache_bytes(9) / options.share;
}

// Each sample's time the median of its rounds' (every round lists the same samples).
std::vector<CalibrationSample> median_of_rounds(
    const std::vector<std::vector<CalibrationSample>>& rounds_of) {
  std::vector<CalibrationSample> out = rounds_of[0];
  for (size_t i = 0; i < out.size(); ++i) {
    std::vector<double> t;
    for (const auto& round : rounds_of) t.push_back(round[i].time);
    out[i].time = median(t);
  }
  return out;
}

// Rounds over the whole list of layer cases, and the fixed-cost cases chained warm and cold,
// each case's time the median of its rounds: a host whose speed drifts for seconds at a time (a
// shared machine, a VM) slows one round of a case, not all. `between` runs after each round.
void time_rounds(const CalibrateOptions& options, Seconds budget,
                 const std::vector<LayerCase>& cases, const std::vector<const LayerCase*>& fixed,
                 const std::function<void(Seconds)>& between, Calibration& cal) {
  const int rounds = options.quick ? 1 : 5;
  std::vector<std::vector<CalibrationSample>> by_round(static_cast<size_t>(rounds)),
      chain_by_round(static_cast<size_t>(rounds)), cold_by_round(static_cast<size_t>(rounds));
  for (int r = 0; r < rounds; ++r) {
    for (const LayerCase& c : cases)
      time_layer(c, budget / rounds, by_round[static_cast<size_t>(r)]);
    time_chain(fixed, options.quick ? 5 : 40, false, chain_by_round[static_cast<size_t>(r)]);
    time_chain(fixed, options.quick ? 5 : 40, true, cold_by_round[static_cast<size_t>(r)]);
    between(budget / rounds);
  }
  cal.samples = median_of_rounds(by_round);
  cal.network_fixed = median_of_rounds(chain_by_round);
  cal.network_cold = median_of_rounds(cold_by_round);
}

// Efficiencies against the loops' own fixed costs (what a loop's time holds beyond its flops);
// then the fixed costs a network pays, per pass and kind, and what its first operation of a kind
// in a span pays more.
void fit_costs(Calibration& cal) {
  ComputeProfile& p = cal.profile;
  fit_profile(cal.samples, p);
  cal.loops = p;
  fit_fixed_costs(cal.network_fixed, p);
  ComputeProfile cold = p;
  fit_fixed_costs(cal.network_cold, cold);
  for (int q = 0; q < kPasses; ++q)
    for (int k = 0; k < kOpKinds; ++k) {
      KindCost& c = p.of(static_cast<Pass>(q), static_cast<OpKind>(k));
      c.first = std::max(
          0.0, cold.of(static_cast<Pass>(q), static_cast<OpKind>(k)).overhead - c.overhead);
    }
}

}  // namespace

Calibration calibrate(const CalibrateOptions& options) {
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const int threads = options.threads > 0 ? options.threads : cores;
  set_compute_threads(threads);
  const Seconds budget = options.quick ? 0.01 : 0.1;
  RV_CHECK(options.share >= 1, "calibrate: share must be 1 or more");
  const LoadProcesses load(options.share - 1, threads);
  Calibration cal;
  ComputeProfile& p = cal.profile;
  p.name = options.share > 1 ? "host shared by " + std::to_string(options.share) : "host";
  p.threads = threads;
  p.peak_flops_per_s = measure_peak(options.quick, budget);
  // The cold-memory term (work.h): the bandwidth of a read of 64 MiB (far beyond any cache here),
  // with the other devices' load running. The read is timed in every round too, the bandwidth the
  // median of the rounds: one window of a busy host measured it at 4.8 GB/s, and the one after
  // the run at 13.4.
  const at::Tensor big = at::rand({int64_t{16} << 20});
  std::vector<Seconds> read_times;
  auto time_read = [&](Seconds within) {
    at::NoGradGuard no_grad;
    read_times.push_back(median_time([] {}, [&] { at::sum(big); }, within));
  };
  time_read(budget);
  p.cache_bytes = measure_cache(options);
  p.idle_cold = idle_cooling(big, p.cache_bytes, options.quick);
  const std::vector<LayerCase> cases = layer_cases(options.quick);
  std::vector<const LayerCase*> fixed;
  for (const LayerCase& c : cases)
    if (c.fixed_cost) fixed.push_back(&c);
  time_rounds(options, budget, cases, fixed, time_read, cal);
  p.memory_bytes_per_s = static_cast<double>(big.numel()) * kFloatBytes / median(read_times);
  // The wake-up curve, on the same fixed-cost cases.
  p.idle_op = wake_curve(fixed, options.quick);
  fit_costs(cal);
  return cal;
}

void fit_profile(const std::vector<CalibrationSample>& samples, ComputeProfile& p) {
  fit_fixed_costs(samples, p);
  for (int q = 0; q < kPasses; ++q)
    for (int k = 0; k < kOpKinds; ++k) {
      const auto pass = static_cast<Pass>(q);
      const auto kind = static_cast<OpKind>(k);
      KindCost& cost = p.of(pass, kind);
      // Samples without dropout's (published kernel timings, a calibration from before the random
      // kind): dropout as elementwise work, as a profile without it charges it (profile.h).
      if (kind == OpKind::kRandom &&
          std::none_of(samples.begin(), samples.end(), [&](const CalibrationSample& s) {
            return s.pass == pass && s.kind == kind;
          })) {
        cost = p.of(pass, OpKind::kElementwise);
        continue;
      }
      std::array<std::vector<double>, kOpClasses> by_class;
      for (const auto& s : samples)
        if (s.pass == pass && s.kind == kind && !s.fixed_cost)
          by_class[static_cast<size_t>(op_class_of(s.flops / s.ops, s.bytes))].push_back(
              achieved_efficiency(s, p));
      std::array<double, kOpClasses> eff{};
      for (size_t c = 0; c < eff.size(); ++c)
        if (!by_class[c].empty()) eff[c] = std::clamp(median(by_class[c]), 1e-6, kMaxEfficiency);
      // A class without a case takes the nearest measured one: the same intensity of another
      // footprint before the next intensity; of two as near, the larger footprint (the slower,
      // as a class beyond the cache is), then the lower intensity.
      const std::array<double, kOpClasses> measured = eff;
      for (int c = 0; c < kOpClasses; ++c) {
        double best = 1e9;
        int best_footprint = -1;
        for (int d = 0; d < kOpClasses && measured[static_cast<size_t>(c)] == 0; ++d) {
          if (measured[static_cast<size_t>(d)] == 0) continue;
          const double distance = std::abs(c % kIntensities - d % kIntensities) +
                                  0.5 * std::abs(c / kIntensities - d / kIntensities);
          if (distance < best || (distance == best && d / kIntensities > best_footprint)) {
            best_footprint = d / kIntensities;
            best = distance;
            eff[static_cast<size_t>(c)] = measured[static_cast<size_t>(d)];
          }
        }
        if (eff[static_cast<size_t>(c)] <= 0)
          throw InputError(std::string("calibration samples: no case of kind ") +
                           op_kind_name(kind) + " in the " + pass_name(pass) + " pass");
      }
      cost.efficiency = eff;
    }
}

namespace {

// One numeric field of a samples file's line; InputError naming the file, the line and the field.
double number_field(const std::string& text, const std::string& where, const char* name) {
  size_t used = 0;
  double v = 0;
  try {
    v = std::stod(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != text.size() || !std::isfinite(v) || v < 0)
    throw InputError(where + ": " + name + " must be a number >= 0, not '" + text + "'");
  return v;
}

}  // namespace

std::vector<CalibrationSample> read_samples(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw InputError(path + ": cannot read the samples file");
  std::vector<CalibrationSample> out;
  std::string line;
  bool header = false;
  for (int number = 1; std::getline(in, line); ++number) {
    if (!line.empty() && line.back() == '\r') line.pop_back();  // a file saved with CRLF ends
    if (line.empty() || line[0] == '#') continue;
    const std::string where = path + ":" + std::to_string(number);
    std::vector<std::string> f;
    std::stringstream ss(line);
    for (std::string x; std::getline(ss, x, ',');) f.push_back(x);
    if (!header) {
      if (line != kSamplesHeader)
        throw InputError(where + ": expected the header '" + std::string(kSamplesHeader) + "'");
      header = true;
      continue;
    }
    if (f.size() != 8)
      throw InputError(where + ": 8 fields expected (" + kSamplesHeader + "), found " +
                       std::to_string(f.size()));
    CalibrationSample s;
    if (f[0] == "forward")
      s.pass = Pass::kForward;
    else if (f[0] == "backward")
      s.pass = Pass::kBackward;
    else
      throw InputError(where + ": pass must be forward or backward, not '" + f[0] + "'");
    bool kind = false;
    for (int k = 0; k < kOpKinds; ++k)
      if (f[1] == op_kind_name(static_cast<OpKind>(k))) {
        s.kind = static_cast<OpKind>(k);
        kind = true;
      }
    if (!kind)
      throw InputError(where + ": unknown kind '" + f[1] +
                       "' (matmul, conv, norm, pool, elementwise, random)");
    s.shape = f[2];
    s.ops = number_field(f[3], where, "ops");
    s.flops = number_field(f[4], where, "flops");
    s.bytes = number_field(f[5], where, "bytes");
    s.time = number_field(f[6], where, "seconds");
    if (s.ops <= 0 || s.bytes <= 0 || s.time <= 0)
      throw InputError(where + ": ops, bytes and seconds must be > 0");
    if (f[7] != "0" && f[7] != "1")
      throw InputError(where + ": fixed_cost must be 0 or 1, not '" + f[7] + "'");
    s.fixed_cost = f[7] == "1";
    out.push_back(s);
  }
  if (!header)
    throw InputError(path + ": empty samples file (expected the header '" +
                     std::string(kSamplesHeader) + "')");
  return out;
}

std::vector<CalibrationSample> roofline_samples(OpKind kind, Pass pass, double memory_bytes_per_s,
                                                Seconds fixed) {
  RV_CHECK(memory_bytes_per_s > 0, "roofline_samples: memory bandwidth must be > 0");
  std::vector<CalibrationSample> out;
  for (const LayerCase& c : layer_cases(false)) {
    if (c.kind != kind) continue;
    auto [f, b] = describe(c);
    CalibrationSample s = pass == Pass::kForward ? f : b;
    s.time = s.ops * fixed + (s.fixed_cost ? 0.0 : s.ops * s.bytes / memory_bytes_per_s);
    out.push_back(s);
  }
  return out;
}

Calibration calibrate_published(const PublishedOptions& options) {
  if (!(options.peak_flops_per_s > 0))
    throw InputError("calibrate --from: --peak-tflops must be > 0");
  Calibration cal;
  cal.samples = read_samples(options.samples_path);
  if (cal.samples.empty()) throw InputError(options.samples_path + ": no samples");
  for (int q = 0; q < kPasses; ++q) {
    const auto pass = static_cast<Pass>(q);
    // Kernel benchmarks rarely time a kernel too small to cost anything but its fixed cost: then
    // the pass's shortest kernel (per operation) is taken as one, the floor no kernel went below.
    CalibrationSample* shortest = nullptr;
    bool any_fixed = false;
    for (auto& s : cal.samples) {
      if (s.pass != pass) continue;
      any_fixed = any_fixed || s.fixed_cost;
      if (!shortest || s.time / s.ops < shortest->time / shortest->ops) shortest = &s;
    }
    if (!any_fixed && shortest) shortest->fixed_cost = true;
    std::vector<double> fixed;
    for (const auto& s : cal.samples)
      if (s.pass == pass && s.fixed_cost) fixed.push_back(s.time / s.ops);
    for (int k = 0; k < kOpKinds; ++k) {
      const auto kind = static_cast<OpKind>(k);
      const bool has =
          std::any_of(cal.samples.begin(), cal.samples.end(),
                      [&](const CalibrationSample& s) { return s.pass == pass && s.kind == kind; });
      // Published kernel timings without dropout's: dropout as elementwise (profile.h).
      if (has || kind == OpKind::kRandom) continue;
      if (!(options.memory_bytes_per_s > 0))
        throw InputError(options.samples_path + ": no " + op_kind_name(kind) + " case in the " +
                         pass_name(pass) +
                         " pass; give --memory-gbps to model it at the memory bandwidth");
      if (fixed.empty())
        throw InputError(options.samples_path + ": no fixed-cost case in the " + pass_name(pass) +
                         " pass");
      for (const auto& s : roofline_samples(kind, pass, options.memory_bytes_per_s, median(fixed)))
        cal.samples.push_back(s);
    }
  }
  ComputeProfile& p = cal.profile;
  p.name = options.name;
  p.threads = 0;
  p.peak_flops_per_s = options.peak_flops_per_s;
  fit_profile(cal.samples, p);
  cal.loops = p;
  return cal;
}

}  // namespace rv
