#include "real/compute_device.h"

#include <ATen/Context.h>
#if __has_include(<c10/core/CachingDeviceAllocator.h>)
#include <c10/core/CachingDeviceAllocator.h>
#endif

#include <string>
#include <type_traits>
#include <utility>

#include "core/error.h"

namespace rv {

int visible_gpus() { return at::hasCUDA() ? static_cast<int>(at::getNumGPUs()) : 0; }

c10::Device compute_device(const Scenario& s, int rank) {
  const DeviceChoice want = s.real.device;
  if (want == DeviceChoice::kCpu) return c10::kCPU;
  const int gpus = visible_gpus();
  if (gpus == 0) {
    if (want == DeviceChoice::kAuto) return c10::kCPU;
    throw KeyError("real.device",
                   "\"cuda\": no CUDA GPU is available to this process (the LibTorch it was built "
                   "against has no CUDA, or no GPU is visible; README, GPUs)");
  }
  const int asked = s.device_of(rank).gpu;
  if (asked >= gpus)
    throw KeyError("real.device", "devices[].gpu = " + std::to_string(asked) + " for rank " +
                                      std::to_string(rank) + ", but this process sees " +
                                      std::to_string(gpus) + " GPU(s)");
  const int index = asked >= 0 ? asked : rank % gpus;
  return c10::Device(c10::DeviceType::CUDA, static_cast<c10::DeviceIndex>(index));
}

namespace {

// Whether c10::getDeviceAllocator(type)->getDeviceStats(index) exists in this LibTorch: found by
// argument-dependent lookup at instantiation, so that a LibTorch without it compiles this too.
template <class Type, class = void>
struct HasDeviceStats : std::false_type {};
template <class Type>
struct HasDeviceStats<
    Type, std::void_t<decltype(getDeviceAllocator(std::declval<Type>())->getDeviceStats(0))>>
    : std::true_type {};

template <class Type>
std::optional<DeviceMemoryPeak> peak_of(Type type, c10::DeviceIndex index) {
  if constexpr (HasDeviceStats<Type>::value) {
    const auto stats = getDeviceAllocator(type)->getDeviceStats(index);
    DeviceMemoryPeak p;
    p.allocated = static_cast<Bytes>(stats.allocated_bytes[0].peak);  // [0]: all pools
    p.reserved = static_cast<Bytes>(stats.reserved_bytes[0].peak);
    return p;
  } else {
    (void)type;
    (void)index;
    return std::nullopt;
  }
}

}  // namespace

std::optional<DeviceMemoryPeak> device_memory_peak(c10::Device device) {
  if (device.is_cpu()) return std::nullopt;
  return peak_of(device.type(), device.index() < 0 ? c10::DeviceIndex{0} : device.index());
}

}  // namespace rv
