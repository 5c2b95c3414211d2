#pragma once
/// \file
/// The device input's tensor work on one batch: every staged crop resized to size x size with
/// the antialiased triangle filter (data::bilinear_taps, the CPU path's taps and weights) and
/// normalised, as one [n, 3, size, size] channels-last tensor in the requested dtype.
///
/// resize_normalize does the whole batch in a fixed number of ATen calls, whatever n is: the
/// filter is separable, so each crop's output is Wy * crop * Wx^T with banded weight matrices.
/// The host builds, per crop and per tile of `tile` output rows (columns), the window of input
/// rows (columns) the tile reads and the tile's weights over that window (one buffer, one
/// non-blocking upload on CUDA); the device then gathers the windows of every crop at once
/// (index_select over the packed bytes, no per-crop copy) and contracts them with two batched
/// matmuls, the normalisation's scale folded into the byte-to-float conversion and its shift
/// into the final write of the output dtype. resize_normalize_per_crop is the plain path it is
/// checked against: LibTorch's antialiased interpolate, one call per crop.

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>

#include <vector>

#include "pets/train/device/crop_slot.hpp"

namespace pets::train {

/// Output rows (and columns) per tile of resize_normalize: each tile's window is about
/// tile * reduction + taps input rows, so the matmuls do about (1 + taps / (tile * reduction))
/// times the filter's own work, where whole-crop matrices would do (input side / taps) times.
/// 8, 16 and 32 took the same time on the CPU device (bench/RESULTS.md, "Batched resize").
inline constexpr int kResizeTile = 16;

/// The device input's normalisation, v * scale[c] - shift[c] = (v / 255 - mean[c]) / std[c]
/// with data::kMean and data::kStd, as the CPU path computes it: [1, 3, 1, 1] float32 tensors.
struct InputNormalization {
  at::Tensor scale;
  at::Tensor shift;
};
InputNormalization input_normalization(const c10::Device& device);

/// The crops `slots` of the flat uint8 buffer `bytes` (on any device; HWC bytes, packed or with
/// a row stride, see CropSlot)
/// resized to size x size and normalised: v * scale[c] - shift[c] with `scale` and `shift`
/// [1, 3, 1, 1] float32 tensors on bytes' device. Returns [n, 3, size, size], channels-last,
/// `dtype` (float32, bfloat16 or float16; the arithmetic is float32, rounded once at the end).
/// On CUDA the work is enqueued on the current stream. Throws pets::Error when a slot is empty
/// or runs past `bytes`. `tile` (>= 1) changes only the speed and the rounding.
at::Tensor resize_normalize(const at::Tensor& bytes, const std::vector<CropSlot>& slots, int size,
                            const at::Tensor& scale, const at::Tensor& shift, c10::ScalarType dtype,
                            int tile = kResizeTile);

/// The same result from one LibTorch interpolate (bilinear, antialias) per crop: the reference
/// that resize_normalize is tested against.
at::Tensor resize_normalize_per_crop(const at::Tensor& bytes, const std::vector<CropSlot>& slots,
                                     int size, const at::Tensor& scale, const at::Tensor& shift,
                                     c10::ScalarType dtype);

}  // namespace pets::train
