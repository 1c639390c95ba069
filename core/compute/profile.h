// A device's compute as the calibrated model describes it: its peak, and per pass (forward,
// backward) and kind of layer a fixed cost per operation (dispatch, autograd bookkeeping,
// allocation) and the fraction of the peak it achieves in each operation class (arithmetic
// intensity and footprint, work.h). time_of() is the model's one function: the simulator, the
// planner and emulate_speed charge work through it and nothing else.
//
// Profiles come from `ravnest calibrate` (a microbenchmark of this host's LibTorch running the
// project's own layers, forward and backward, written as a profile file) or from published
// achieved/peak ratios (profiles/). The file format (TOML):
//
//   name = "host"
//   peak_tflops = 0.073      # the best rate a large matmul achieved, 1e12 flop/s
//   threads = 1              # LibTorch threads it was measured with
//   memory_gbps = 12.0       # optional: memory read bandwidth, 1e9 B/s (the cold-memory term)
//   cache_mib = 4            # optional: the cache the device has to itself, MiB
//   idle_cold = [[0.1, 0.05], [1, 0.4], [3, 0.6], [10, 0.8]]
//                            # optional (with memory_gbps): the cooling curve, [wait ms, fraction
//                            # cold] (below); `idle_cold_ms = 3` is the step [[3, 1]]
//   idle_op_us = [[0.03, 2.1, 6], [0.3, 3.5, 9], [3, 6, 30]]
//                            # optional: the wake-up curve, [wait ms, us more per operation,
//                            # us more for the span that ends the wait] (below; a point of two
//                            # numbers charges no span)
//   first_op_us = [[13, 35, 14, 5, 7.5, 9], [13, 18, 12, 9, 10, 11]]
//                            # optional: per pass (forward, backward) and kind (matmul, conv,
//                            # norm, pool, elementwise, random), us more for a span's first
//                            # operation of the kind in each operation class (KindCost::first)
//   [forward]    # per kind: fixed cost (us), then the efficiency of each operation class (work.h):
//                # intensity < 4, < 8, < 16, < 32, < 64, >= 64 flop/B within 1 MiB; the same up to
//                # 8 MiB; the same beyond (18 efficiencies; a file of 12, as profiles were before
//                # the middle footprint, gives its second six to both larger footprints)
//   matmul = [4.6, 0.41, 0.6, 0.88, 1.05, 1.1, 1.1, 0.41, 0.75, 0.8, 0.95, 1.1, 1.1, 0.4, ...]
//   conv = [6.7, ...]
//   norm = [5.9, ...]
//   pool = [2.3, ...]
//   elementwise = [1.9, ...]
//   random = [24, ...]
//   [backward]
//   ... the same six kinds
//
// `random` (dropout, work.h) came after the others: a profile written before it (without the
// `random` rows, five kinds in first_op_us) charges dropout as `elementwise`, as the model did
// then.
//
// Units: seconds, flop/s; efficiencies are fractions of the peak in (0, kMaxEfficiency]: a kind may
// beat the matmul that defines the peak (on an AVX-512 host oneDNN's convolutions ran at up to
// 4 times OpenBLAS's single-thread product).
#pragma once

#include <array>
#include <cstdint>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "core/compute/work.h"
#include "core/units.h"

namespace rv {

// The largest efficiency a profile may hold: a sanity bound, not a model (the peak is the host
// BLAS's matmul, which other kernels may beat several times over).
constexpr double kMaxEfficiency = 16.0;

// One kind of operation in one pass on one device.
struct KindCost {
  Seconds overhead = 0;  // per operation
  // More, once per span for each operation class (work.h) it has operations of this kind in: the
  // first of them finds their code and data gone from the core's own caches (the span's other
  // kinds, the stage's other spans and the transport went through the core since), where the
  // others of the class find them as the first left them. Operations of one kind and another
  // class run other code (a matmul of 128 x 512 by 512 x 256 and one of 128 x 256 by 256 x 10 take
  // different kernels). On the VM this project is developed on, a ReLU on 32 x 512 values took
  // 4.4 us over and over and 18.8 us as a stage runs it, once per micro-batch; charged on every
  // operation, the cold cost put a stage's optimizer step (8 kernels of two kinds of code per
  // tensor) at 1.4-2.3x its real time; charged once per kind, the MLP's last stage (two linear
  // layers, one of each of those shapes) came out at 0.83-0.89x its real forward time at batch 128,
  // and at 0.91-0.98x charged once per kind and class.
  Seconds first = 0;
  std::array<double, kOpClasses> efficiency = ones();  // achieved / peak, by class

