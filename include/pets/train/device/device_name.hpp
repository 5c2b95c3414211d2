#pragma once
/// \file
/// How the run names its device in messages.

#include <c10/core/Device.h>

#include <string>

namespace pets::train {

/// "cuda:0 (NVIDIA H200)": `device` and, on CUDA, the GPU's name when the driver says it.
std::string device_with_name(const c10::Device& device);

}  // namespace pets::train
