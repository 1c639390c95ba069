// BufferPool: received messages' memory is reused once its tensors are gone, within a cap, and
// outlives the pool safely.
#include <ATen/ATen.h>

#include "catch.h"
#include "real/buffer_pool.h"

using namespace rv;

TEST_CASE("buffer pool: a released block serves the next request of its size", "[buffer_pool]") {
  BufferPool pool(size_t{64} << 20);
  const int64_t n = 300000;  // 1.2 MB
  at::Tensor a = pool.take(n, at::kFloat);
  REQUIRE(a.numel() == n);
  REQUIRE(a.scalar_type() == at::kFloat);
  REQUIRE(a.is_contiguous());
  a.fill_(3.0f);
  const void* p = a.data_ptr();
  CHECK(pool.cached_bytes() == 0);
  a = at::Tensor();  // back to the pool
  CHECK(pool.cached_bytes() >= static_cast<size_t>(n) * 4);
  at::Tensor b = pool.take(n, at::kFloat);
  CHECK(b.data_ptr() == p);
  CHECK(pool.reused() == 1);
  CHECK(pool.cached_bytes() == 0);
  // Another size does not take that block; a view keeps its block out of the pool until it goes.
  at::Tensor c = pool.take(2 * n, at::kLong);
  CHECK(c.data_ptr() != p);
  CHECK(c.scalar_type() == at::kLong);
  at::Tensor view = b.narrow(0, 10, 100);
  b = at::Tensor();
  CHECK(pool.cached_bytes() == 0);
  view = at::Tensor();
  CHECK(pool.cached_bytes() > 0);
}

TEST_CASE("buffer pool: keeps at most its cap, small requests bypass it", "[buffer_pool]") {
  BufferPool pool(size_t{1} << 20);                // 1 MiB
  at::Tensor big = pool.take(400000, at::kFloat);  // 1.6 MB: more than the cap
  big = at::Tensor();
  CHECK(pool.cached_bytes() == 0);
  at::Tensor small = pool.take(100, at::kFloat);
  small = at::Tensor();
  CHECK(pool.cached_bytes() == 0);
  CHECK(pool.reused() == 0);
}

TEST_CASE("buffer pool: tensors may outlive the pool", "[buffer_pool]") {
  at::Tensor t;
  {
    BufferPool pool(size_t{64} << 20);
    t = pool.take(500000, at::kFloat);
    t.fill_(1.0f);
  }
  CHECK(t.sum().item<double>() == 500000.0);
  t = at::Tensor();  // freed, not kept: the pool is gone
}
