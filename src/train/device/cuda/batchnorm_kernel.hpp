#pragma once
/// \file
/// Train-mode BatchNorm over channels-last activations, with the ReLU or the residual add and
/// ReLU that follow it in the ResNet, as three kernels (src/train/device/cuda/batchnorm_kernel.cu):
/// per-channel partial sums, their reduction with the running statistics' update, and one
/// elementwise pass. Plain CUDA, no LibTorch; CudaParts::batch_norm_train checks the tensors and
/// launches it. Every reduction runs in a fixed order without atomics, so a result is the same
/// run to run.

#include <cuda_runtime_api.h>

#include <cstdint>

#include "element_type.hpp"

namespace pets::train::cuda {

/// One BatchNorm: `x` is rows x channels values of `type` (channels-last [N, C, H, W]:
/// rows = N * H * W); `y` receives as many. Device memory throughout.
struct BatchNormTrain {
  const void* x = nullptr;
  void* y = nullptr;
  /// Added after the BatchNorm (as x's rows x channels, of `type`), or null.
  const void* residual = nullptr;
  bool relu = false;
  ElementType type = ElementType::kFloat;
  std::int64_t rows = 0;  ///< at least 2
  int channels = 0;       ///< a multiple of kBatchNormChannelMultiple
  const float* weight = nullptr;
  const float* bias = nullptr;
  /// Updated in place: (1 - momentum) * old + momentum * batch value (the variance unbiased).
  float* running_mean = nullptr;
  float* running_var = nullptr;
  float momentum = 0.1f;
  float eps = 1e-5f;
  /// Scratch of batch_norm_workspace_bytes(rows, channels, groups) bytes, 8-byte aligned.
  void* workspace = nullptr;
  /// How many row groups the partial sums run in: batch_norm_groups's choice.
  int groups = 1;
};

/// What `channels` must be a multiple of (the elementwise pass handles 8 values at a time).
constexpr int kBatchNormChannelMultiple = 8;

/// The row groups for `rows` x `channels` on a device of `multiprocessors` SMs: enough blocks to
/// fill it, each thread summing at least a few rows.
int batch_norm_groups(std::int64_t rows, int channels, int multiprocessors);

/// The scratch BatchNormTrain::workspace needs.
std::int64_t batch_norm_workspace_bytes(int channels, int groups);

/// Enqueues the three kernels on `stream`; returns the first launch error.
cudaError_t launch_batch_norm_train(const BatchNormTrain& args, cudaStream_t stream);

}  // namespace pets::train::cuda
