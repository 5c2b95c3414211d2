#include "pets/train/device/device_name.hpp"

#include "pets/train/device/cuda_parts.hpp"

namespace pets::train {

std::string device_with_name(const c10::Device& device) {
  std::string where = device.str();
  if (device.is_cuda()) {
    const std::string name = cuda_parts()->device_name(device.index());
    if (!name.empty()) where += " (" + name + ")";
  }
  return where;
}

}  // namespace pets::train
