#pragma once
/// What the CUDA tests of pets::train share (cuda_test_util.hpp also serves tests that link only
/// pets::model).

#include <gtest/gtest.h>
#include <torch/cuda.h>
#include <torch/torch.h>

#include <cstdint>
#include <iostream>
#include <string>

#include "model/model_test_util.hpp"
#include "pets/model/resnet50d.hpp"
#include "pets/train/device/cuda_parts.hpp"

namespace pets::test {

/// The backend's CUDA parts when a CUDA device is present; null otherwise, and the test skips:
/// `if (cuda_or_skip() == nullptr) GTEST_SKIP() << "no CUDA device";`.
inline const pets::train::CudaParts* cuda_or_skip() {
  if (!torch::cuda::is_available()) return nullptr;
  return pets::train::cuda_parts();
}

/// A ResNet-50d of 37 classes drawn from `seed` on `device`, channels-last, its backbone frozen
/// and its BatchNorms spread away from the identity (spread_batchnorms's `mean`, `var_low` and
/// `var_high`).
inline pets::model::ResNet50d spread_model(const torch::Device& device, std::uint64_t seed,
                                           double mean, double var_low, double var_high) {
  torch::manual_seed(seed);
  pets::model::ResNet50d model(37);
  spread_batchnorms(*model, mean, var_low, var_high);
  model->freeze_backbone();
  model->to(device);
  model->to_channels_last();
  return model;
}

/// `batch` seeded random images of `size` x `size` on `device`, channels-last.
inline torch::Tensor random_images(const torch::Device& device, std::int64_t batch,
                                   std::int64_t size) {
  torch::manual_seed(11);
  return torch::randn({batch, 3, size, size})
      .to(device)
      .contiguous(torch::MemoryFormat::ChannelsLast);
}

inline double max_abs(const torch::Tensor& t) { return t.abs().max().item<double>(); }

/// The `fused` features' relative error against the fp32 `reference` at most twice LibTorch's own
/// (`native`, under the same precision) plus `margin`; both errors printed under `what`.
inline void expect_fused_as_accurate(const torch::Tensor& reference, const torch::Tensor& native,
                                     const torch::Tensor& fused, double margin,
                                     const std::string& what) {
  ASSERT_TRUE(torch::isfinite(fused).all().item<bool>()) << what;
  const double native_error = max_abs(native - reference) / max_abs(reference);
  const double fused_error = max_abs(fused - reference) / max_abs(reference);
  std::cout << "[ parity  ] " << what << ": features' relative error against fp32, LibTorch "
            << native_error << ", fused " << fused_error << "\n";
  EXPECT_LE(fused_error, 2 * native_error + margin) << what;
}

}  // namespace pets::test
