// Memory for tensors (core/memory/): the heap policy, the tensors' allocator over it, and the
// huge-page tables a dataset's rows are gathered from.
#include <cstdint>
#include <cstdlib>
#include <vector>
#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include <ATen/ATen.h>

#include "catch.h"
#include "core/memory/allocator.h"
#include "core/memory/table_memory.h"

using namespace rv;

TEST_CASE("under the heap policy a freed tensor-sized block is reused and not mapped afresh",
          "[memory]") {
#if defined(__GLIBC__)
  REQUIRE(configure_allocator());
  // Allocated and freed in turn, as the calibration repeats an operation. Under glibc's default a
  // block of 3 MiB is a mapping of its own (until a larger one has been freed).
  for (int turn = 0; turn < 3; ++turn) {
    const size_t mapped = mallinfo2().hblks;
    void* block = std::malloc(size_t{3} << 20);
    REQUIRE(block != nullptr);
    static_cast<volatile char*>(block)[0] = 1;
    CHECK(mallinfo2().hblks == mapped);
    std::free(block);
  }
#else
  SKIP("the heap policy is glibc's (mallopt)");
#endif
}

TEST_CASE("tensors come aligned from the heap, whose freed buffers fit the next ones", "[memory]") {
#if defined(__GLIBC__)
  REQUIRE(configure_allocator());
  for (int64_t n : {int64_t{1}, int64_t{1000}, int64_t{3} << 20}) {
    const at::Tensor t = at::empty({n}, at::kFloat);
    CHECK(reinterpret_cast<uintptr_t>(t.data_ptr()) % kTensorAlignment == 0);
  }
  CHECK(at::empty({0}).numel() == 0);
  // As a stage keeps its last micro-batches' outputs: each turn a fresh input and an output of
  // 12 MB, the last four outputs kept. Through posix_memalign (LibTorch's own allocator) the
  // heap grew by 167 MB here; through the allocator here by 59 MB: a turn's buffers take the holes
  // the turn before left, and the heap holds about the live blocks (up to 6 of 12 MB).
  const size_t before = mallinfo2().arena;
  std::vector<at::Tensor> kept(4);
  for (int turn = 0; turn < 40; ++turn) {
    at::Tensor x = at::empty({3000000}, at::kFloat);
    x.fill_(1.0f);
    at::Tensor y = at::empty({3000000}, at::kFloat);
    y.fill_(2.0f);
    kept[static_cast<size_t>(turn) % kept.size()] = y;
  }
  const double grown_mb =
      (static_cast<double>(mallinfo2().arena) - static_cast<double>(before)) / 1e6;
  INFO("the heap grew by " << grown_mb << " MB");
  CHECK(grown_mb < 100);
#else
  SKIP("the heap policy is glibc's (mallopt)");
#endif
}

TEST_CASE("a large table moves to huge-page memory with its values, views and small tables stay",
          "[memory]") {
  const at::Tensor big = at::arange(int64_t{1} << 20, at::kInt).reshape({1024, 1024});  // 4 MiB
  const at::Tensor moved = on_huge_pages(big);
  CHECK(moved.data_ptr() != big.data_ptr());
  CHECK(reinterpret_cast<uintptr_t>(moved.data_ptr()) % (uintptr_t{2} << 20) == 0);
  CHECK(moved.sizes() == big.sizes());
  CHECK(moved.scalar_type() == at::kInt);
  CHECK(at::equal(moved, big));
  // Not contiguous (a copy would multiply an expanded view's memory), or under 2 MiB: as it was.
  const at::Tensor expanded = at::arange(1024, at::kFloat).expand({4096, 1024});
  CHECK(on_huge_pages(expanded).data_ptr() == expanded.data_ptr());
  const at::Tensor small = at::zeros({100, 100});
  CHECK(on_huge_pages(small).data_ptr() == small.data_ptr());
}
