// The C heap's policy for tensors' buffers, set once at the start of every program that computes
// or measures compute (ravnest, which the node processes also run, and the benches).
//
// glibc's default hands large freed blocks back to the kernel: a block above the mmap threshold
// is a mapping of its own, unmapped when freed, and freed memory at the top of the heap beyond the
// trim threshold is trimmed; both thresholds move with the sizes freed so far. A loop that
// allocates and frees large tensors, as `ravnest calibrate` repeats each operation, can so map
// and fault in fresh pages at every turn: a ReLU over 800,000 floats took 1.48 ms in the
// calibration here, and 0.49 ms under the policy below, and the profile took those page faults
// for the device's speed on large elementwise and pooling work. A training step's allocations
// meet them more or less by chance. Under one fixed policy in every process, the calibration
// measures what the runs it predicts do: blocks up to kHeapBlockBytes come from the heap, and up
// to kKeptFreeBytes of freed heap stays mapped (so a run's steady state maps nothing new).
#pragma once

#include <cstddef>

namespace rv {

constexpr size_t kHeapBlockBytes = size_t{32} << 20;  // glibc's largest mmap threshold on 64-bit
constexpr size_t kKeptFreeBytes = size_t{64} << 20;

// Sets the policy above (glibc's mallopt; nothing elsewhere). Returns false if the C library
// refused a setting (the program runs on, under its defaults). Call before the first tensor.
bool configure_allocator();

}  // namespace rv