  static std::array<double, kOpClasses> ones() {
    std::array<double, kOpClasses> a{};
    a.fill(1.0);
    return a;
  }
};

struct ComputeProfile {
  std::string name = "peak";
  double peak_flops_per_s = 1e12;  // flop/s
  int threads = 0;                 // 0: not measured
  // The cold-memory term (work.h): 0 in either turns it off.
  double memory_bytes_per_s = 0;  // B/s
  double cache_bytes = 0;         // B
  // The cooling curve: after the device idled `wait` seconds (a stage waiting for its next
  // message), the fraction `cold` of its stage that is gone from the caches. A span after such a
  // wait reads that fraction of its cold and idle-cold bytes (work.h) from memory. Points in
  // increasing wait with fractions nondecreasing in [0, 1]; cold_fraction() interpolates. Empty:
  // an idle core keeps its caches. On the VMs this project is developed on, a wait of 1-3 ms cost
  // a stage's next span 1.3-1.5x its time back to back (bench_stage_compute --sleep-us; the host
  // runs other work on an idle virtual CPU's core), and an 8 MiB working set read 0.40 / 0.59 /
  // 0.82 of the way from warm to cold after 1 / 3 / 10 ms.
  struct Cooling {
    Seconds wait = 0;
    double cold = 0;  // in [0, 1]
  };
  std::vector<Cooling> idle_cold;
  // The wake-up curve: after the device idled `wait` seconds, the span that ends the wait costs
  // `span` seconds more, once, and each operation code it runs (Work::codes: an optimizer step's
  // kernels on each tensor are one or two) costs `op` seconds more the first time the span's code
  // runs again (the code of a span's kind: core/compute/work.h Work::code; DeviceHistory below
  // says which spans pay). What an operation runs besides its arithmetic (dispatch,
  // autograd, the allocator: code, branch history, address translations) is gone after a wait as
  // the data is, and it is no matter of bytes: on the VMs this project is developed on, a span of
  // 8 small operations took 0.02 ms back to back and 0.05-0.06 ms after a wait of only 50 us
  // (bench_stage_compute --sleep-us 50), while an 8 MiB read lost nothing to waits up to 1 ms.
  // Most of it is paid once, by the first operation after the wait: a ReLU on 32 x 64 values took
  // 9 / 14 / 31 us more after waits of 0.3 / 1 / 3 ms, and 64 of them in a row 19 / 25 / 38 us
  // more (bench_wake; in a calmer hour 6 / 8 / 13 and -4 / 2 / 13). So `span` is most of a short
  // span's cost, and `op` spread over a long one's operations would charge a short one too
  // little; and what comes back is code, once however often it runs (charged per operation, the
  // CNN's first stage's optimizer step, 8 kernels of 2 codes, came out at 1.6-2.2x its real time
  // after its stage's 15-20 ms waits). Points in increasing wait with both costs
  // nondecreasing; wake_cost() and wake_span_cost() interpolate. Empty: none. Seconds, undilated
  // like the fixed costs they add to.
  struct Waking {
    Seconds wait = 0;
    Seconds op = 0;    // per operation code (Work::codes)
    Seconds span = 0;  // once, for the span that ends the wait
  };
  std::vector<Waking> idle_op;
  // By pass, then kind. The default (no fixed cost, every efficiency 1) is the peak-FLOPS model:
  // every flop at the device's peak.
  std::array<std::array<KindCost, kOpKinds>, kPasses> cost{};

