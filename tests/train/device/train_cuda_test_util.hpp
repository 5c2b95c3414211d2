#pragma once
/// What the CUDA tests of pets::train share (cuda_test_util.hpp also serves tests that link only
/// pets::model).

#include <torch/cuda.h>

#include "pets/train/device/cuda_parts.hpp"

namespace pets::test {

/// The backend's CUDA parts when a CUDA device is present; null otherwise, and the test skips:
/// `if (cuda_or_skip() == nullptr) GTEST_SKIP() << "no CUDA device";`.
inline const pets::train::CudaParts* cuda_or_skip() {
  if (!torch::cuda::is_available()) return nullptr;
  return pets::train::cuda_parts();
}

}  // namespace pets::test
