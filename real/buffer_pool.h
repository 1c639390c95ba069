// BufferPool: CPU tensors for received messages, whose memory goes back to the pool when
// the last tensor using it is freed, so that a rank receiving the same sizes again and again (ring
// segments, activations) reuses memory it has touched before. A fresh allocation of megabytes is
// mapped by the kernel page by page at first touch, zeroed on the way: for a 2 MB segment that
// costs about as much as receiving it over the loopback.
//
// Blocks are kept by their size, rounded up to kGranule bytes; a request takes a kept block of
// exactly that size or allocates one. At most `max_cached` bytes are kept; blocks beyond that are
// freed. Requests below kMinBytes are plain allocations (the C library reuses small blocks well).
//
// Thread-safety: take() and the tensors' release may run on any threads. Tensors may outlive the
// pool object: their blocks are then freed.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstddef>
#include <cstdint>
#include <memory>

namespace rv {

class BufferPool {
 public:
  static constexpr size_t kGranule = 64 << 10;  // bytes
  static constexpr size_t kMinBytes = 64 << 10;

  explicit BufferPool(size_t max_cached);
  ~BufferPool();
  BufferPool(const BufferPool&) = delete;
  BufferPool& operator=(const BufferPool&) = delete;

  // A contiguous 1-d tensor of `elems` elements of `type`, contents undefined.
  at::Tensor take(int64_t elems, at::ScalarType type);

  size_t cached_bytes() const;  // kept for reuse now
  int64_t reused() const;       // requests served from kept blocks so far

 private:
  struct State;
  std::shared_ptr<State> state_;
};

}  // namespace rv