  const KindCost& of(Pass p, OpKind k) const {
    return cost[static_cast<size_t>(p)][static_cast<size_t>(k)];
  }
  KindCost& of(Pass p, OpKind k) { return cost[static_cast<size_t>(p)][static_cast<size_t>(k)]; }
};

// The fraction of a stage gone from the device's caches after an idle wait of `idle` seconds:
// profile.idle_cold interpolated linearly in the logarithm of the wait between its points; 0
// before the first point (and where the curve is empty), the last point's fraction after it.
double cold_fraction(const ComputeProfile& profile, Seconds idle);

// Seconds more per operation after an idle wait of `wait` seconds: profile.idle_op interpolated
// as cold_fraction interpolates the cooling curve (0 before its first point, the last point's
// cost after it).
Seconds wake_cost(const ComputeProfile& profile, Seconds wait);
// Seconds more for the span that ends an idle wait of `wait` seconds: the curve's `span`, the same
// way.
Seconds wake_span_cost(const ComputeProfile& profile, Seconds wait);

// How long `work` takes on a device of `profile`, in seconds: its operations (and for each pass,
// kind and class it has operations of, the first one's KindCost::first), plus, at the memory
// bandwidth, the bytes it reads from memory: its cold bytes where its resident bytes exceed the
// cache (the misses of back-to-back spans), `evicted` bytes (saved activations the device's work
// since their forward pushed out of its cache: DeviceHistory), and of the rest of its cold and
// idle-cold bytes the fraction cold_fraction(profile, idle) (`idle`: seconds since the device's
// last work ended). The planner's steady state charges back-to-back spans (idle 0): the stage
// that bounds a pipeline's period does not wait. A span whose idle wait the wake-up curve charges
// pays wake_span_cost(profile, idle) once. `wake`: the wait after which this span's code first
// runs again (the wake-up curve: wake_cost(profile, wake) per operation code, Work::codes; 0: its
// code is warm);
// DeviceHistory gives both for a device's spans in turn.
Seconds time_of(const Work& work, const ComputeProfile& profile, Seconds idle = 0, Seconds wake = 0,
                double evicted = 0);

// Bytes of a micro-batch's saved activations (`own` bytes) that its backward reads from memory
// when the device touched `others` bytes of other micro-batches' saved activations since its
// forward: the cache keeps what was touched last, so own - clamp(cache - others, 0, own). 0 where
// the profile has no memory term (memory_gbps and cache_mib).
double evicted_bytes(double own, double others, const ComputeProfile& profile);

// What the model needs of a device's history before each span, in the simulator, emulate_speed
// and `ravnest validate` alike: the wait since its last span ended (`idle`), and, where the span's
// code (Work::code) has not run since the device last woke from a wait that the wake-up curve
// charges, that wait (`wake`). So the span that ends a wait pays the wake-up curve's span cost
// (time_of, from its idle wait), and the spans after a wait each pay for their own code once: a
// stage's forward after it waited for its input, and the last stage's backward right after it,
// whose code the forward did not run; a stage that never waits pays for each code's first run
// only (the first span follows an unbounded wait).
//
// And whether a backward finds its micro-batch's saved activations (`a` bytes, as its forward
// wrote them) in the cache: the device's cache (profile.cache_bytes) keeps what was touched last,
// and since the forward the device touched the saved activations of other micro-batches (each
// once however often, written by their forwards or read by their backwards), so
// evicted_bytes(a, theirs, profile) come from memory (time_of's `evicted`). A stage that keeps one
// micro-batch at a time (the last of a pipeline: its backward right after its forward) reads
// them warm; a first stage of two keeps two (it runs the next forward while its backward's
// gradient is on the way), and where two micro-batches' activations exceed its cache each
// backward reads its own from memory: on the host measured, the CNN's first stage at batch 128
// (19 MB saved, 12-20 MiB of cache) took 4.9 ms a backward in a pipeline against 3.4-3.7 ms
// right after its forward (bench_stage_compute), and 5.3 ms with its caches emptied before each
// span (--evict-mib 48); at batch 32 (4.8 MB saved) 1.0 ms in both.
class DeviceHistory {
 public:
  // time_of(work, profile, idle, wake, evicted) for a span of `work` that starts at `start`
  // (seconds, on the clock end() is given), counting it as run.
  Seconds begin(const Work& work, const ComputeProfile& profile, Seconds start,
                SavedActivations saved = {});
  void end(Seconds at);  // the span ended
  // Micro-batches whose saved activations the history keeps at most: past it, the oldest forward
  // still waiting for its backward (its micro-batch lost, its backward never coming) is forgotten.
  static constexpr size_t kMaxKept = 4096;

 private:
  // evicted_bytes() for a backward of `micro_batch` (see above), its touch recorded; 0 where its
  // forward was not recorded.
  double evicted(int64_t micro_batch, const ComputeProfile& profile);
  // Drops what no forward still waiting for its backward can count (touches before the oldest
  // such forward), and past kMaxKept the oldest such forward.
  void trim();

  Seconds last_end_ = -std::numeric_limits<Seconds>::infinity();
  Seconds woke_after_ = 0;      // the wait that began the current busy period (0: none charged)
  std::vector<uint64_t> warm_;  // the codes run since
  // Each micro-batch's saved activations, by micro-batch, as touches (forwards writing them,
  // backwards reading them) numbered in order: a backward counts the others touched after its own
  // forward's touch.
  struct Kept {
    int64_t written;  // its forward's touch; -1 once its backward ran (or it was forgotten)
    int64_t touched;  // its last touch
    double bytes;
  };
  std::map<int64_t, Kept> kept_;
  int64_t touches_ = 0;  // touches so far
};

// The profile file (above). read_profile throws rv::InputError naming the file, the key and what
// is wrong; profile_to_toml gives the same format, with `comment` as a header line (written whole
// by core/output/whole_file.h).
ComputeProfile read_profile(const std::string& path);
ComputeProfile parse_profile(const std::string& text, const std::string& source);
std::string profile_to_toml(const ComputeProfile& p, const std::string& comment = "");

}  // namespace rv
