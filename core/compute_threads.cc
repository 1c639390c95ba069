#include "core/compute_threads.h"

#include <dlfcn.h>

#include <algorithm>

#include <ATen/Parallel.h>

namespace rv {

void set_compute_threads(int n) {
  n = std::max(1, n);
  at::set_num_threads(n);
  // Looked up at run time: the BLAS behind libblas.so.3 is chosen by Debian's alternatives.
  using SetThreads = void (*)(int);
  if (auto f = reinterpret_cast<SetThreads>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads"))) f(n);
}

}  // namespace rv
