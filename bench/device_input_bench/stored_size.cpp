/// \file
/// device_input_bench's stored_size section: per candidate longer side, where RandomResizedCrop's
/// boxes fall, the bytes stored and uploaded, the per-image costs of both paths, and the 224
/// output's change against cropping from a 1536 x 1152 original.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <utility>
#include <vector>

#include "harness.hpp"
#include "pets/data/augment.hpp"
#include "pets/data/image.hpp"
#include "pets/data/rng.hpp"
#include "pets/testdata/synth.hpp"

namespace pets::device_input_bench {

using pets::data::CropBox;
using pets::data::Image;

namespace {

/// Multi-octave value noise with amplitude proportional to the feature size: a 1/f amplitude
/// spectrum, the usual model of natural photographs' statistics.
Image natural_noise(int height, int width, std::uint64_t seed) {
  std::vector<float> acc(static_cast<std::size_t>(height) * width * 3, 0.0f);
  pets::data::Rng rng(seed);
  float total = 0;
  for (int cell = 2; cell <= 512; cell *= 2) {
    const int gh = height / cell + 2, gw = width / cell + 2;
    std::vector<float> grid(static_cast<std::size_t>(gh) * gw * 3);
    for (auto& g : grid) g = static_cast<float>(rng.uniform(-1, 1));
    const float amp = static_cast<float>(cell);
    total += amp;
    for (int y = 0; y < height; ++y) {
      const float fy = static_cast<float>(y) / cell;
      const int y0 = static_cast<int>(fy);
      const float ty = fy - y0;
      for (int x = 0; x < width; ++x) {
        const float fx = static_cast<float>(x) / cell;
        const int x0 = static_cast<int>(fx);
        const float tx = fx - x0;
        for (int ch = 0; ch < 3; ++ch) {
          auto g = [&](int yy, int xx) {
            return grid[(static_cast<std::size_t>(yy) * gw + xx) * 3 + ch];
          };
          const float v = (1 - ty) * ((1 - tx) * g(y0, x0) + tx * g(y0, x0 + 1)) +
                          ty * ((1 - tx) * g(y0 + 1, x0) + tx * g(y0 + 1, x0 + 1));
          acc[(static_cast<std::size_t>(y) * width + x) * 3 + ch] += amp * v;
        }
      }
    }
  }
  Image img;
  img.height = height;
  img.width = width;
  img.pixels.resize(acc.size());
  for (std::size_t i = 0; i < acc.size(); ++i)
    img.pixels[i] = static_cast<std::uint8_t>(
        std::clamp(std::lround(128.0f + 200.0f * acc[i] / total), 0L, 255L));
  return img;
}

/// Where RandomResizedCrop's boxes fall on a height x width stored image.
json crop_distribution(int height, int width, const Config& c) {
  pets::data::Rng rng(pets::data::mix_seed(
      {static_cast<std::uint64_t>(height), static_cast<std::uint64_t>(width), 99}));
  std::vector<int> shorter;
  std::int64_t upscaled_any = 0, upscaled_both = 0;
  double bytes = 0;
  for (int i = 0; i < c.boxes; ++i) {
    const CropBox b = pets::data::random_resized_crop_box(height, width, rng);
    shorter.push_back(std::min(b.height, b.width));
    upscaled_any += std::min(b.height, b.width) < c.size;
    upscaled_both += std::max(b.height, b.width) < c.size;
    bytes += 3.0 * b.height * b.width;
  }
  std::sort(shorter.begin(), shorter.end());
  auto pct = [&](double p) { return shorter[static_cast<std::size_t>(p * (shorter.size() - 1))]; };
  return json{{"upscaled_share", static_cast<double>(upscaled_any) / c.boxes},
              {"upscaled_both_sides_share", static_cast<double>(upscaled_both) / c.boxes},
              {"shorter_side_min", shorter.front()},
              {"shorter_side_p05", pct(0.05)},
              {"shorter_side_p50", pct(0.5)},
              {"mean_crop_bytes", bytes / c.boxes}};
}

/// The 224 output from an image stored at `side` against the one from the original: the box is
/// drawn on the stored image, snapped to a grid that maps exactly onto original pixels, and both
/// crops are resized with the CPU path's filter. |diff| in grey levels over every output value.
json fidelity(const Image& original, int side, const Config& c) {
  const int oh = original.height, ow = original.width;  // 1152 x 1536
  const int sh = oh * side / ow, sw = side;
  const Image stored = (sw == ow) ? original : pets::data::resize_image(original, sh, sw);
  // stored pixel k covers original pixels [k * ow / sw, (k + 1) * ow / sw): exact at multiples
  // of q = sw / gcd(ow, sw).
  int g = ow, r = sw;
  while (r) std::swap(g, r), r %= g;
  const int q = sw / g, p = ow / g;
  pets::data::Rng rng(pets::data::mix_seed({static_cast<std::uint64_t>(side), 5}));
  std::vector<float> a(3 * static_cast<std::size_t>(c.size) * c.size), b(a.size());
  std::vector<double> diffs;
  diffs.reserve(a.size() * c.fidelity_boxes);
  for (int k = 0; k < c.fidelity_boxes; ++k) {
    CropBox box = pets::data::random_resized_crop_box(sh, sw, rng);
    auto snap = [q](int v) { return v / q * q; };
    box.top = snap(box.top);
    box.left = snap(box.left);
    box.height = std::max(q, snap(box.height));
    box.width = std::max(q, snap(box.width));
    const CropBox obox{box.top / q * p, box.left / q * p, box.height / q * p, box.width / q * p};
    pets::data::resize_crop_bilinear(stored.pixels.data(), sh, sw, box, c.size, c.size, a.data());
    pets::data::resize_crop_bilinear(original.pixels.data(), oh, ow, obox, c.size, c.size,
                                     b.data());
    for (std::size_t i = 0; i < a.size(); ++i) diffs.push_back(std::fabs(a[i] - b[i]));
  }
  double sum = 0;
  for (double d : diffs) sum += d;
  std::sort(diffs.begin(), diffs.end());
  return json{{"mean_abs_grey", sum / diffs.size()},
              {"p999_abs_grey", diffs[static_cast<std::size_t>(0.999 * (diffs.size() - 1))]}};
}

}  // namespace

json stored_size_section(const Config& c) {
  const Image pets_like = pets::testdata::render_synthetic_image(5, 11, 0, 1152, 1536);
  const Image natural = natural_noise(1152, 1536, 17);
  json sizes = json::array();
  std::fprintf(
      stderr,
      "stored_size (crops upscaled: shorter side < %d; costs on a 4:3, 3:2, 3:4 mix; |diff| "
      "vs a 1536 x 1152 original, grey levels, pets-like / 1-over-f):\n",
      c.size);
  for (int side : c.sides) {
    json row;
    row["side"] = side;
    // The Oxford pets are mostly 4:3 (500 x 375) and 3:2 (500 x 333), either way round.
    row["crops_4x3"] = crop_distribution(side * 3 / 4, side, c);
    row["crops_3x2"] = crop_distribution(static_cast<int>(std::lround(side * 2.0 / 3.0)), side, c);
    row["crops_1x1"] = crop_distribution(side, side, c);
    const json costs = path_costs(stored_images(side, c.images), c);
    row["costs"] = costs;
    row["fidelity_pets_like"] = fidelity(pets_like, side, c);
    row["fidelity_natural"] = fidelity(natural, side, c);
    std::fprintf(
        stderr,
        "  L=%4d upscaled 4:3 %5.1f%% 3:2 %5.1f%% 1:1 %5.1f%% (min side 4:3 %3d)  stored %6.0f B  "
        "crop %6.0f B  cpu %6.1f us  host %5.1f us  read %5.1f us  |diff| %.2f/%.2f "
        "(p99.9 %.1f/%.1f)\n",
        side, 100 * row["crops_4x3"]["upscaled_share"].get<double>(),
        100 * row["crops_3x2"]["upscaled_share"].get<double>(),
        100 * row["crops_1x1"]["upscaled_share"].get<double>(),
        row["crops_4x3"]["shorter_side_min"].get<int>(), costs["mean_stored_bytes"].get<double>(),
        costs["mean_crop_bytes"].get<double>(), costs["cpu_path"]["us_best"].get<double>(),
        costs["device_path_host"]["us_best"].get<double>(),
        costs["read_proxy"]["us_best"].get<double>(),
        row["fidelity_pets_like"]["mean_abs_grey"].get<double>(),
        row["fidelity_natural"]["mean_abs_grey"].get<double>(),
        row["fidelity_pets_like"]["p999_abs_grey"].get<double>(),
        row["fidelity_natural"]["p999_abs_grey"].get<double>());
    sizes.push_back(row);
  }
  return sizes;
}

}  // namespace pets::device_input_bench
