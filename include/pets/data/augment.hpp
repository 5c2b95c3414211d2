#pragma once
/// \file
/// The image transforms of the Python pipeline: torchvision's RandomResizedCrop sampling rule
/// (scale (0.5, 1), ratio (3/4, 4/3), 10 attempts, centre-crop fallback), an antialiased
/// bilinear resize, ToTensor's /255 and the model's mean/std normalisation.

#include <cstdint>
#include <functional>

#include "pets/data/image.hpp"
#include "pets/data/rng.hpp"

namespace pets::data {

/// RandomResizedCrop's parameters.
struct CropParams {
  double scale_min = 0.5;
  double scale_max = 1.0;
  double ratio_min = 3.0 / 4.0;
  double ratio_max = 4.0 / 3.0;
  int attempts = 10;
};

/// torchvision's RandomResizedCrop.get_params with `uniform01` as the source of U[0, 1)
/// numbers: per attempt, area fraction = U(scale), log aspect = U(log ratio),
/// w = round(sqrt(area * aspect)), h = round(sqrt(area / aspect)) (round half to even, as
/// Python), accepted when 0 < w <= width and 0 < h <= height, then top = randint(0, H - h + 1),
/// left = randint(0, W - w + 1) (randint(lo, hi) = lo + floor(U * (hi - lo))); after
/// `attempts` misses the centre crop clamped to the ratio range. The random numbers are ours,
/// not torch's generator, so boxes match the rule but not torch's exact draws.
CropBox random_resized_crop_box(int height, int width, const std::function<double()>& uniform01,
                                const CropParams& params = {});

/// The same with an Rng.
CropBox random_resized_crop_box(int height, int width, Rng& rng, const CropParams& params = {});

/// ImageNet statistics of resnet50d.ra2_in1k.
inline constexpr float kMean[3] = {0.485f, 0.456f, 0.406f};
inline constexpr float kStd[3] = {0.229f, 0.224f, 0.225f};

/// HWC floats in [0, 255] to normalised HWC, (v / 255 - mean) / std per channel: the
/// channels-last layout the model consumes, so batches need no transposition. `out` may be
/// `hwc` (in place).
void normalize_hwc(const float* hwc, int height, int width, float* out);

/// Train transform: random crop box, resize to size x size, normalise. Writes 3*size*size
/// floats (HWC) to `out`.
void transform_train(const Image& image, Rng& rng, int size, float* out,
                     const CropParams& params = {});

/// Eval transform: Resize((size, size)) of the whole image (aspect not kept), normalise. Writes
/// 3*size*size floats (HWC) to `out`.
void transform_eval(const Image& image, int size, float* out);

}  // namespace pets::data
