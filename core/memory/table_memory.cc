#include "core/memory/table_memory.h"

#include <cstdlib>
#include <cstring>
#include <new>

#include <ATen/ATen.h>
#include <sys/mman.h>

namespace rv {

at::Tensor on_huge_pages(const at::Tensor& t) {
  const size_t bytes = static_cast<size_t>(t.numel()) * t.element_size();
  if (!t.is_contiguous() || bytes < kTableHugeBytes) return t;
  constexpr size_t kHuge = size_t{2} << 20;
  const size_t rounded = (bytes + kHuge - 1) / kHuge * kHuge;
  void* p = nullptr;
  if (posix_memalign(&p, kHuge, rounded) != 0) throw std::bad_alloc();
#ifdef MADV_HUGEPAGE
  madvise(p, rounded, MADV_HUGEPAGE);  // advice: where refused, the same memory on small pages
#endif
  std::memcpy(p, t.data_ptr(), bytes);
  return at::from_blob(p, t.sizes(), [](void* q) { std::free(q); }, t.options());
}

}  // namespace rv
