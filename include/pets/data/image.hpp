#pragma once
/// \file
/// Decoded images (uint8 RGB, HWC) and the antialiased bilinear resize that PIL's
/// `Image.resize(..., BILINEAR)` performs, which is what torchvision applies to PIL images.

#include <cstddef>
#include <cstdint>
#include <vector>

namespace pets::data {

/// An 8-bit RGB image, rows top to bottom, pixels interleaved (HWC).
struct Image {
  int height = 0;
  int width = 0;
  std::vector<std::uint8_t> pixels;  ///< height * width * 3 bytes

  std::size_t bytes() const { return pixels.size(); }
};

/// A crop window in pixel units: rows [top, top + height), columns [left, left + width).
struct CropBox {
  int top = 0;
  int left = 0;
  int height = 0;
  int width = 0;
};

/// The antialiased triangle filter along one axis, in_size samples to out_size (PIL's
/// precompute_coeffs, the support scaled by the reduction factor, truncated tap ranges):
/// output sample o reads `count[o]` inputs from `first[o]` with weights
/// `weight[o * max_taps + k]`, which sum to 1 (computed in double, stored as float). The one
/// place of this filter: resize_crop_bilinear applies it, the device input path builds its
/// matrices from it.
struct ResizeTaps {
  std::vector<int> first;     ///< first input index of each output sample
  std::vector<int> count;     ///< number of taps of each output sample
  std::vector<float> weight;  ///< out_size * max_taps, normalised per sample
  int max_taps = 0;
};

/// The taps resizing `in_size` samples to `out_size` (both positive).
ResizeTaps bilinear_taps(int in_size, int out_size);

/// Crops `box` out of an RGB image (src, src_height x src_width) and resizes it to
/// out_height x out_width with PIL's antialiased triangle filter (support scaled by the
/// reduction factor, edges clamped to the crop, as PIL does after `crop`). Writes HWC floats
/// in [0, 255] to `out` (out_height * out_width * 3 values). PIL rounds to uint8 between its
/// two passes; this keeps floats, a difference below one grey level.
void resize_crop_bilinear(const std::uint8_t* src, int src_height, int src_width, CropBox box,
                          int out_height, int out_width, float* out);

/// Resizes a whole image to out_height x out_width (antialiased bilinear, rounded to uint8).
Image resize_image(const Image& image, int out_height, int out_width);

/// The size that fits the longer side to `max_side` keeping the aspect ratio (rounded, at
/// least 1); unchanged when the image already fits or max_side <= 0.
void fit_max_side(int height, int width, int max_side, int& out_height, int& out_width);

}  // namespace pets::data
