#include <algorithm>
#include <cmath>

#include "pets/data/image.hpp"
#include "pets/util/error.hpp"

namespace pets::data {

ResizeTaps bilinear_taps(int in_size, int out_size) {
  PETS_CHECK(in_size > 0 && out_size > 0, "bilinear_taps: empty size");
  const double scale = static_cast<double>(in_size) / out_size;
  const double filter_scale = std::max(scale, 1.0);
  const double support = 1.0 * filter_scale;  // the triangle filter has support 1
  ResizeTaps taps;
  taps.max_taps = static_cast<int>(std::ceil(support)) * 2 + 1;
  taps.first.resize(static_cast<std::size_t>(out_size));
  taps.count.resize(static_cast<std::size_t>(out_size));
  taps.weight.assign(static_cast<std::size_t>(out_size) * taps.max_taps, 0.0f);
  std::vector<double> w(static_cast<std::size_t>(taps.max_taps));
  for (int o = 0; o < out_size; ++o) {
    const double center = (o + 0.5) * scale;
    // PIL truncates with a C cast here; keep it for the same tap ranges.
    const int lo = std::max(static_cast<int>(center - support + 0.5), 0);
    const int hi = std::min(static_cast<int>(center + support + 0.5), in_size);
    const int n = std::min(hi - lo, taps.max_taps);
    double sum = 0.0;
    for (int k = 0; k < n; ++k) {
      const double x = (k + lo - center + 0.5) / filter_scale;
      const double v = std::fabs(x) < 1.0 ? 1.0 - std::fabs(x) : 0.0;
      w[static_cast<std::size_t>(k)] = v;
      sum += v;
    }
    taps.first[static_cast<std::size_t>(o)] = lo;
    taps.count[static_cast<std::size_t>(o)] = n;
    for (int k = 0; k < n; ++k)
      taps.weight[static_cast<std::size_t>(o) * taps.max_taps + k] =
          static_cast<float>(sum > 0 ? w[static_cast<std::size_t>(k)] / sum : 0.0);
  }
  return taps;
}

void resize_crop_bilinear(const std::uint8_t* src, int src_height, int src_width, CropBox box,
                          int out_height, int out_width, float* out) {
  PETS_CHECK(box.height > 0 && box.width > 0 && box.top >= 0 && box.left >= 0 &&
                 box.top + box.height <= src_height && box.left + box.width <= src_width,
             "resize_crop_bilinear: crop box outside the image");
  PETS_CHECK(out_height > 0 && out_width > 0, "resize_crop_bilinear: empty output size");
  const ResizeTaps tx = bilinear_taps(box.width, out_width);
  const ResizeTaps ty = bilinear_taps(box.height, out_height);
  // Horizontal pass over every row of the crop, then vertical (PIL's order).
  std::vector<float> tmp(static_cast<std::size_t>(box.height) * out_width * 3);
  for (int y = 0; y < box.height; ++y) {
    const std::uint8_t* row =
        src + (static_cast<std::size_t>(box.top + y) * src_width + box.left) * 3;
    float* dst = tmp.data() + static_cast<std::size_t>(y) * out_width * 3;
    for (int x = 0; x < out_width; ++x) {
      const float* w = &tx.weight[static_cast<std::size_t>(x) * tx.max_taps];
      const std::uint8_t* p = row + static_cast<std::size_t>(tx.first[x]) * 3;
      float r = 0, g = 0, b = 0;
      for (int k = 0; k < tx.count[x]; ++k, p += 3) {
        r += w[k] * p[0];
        g += w[k] * p[1];
        b += w[k] * p[2];
      }
      dst[x * 3 + 0] = r;
      dst[x * 3 + 1] = g;
      dst[x * 3 + 2] = b;
    }
  }
  const std::size_t row_len = static_cast<std::size_t>(out_width) * 3;
  for (int y = 0; y < out_height; ++y) {
    float* dst = out + static_cast<std::size_t>(y) * row_len;
    std::fill(dst, dst + row_len, 0.0f);
    const float* w = &ty.weight[static_cast<std::size_t>(y) * ty.max_taps];
    for (int k = 0; k < ty.count[y]; ++k) {
      const float* s = tmp.data() + static_cast<std::size_t>(ty.first[y] + k) * row_len;
      const float wk = w[k];
      for (std::size_t i = 0; i < row_len; ++i) dst[i] += wk * s[i];
    }
  }
}

Image resize_image(const Image& image, int out_height, int out_width) {
  std::vector<float> tmp(static_cast<std::size_t>(out_height) * out_width * 3);
  resize_crop_bilinear(image.pixels.data(), image.height, image.width,
                       CropBox{0, 0, image.height, image.width}, out_height, out_width, tmp.data());
  Image out;
  out.height = out_height;
  out.width = out_width;
  out.pixels.resize(tmp.size());
  for (std::size_t i = 0; i < tmp.size(); ++i)
    out.pixels[i] = static_cast<std::uint8_t>(std::clamp(std::lround(tmp[i]), 0L, 255L));
  return out;
}

void fit_max_side(int height, int width, int max_side, int& out_height, int& out_width) {
  out_height = height;
  out_width = width;
  if (max_side <= 0 || std::max(height, width) <= max_side) return;
  if (height >= width) {
    out_height = max_side;
    out_width =
        std::max(1, static_cast<int>(std::lround(static_cast<double>(width) * max_side / height)));
  } else {
    out_width = max_side;
    out_height =
        std::max(1, static_cast<int>(std::lround(static_cast<double>(height) * max_side / width)));
  }
}

}  // namespace pets::data
