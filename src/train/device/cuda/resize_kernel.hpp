#pragma once
/// \file
/// The device input's resize and normalise as one CUDA kernel
/// (src/train/device/cuda/resize_kernel.cu): plain CUDA, no LibTorch, so that nvcc compiles it
/// alone; CudaParts::resize_normalize checks the arguments and launches it on the current stream.

#include <cuda_runtime_api.h>

#include <cstdint>

#include "element_type.hpp"

namespace pets::train::cuda {

/// One crop of the bytes: `height` x `width` HWC uint8 pixels from byte `offset`, each row
/// `stride` bytes after the one before (width * 3 when packed).
struct KernelSlot {
  std::int64_t offset;
  std::int64_t stride;
  std::int32_t height;
  std::int32_t width;
};

/// Resizes each of the `n` crops `slots` (device memory) of `bytes` (device memory) to size x
/// size with data::bilinear_taps' filter (its taps and weights computed alike, in double, on the
/// device), horizontal pass then vertical as data::resize_crop_bilinear, and writes
/// v * scale[c] - shift[c] (three floats each, device memory) to `out`: n x size x size x 3
/// values of `type` (channels-last [n, 3, size, size]). Enqueued on `stream`; returns the
/// launch's error.
cudaError_t launch_resize_normalize(const std::uint8_t* bytes, const KernelSlot* slots, int n,
                                    int size, const float* scale, const float* shift, void* out,
                                    ElementType type, cudaStream_t stream);

}  // namespace pets::train::cuda
