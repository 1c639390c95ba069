#include "core/memory/allocator.h"

#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>

#include <cstdint>
#include <cstdlib>
#include <new>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace rv {
namespace {

// A buffer of n bytes at a kTensorAlignment boundary inside a malloc'd block of n + alignment +
// one pointer; the pointer just below the buffer is the block's start, for free.
void free_aligned(void* p) {
  if (p != nullptr) std::free(static_cast<void**>(p)[-1]);
}

class HeapTensorAllocator final : public c10::Allocator {
 public:
  c10::DataPtr allocate(size_t n) const override {
    const c10::Device cpu(c10::DeviceType::CPU);
    if (n == 0) return {nullptr, nullptr, &free_aligned, cpu};
    if (n > SIZE_MAX - kTensorAlignment - sizeof(void*)) throw std::bad_alloc();
    void* block = std::malloc(n + kTensorAlignment + sizeof(void*));
    if (block == nullptr) throw std::bad_alloc();
    const uintptr_t start = reinterpret_cast<uintptr_t>(block) + sizeof(void*);
    void* p =
        reinterpret_cast<void*>((start + kTensorAlignment - 1) & ~uintptr_t{kTensorAlignment - 1});
    static_cast<void**>(p)[-1] = block;
    return {p, p, &free_aligned, cpu};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &free_aligned; }
};

HeapTensorAllocator tensor_allocator;

}  // namespace

bool configure_allocator() {
  // Above LibTorch's own registration (priority 0), so that every CPU tensor made from now on
  // comes from the heap through it.
  c10::SetCPUAllocator(&tensor_allocator, /*priority=*/10);
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
