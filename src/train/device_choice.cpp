#include "pets/train/device_choice.hpp"

#include <torch/cuda.h>

#include "pets/util/error.hpp"

namespace pets::train {

c10::Device pick_device(DeviceChoice choice, int local_rank) {
  const int count = static_cast<int>(torch::cuda::device_count());
  if (choice == DeviceChoice::kCuda && count == 0)
    throw UsageError("--device cuda: no CUDA device is available to this build");
  if (choice == DeviceChoice::kCpu || count == 0) return c10::kCPU;
  return {c10::kCUDA, static_cast<c10::DeviceIndex>(local_rank % count)};
}

}  // namespace pets::train
