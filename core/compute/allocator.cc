#include "core/compute/allocator.h"

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace rv {

bool configure_allocator() {
#if defined(__GLIBC__)
  // A fixed threshold also ends glibc's dynamic one (M_MMAP_THRESHOLD and M_TRIM_THRESHOLD set).
  const bool heap = mallopt(M_MMAP_THRESHOLD, static_cast<int>(kHeapBlockBytes)) == 1;
  const bool kept = mallopt(M_TRIM_THRESHOLD, static_cast<int>(kKeptFreeBytes)) == 1;
  return heap && kept;
#else
  return true;
#endif
}

}  // namespace rv
