// How tensors' buffers get their memory, set once at the start of every program that computes or
// measures compute (ravnest, which the node processes also run, and the benches).
//
// The C heap. glibc's default hands large freed blocks back to the kernel: a block above the mmap
// threshold is a mapping of its own, unmapped when freed, and freed memory at the top of the heap
// beyond the trim threshold is trimmed; both thresholds move with the sizes freed so far. A loop
// that allocates and frees large tensors, as `ravnest calibrate` repeats each operation, can so map
// and fault in fresh pages at every turn: a ReLU over 800,000 floats took 1.48 ms in the
// calibration here, and 0.49 ms under the policy below. Blocks up to kHeapBlockBytes come from the
// heap, and up to kKeptFreeBytes of freed heap stays mapped.
//
// The tensors' allocator. LibTorch's own CPU allocator asks the heap for each buffer with
// posix_memalign(64); glibc serves an aligned request from a block 64 bytes larger and hands the
// rest back, so a freed buffer leaves a hole a little too small for the next buffer of its size.
// A loop that keeps a few recent outputs (as a stage keeps its micro-batches' activations) then
// grows the heap at every turn and faults in fresh pages each time: a ReLU's forward over 3
// million floats, the last four outputs kept, took 36 ms against 0.6 ms, and the same pattern of
// 12 MB blocks in C grew the heap to 297 MB against 80 MB for plain malloc. The allocator
// installed here asks malloc for the size plus the alignment and aligns within it, so freed
// buffers fit the next ones of their size. (On the hypervisor this project's machines run under, a
// fresh page costs about 7 us to fault in, so every such turn cost tens of milliseconds; on bare
// metal about a tenth of that, still more than the operation.)
//
// Under one policy in every process, the calibration measures what the runs it predicts do.
#pragma once

#include <cstddef>

namespace rv {

constexpr size_t kHeapBlockBytes = size_t{32} << 20;  // glibc's largest mmap threshold on 64-bit
constexpr size_t kKeptFreeBytes = size_t{64} << 20;
constexpr size_t kTensorAlignment = 64;  // bytes, as LibTorch's own CPU allocator (AVX-512)

// Sets the heap policy (glibc's mallopt) and installs the tensors' CPU allocator (above). Returns
// false if the C library refused a heap setting (the program runs on, under its defaults). Call
// before the first tensor; tensors made before keep their own allocator's deleter.
bool configure_allocator();

}  // namespace rv
