#pragma once
/// \file
/// Where a rank's model runs (--device of pets_train and pets_predict).

#include <c10/core/Device.h>

#include "pets/train/options.hpp"

namespace pets::train {

/// --device: the CUDA device local_rank % count when asked for or (auto) present, else the CPU.
/// Throws pets::UsageError for kCuda when no CUDA device is available to this build.
c10::Device pick_device(DeviceChoice choice, int local_rank);

}  // namespace pets::train
