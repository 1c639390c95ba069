// Where a real run's rank computes (real.device, devices[].gpu): the CPU, or one GPU.
//
//   cpu   the CPU
//   cuda  GPU devices[].gpu of the rank's device group, or rank mod the GPUs visible where that
//         is -1; refused (rv::KeyError naming real.device, exit status 2) where the LibTorch this
//         program was built against has no CUDA or sees no GPU, or where devices[].gpu names a GPU
//         past the last
//   auto  cuda where it can be, else the CPU
//
// Checked by the launcher for every rank before it starts any process, and by each rank.
#pragma once

#include <c10/core/Device.h>

#include <optional>

#include "core/scenario/scenario.h"
#include "core/units.h"

namespace rv {

c10::Device compute_device(const Scenario& s, int rank);

// The GPUs this process sees (0 without CUDA).
int visible_gpus();

// The most GPU memory this process's tensors on `device` have held at once (the caching
// allocator's peak allocated bytes) and the most it reserved from the device. Empty on the CPU,
// and where this LibTorch has no device-generic allocator statistics (c10::DeviceAllocator,
// LibTorch 2.9 and later).
struct DeviceMemoryPeak {
  Bytes allocated = 0;
  Bytes reserved = 0;
};
std::optional<DeviceMemoryPeak> device_memory_peak(c10::Device device);

}  // namespace rv
