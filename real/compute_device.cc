#include "real/compute_device.h"

#include <ATen/Context.h>

#include <string>

#include "core/error.h"

namespace rv {

int visible_gpus() { return at::hasCUDA() ? static_cast<int>(at::getNumGPUs()) : 0; }

c10::Device compute_device(const Scenario& s, int rank) {
  const std::string& want = s.real.device;
  if (want == "cpu") return c10::kCPU;
  const int gpus = visible_gpus();
  if (gpus == 0) {
    if (want == "auto") return c10::kCPU;
    throw KeyError("real.device", "\"cuda\": no CUDA GPU is available to this process (the LibTorch it was built "
                                  "against has no CUDA, or no GPU is visible; README, GPUs)");
  }
  const int asked = s.device_of(rank).gpu;
  if (asked >= gpus)
    throw KeyError("real.device", "devices[].gpu = " + std::to_string(asked) + " for rank " + std::to_string(rank) +
                                      ", but this process sees " + std::to_string(gpus) + " GPU(s)");
  const int index = asked >= 0 ? asked : rank % gpus;
  return c10::Device(c10::DeviceType::CUDA, static_cast<c10::DeviceIndex>(index));
}

}  // namespace rv
