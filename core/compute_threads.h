// The number of threads LibTorch's CPU maths may use in this process, BLAS included.
//
// at::set_num_threads() does not reach OpenBLAS's own pool (libopenblas0-pthread), whose idle
// threads spin: with several node processes on few cores they steal the CPU from each other.
#pragma once

namespace rv {

// Sets LibTorch's intra-op threads and, when the BLAS is OpenBLAS, its thread count, to `n` >= 1.
void set_compute_threads(int n);

}  // namespace rv
