#include "pets/data/augment.hpp"

#include <algorithm>
#include <cmath>

#include "pets/util/error.hpp"

namespace pets::data {

namespace {
/// Python's round(): half to even (nearbyint in the default rounding mode).
int py_round(double v) { return static_cast<int>(std::nearbyint(v)); }

int randint(const std::function<double()>& u, int lo, int hi) {
  const int span = hi - lo;
  return lo + std::min(static_cast<int>(std::floor(u() * span)), span - 1);
}
}  // namespace

CropBox random_resized_crop_box(int height, int width, const std::function<double()>& uniform01,
                                const CropParams& p) {
  PETS_CHECK(height > 0 && width > 0, "random_resized_crop_box: empty image");
  const double area = static_cast<double>(height) * width;
  const double log_lo = std::log(p.ratio_min), log_hi = std::log(p.ratio_max);
  for (int attempt = 0; attempt < p.attempts; ++attempt) {
    const double target = area * (p.scale_min + (p.scale_max - p.scale_min) * uniform01());
    const double aspect = std::exp(log_lo + (log_hi - log_lo) * uniform01());
    const int w = py_round(std::sqrt(target * aspect));
    const int h = py_round(std::sqrt(target / aspect));
    if (w > 0 && w <= width && h > 0 && h <= height) {
      const int top = randint(uniform01, 0, height - h + 1);
      const int left = randint(uniform01, 0, width - w + 1);
      return CropBox{top, left, h, w};
    }
  }
  const double in_ratio = static_cast<double>(width) / height;
  int w = width, h = height;
  if (in_ratio < p.ratio_min) {
    h = py_round(w / p.ratio_min);
  } else if (in_ratio > p.ratio_max) {
    w = py_round(h * p.ratio_max);
  }
  return CropBox{(height - h) / 2, (width - w) / 2, h, w};
}

CropBox random_resized_crop_box(int height, int width, Rng& rng, const CropParams& params) {
  return random_resized_crop_box(
      height, width, [&rng] { return rng.uniform(); }, params);
}

void normalize_hwc(const float* hwc, int height, int width, float* out) {
  float scale[3], shift[3];
  for (int c = 0; c < 3; ++c) {
    scale[c] = 1.0f / (255.0f * kStd[c]);
    shift[c] = kMean[c] / kStd[c];
  }
  const std::size_t pixels = static_cast<std::size_t>(height) * width;
  for (std::size_t i = 0; i < pixels; ++i)
    for (int c = 0; c < 3; ++c) out[i * 3 + c] = hwc[i * 3 + c] * scale[c] - shift[c];
}

void transform_train(const Image& image, Rng& rng, int size, float* out, const CropParams& params) {
  const CropBox box = random_resized_crop_box(image.height, image.width, rng, params);
  resize_crop_bilinear(image.pixels.data(), image.height, image.width, box, size, size, out);
  normalize_hwc(out, size, size, out);
}

void transform_eval(const Image& image, int size, float* out) {
  resize_crop_bilinear(image.pixels.data(), image.height, image.width,
                       CropBox{0, 0, image.height, image.width}, size, size, out);
  normalize_hwc(out, size, size, out);
}

}  // namespace pets::data
