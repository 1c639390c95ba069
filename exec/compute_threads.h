// The number of threads LibTorch's CPU maths may use in this process, BLAS included.
//
// at::set_num_threads() does not reach OpenBLAS's own pool (libopenblas0-pthread), whose idle
// threads spin: with several node processes on few cores they steal the CPU from each other.
#pragma once

namespace rv {

// Sets LibTorch's intra-op threads and, when the BLAS is OpenBLAS, its thread count, to `n` >= 1.
void set_compute_threads(int n);

// The threads each of `local_ranks` node processes sharing this machine computes with: the
// machine's cores divided among them, at least 1. A real run's node process sets it; the dilation's
// measurement and the hardware agreement's calibration measure with it.
int threads_per_rank(int local_ranks);

}  // namespace rv
