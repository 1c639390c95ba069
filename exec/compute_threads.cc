#include "exec/compute_threads.h"

#include <ATen/Parallel.h>
#include <dlfcn.h>

#include <algorithm>
#include <thread>

namespace rv {

int threads_per_rank(int local_ranks) {
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  return std::max(1, cores / std::max(1, local_ranks));
}

void set_compute_threads(int n) {
  n = std::max(1, n);
  at::set_num_threads(n);
  // Looked up at run time: the BLAS behind libblas.so.3 is chosen by Debian's alternatives.
  // Only when the count changes: OpenBLAS shuts its pool down before a fork, and setting the count
  // in the child (even to the same one) starts the pool again, whose new worker spins for about
  // 0.1 s on another core before it sleeps.
  using SetThreads = void (*)(int);
  using GetThreads = int (*)();
  auto set = reinterpret_cast<SetThreads>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads"));
  auto get = reinterpret_cast<GetThreads>(dlsym(RTLD_DEFAULT, "openblas_get_num_threads"));
  if (set != nullptr && (get == nullptr || get() != n)) set(n);
}

}  // namespace rv
