// Where a dataset's tables live: memory that a random gather of rows reads at the cost of its
// bytes.
//
// A micro-batch's inputs are rows picked at random from the whole training set (core/data/
// dataset.h, Sampler). With 4 KiB pages each row is on a page of its own, a TLB miss and a page
// walk per row. On a host whose hypervisor shadows the guest's page tables (this project's CI
// machines), any large unmap in the process (a freed 47 MB decompression buffer, a new thread's
// malloc arena) drops the shadow entries, and the first touch of each page after it costs about
// 7 us: 32 random Fashion-MNIST rows took 200 us in the first stage's forward of a real run
// (against 5 us for the same rows of a fresh copy), more than half the stage's compute, which no
// compute model of the device can see. On 2 MiB pages a table of 47 MB is 24 pages, and the same
// gather costs what its bytes cost (0.3 us per random row after such an unmap).
#pragma once

#include <ATen/core/Tensor.h>

namespace rv {

// x86-64's huge page. Tables of at least one are moved to huge-page memory; smaller ones stay
// where they are.
constexpr size_t kHugePageBytes = size_t{2} << 20;

// `t`'s values in memory aligned to kHugePageBytes and advised to the kernel as huge pages (madvise
// MADV_HUGEPAGE; where the kernel declines, ordinary pages, the same values). Returns `t` itself
// if it is not contiguous (an expanded or overlapping view: a copy would multiply its memory) or
// smaller than kHugePageBytes.
at::Tensor on_huge_pages(const at::Tensor& t);

}  // namespace rv
