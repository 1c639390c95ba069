#include "core/memory/table_memory.h"

#include <ATen/ATen.h>
#include <sys/mman.h>

#include <cstdlib>
#include <cstring>
#include <new>

namespace rv {

at::Tensor on_huge_pages(const at::Tensor& t) {
  const size_t bytes = static_cast<size_t>(t.numel()) * t.element_size();
  if (!t.is_contiguous() || bytes < kHugePageBytes) return t;
  const size_t rounded = (bytes + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes;
  void* p = nullptr;
  if (posix_memalign(&p, kHugePageBytes, rounded) != 0) throw std::bad_alloc();
#ifdef MADV_HUGEPAGE
  madvise(p, rounded, MADV_HUGEPAGE);  // advice: where refused, the same memory on small pages
#endif
  std::memcpy(p, t.data_ptr(), bytes);
  return at::from_blob(
      p, t.sizes(), [](void* q) { std::free(q); }, t.options());
}

}  // namespace rv
