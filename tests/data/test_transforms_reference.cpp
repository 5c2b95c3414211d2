// The tutorial's transforms against torchvision and PIL on real JPEG files
// (tests/fixtures/transforms, made by make_fixture.py there): our decode against PIL's
// open().convert("RGB"), resize_crop_bilinear + normalize_hwc against torchvision's resized_crop
// with the same boxes, transform_eval against Resize((224, 224)), normalize_hwc against
// Normalize, and the distribution of random_resized_crop_box against RandomResizedCrop.get_params.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "pets/data/augment.hpp"
#include "pets/data/decode.hpp"
#include "pets/data/image.hpp"
#include "pets/data/rng.hpp"
#include "pets/model/safetensors.hpp"

using namespace pets::data;
using pets::model::DType;
using pets::model::SafetensorsFile;
using pets::model::TensorInfo;

namespace {

const std::string kFixtureDir = PETS_SOURCE_DIR "/tests/fixtures/transforms";

// PIL rounds to uint8 after its horizontal pass and again at the end; we keep floats. Each
// rounding is at most half a grey level, so one grey level bounds the difference, and it is
// reached (progressive_420/eval: two horizontal values at exactly x.5, both rounded up, then
// 104.5 rounded up). The slack covers PIL's 22-bit fixed-point weights and our float arithmetic.
constexpr double kOneGreyLevel = 1.0 + 1e-3;

const SafetensorsFile& fixture() {
  static const SafetensorsFile file = SafetensorsFile::open(kFixtureDir + "/expected.safetensors");
  return file;
}

/// An HWC uint8 tensor of the fixture, its size read from the file.
struct U8Image {
  int height = 0;
  int width = 0;
  const std::uint8_t* data = nullptr;
};

U8Image u8_image(const std::string& key) {
  const TensorInfo& info = fixture().at(key);
  if (info.dtype != DType::U8 || info.shape.size() != 3 || info.shape[2] != 3)
    throw std::runtime_error(key + ": expected U8 [height, width, 3]");
  return U8Image{static_cast<int>(info.shape[0]), static_cast<int>(info.shape[1]),
                 fixture().data(info)};
}

/// The JPEG files of the fixture: every key "<name>/decoded".
std::vector<std::string> file_names() {
  std::vector<std::string> names;
  const std::string suffix = "/decoded";
  for (const TensorInfo& t : fixture().tensors())
    if (t.name.size() > suffix.size() &&
        t.name.compare(t.name.size() - suffix.size(), suffix.size(), suffix) == 0)
      names.push_back(t.name.substr(0, t.name.size() - suffix.size()));
  return names;
}

Image decode(const std::string& name) {
  Decoder decoder;
  DecodeOptions options;
  options.max_side = 0;  // full size, as PIL opens it
  DecodeResult r = decoder.decode_file(kFixtureDir + "/" + name + ".jpg", options);
  if (!r.ok) throw std::runtime_error(name + ".jpg: " + r.reason);
  return std::move(r.image);
}

/// The largest difference of a normalised HWC output from torchvision's uint8 result
/// normalised, in grey levels (value difference times 255 * std of the channel).
struct Worst {
  double grey = 0;
  int y = 0, x = 0, c = 0;
  double ours = 0;  // grey levels, before normalisation
  int theirs = 0;

  std::string str() const {
    char buf[160];
    std::snprintf(buf, sizeof buf,
                  "%.4f grey levels at (y %d, x %d, c %d): ours %.4f, torchvision %d", grey, y, x,
                  c, ours, theirs);
    return buf;
  }
};

Worst compare_normalized(const float* ours, const U8Image& expected) {
  Worst worst;
  for (int y = 0; y < expected.height; ++y)
    for (int x = 0; x < expected.width; ++x)
      for (int c = 0; c < 3; ++c) {
        const std::size_t i = (static_cast<std::size_t>(y) * expected.width + x) * 3 + c;
        const double grey_ours = (ours[i] * kStd[c] + kMean[c]) * 255.0;
        const double grey = std::fabs(grey_ours - expected.data[i]);
        if (grey > worst.grey) worst = Worst{grey, y, x, c, grey_ours, expected.data[i]};
      }
  return worst;
}

std::vector<int> crop_box(const std::string& key) {
  const TensorInfo& info = fixture().at(key);
  if (info.dtype != DType::I32 || info.numel() != 4)
    throw std::runtime_error(key + ": expected I32 [4]");
  std::vector<int> box(4);
  std::memcpy(box.data(), fixture().data(info), sizeof(std::int32_t) * 4);
  return box;
}

}  // namespace

TEST(TransformsReference, FixtureHasEveryKind) {
  // landscape 4:2:0, portrait 4:4:4, small 4:2:2, greyscale, progressive: a missing file would
  // let the tests below pass on fewer cases.
  EXPECT_EQ(file_names().size(), 5u);
  for (const std::string& name : file_names()) {
    EXPECT_NE(fixture().find(name + "/eval"), nullptr) << name;
    EXPECT_NE(fixture().find(name + "/crop4"), nullptr) << name;
  }
}

TEST(TransformsReference, DecodeMatchesPil) {
  for (const std::string& name : file_names()) {
    const Image ours = decode(name);
    const U8Image pil = u8_image(name + "/decoded");
    ASSERT_EQ(ours.height, pil.height) << name;
    ASSERT_EQ(ours.width, pil.width) << name;
    int worst = 0;
    std::size_t worst_at = 0, differing = 0;
    for (std::size_t i = 0; i < ours.pixels.size(); ++i) {
      const int d = std::abs(static_cast<int>(ours.pixels[i]) - pil.data[i]);
      differing += d != 0;
      if (d > worst) worst = d, worst_at = i;
    }
    std::printf("decode %-16s %dx%d: worst %d grey levels, %zu of %zu values differ\n",
                name.c_str(), ours.height, ours.width, worst, differing, ours.pixels.size());
    EXPECT_LE(worst, 1) << name << ": value " << worst_at << " (y " << worst_at / 3 / ours.width
                        << ", x " << worst_at / 3 % ours.width << ", c " << worst_at % 3
                        << ") ours " << int(ours.pixels[worst_at]) << ", PIL "
                        << int(pil.data[worst_at]);
  }
}

TEST(TransformsReference, CropsMatchTorchvisionResizedCrop) {
  int cases = 0;
  for (const std::string& name : file_names()) {
    const Image image = decode(name);
    for (int k = 0; fixture().find(name + "/crop" + std::to_string(k)) != nullptr; ++k) {
      const std::string key = name + "/crop" + std::to_string(k);
      const U8Image expected = u8_image(key);
      const std::vector<int> b = crop_box(key + "/box");
      const CropBox box{b[0], b[1], b[2], b[3]};
      // transform_train's path once its box is drawn.
      std::vector<float> out(static_cast<std::size_t>(expected.height) * expected.width * 3);
      resize_crop_bilinear(image.pixels.data(), image.height, image.width, box, expected.height,
                           expected.width, out.data());
      normalize_hwc(out.data(), expected.height, expected.width, out.data());
      const Worst worst = compare_normalized(out.data(), expected);
      std::printf("%-24s box %3d,%3d %3dx%3d -> %3dx%3d: %s\n", key.c_str(), box.top, box.left,
                  box.height, box.width, expected.height, expected.width, worst.str().c_str());
      EXPECT_LE(worst.grey, kOneGreyLevel) << key << ": " << worst.str();
      ++cases;
    }
  }
  EXPECT_EQ(cases, 25);
}

TEST(TransformsReference, EvalMatchesTorchvisionResize) {
  for (const std::string& name : file_names()) {
    const U8Image expected = u8_image(name + "/eval");
    ASSERT_EQ(expected.height, expected.width);
    const Image image = decode(name);
    std::vector<float> out(static_cast<std::size_t>(expected.height) * expected.width * 3);
    transform_eval(image, expected.height, out.data());
    const Worst worst = compare_normalized(out.data(), expected);
    std::printf("%-24s %3dx%3d -> %3dx%3d: %s\n", (name + "/eval").c_str(), image.height,
                image.width, expected.height, expected.width, worst.str().c_str());
    EXPECT_LE(worst.grey, kOneGreyLevel) << name << "/eval: " << worst.str();
  }
}

TEST(TransformsReference, NormalisationMatchesTorchvisionNormalize) {
  // torchvision's Normalize(mean, std)(ToTensor(pil)) in CHW against normalize_hwc of the same
  // uint8 pixels in HWC: the arithmetic alone, no resampling.
  const U8Image pixels = u8_image("small_422/crop3");
  const TensorInfo& info = fixture().at("small_422/crop3/normalized");
  ASSERT_EQ(info.dtype, DType::F32);
  ASSERT_EQ(info.shape, (std::vector<std::int64_t>{3, pixels.height, pixels.width}));
  std::vector<float> chw(static_cast<std::size_t>(info.numel()));
  std::memcpy(chw.data(), fixture().data(info), chw.size() * sizeof(float));
  const std::size_t plane = static_cast<std::size_t>(pixels.height) * pixels.width;
  std::vector<float> hwc(plane * 3);
  for (std::size_t i = 0; i < hwc.size(); ++i) hwc[i] = pixels.data[i];
  normalize_hwc(hwc.data(), pixels.height, pixels.width, hwc.data());
  double worst = 0;
  for (std::size_t p = 0; p < plane; ++p)
    for (int c = 0; c < 3; ++c)
      worst = std::max(worst, std::fabs(static_cast<double>(hwc[p * 3 + c]) - chw[c * plane + p]));
  std::printf("normalize_hwc vs Normalize: worst %.3g\n", worst);
  // A few float32 ulps of values up to ~2.6; a wrong mean or std is off by > 1e-3.
  EXPECT_LT(worst, 2e-6);
}

TEST(TransformsReference, CropBoxDistributionMatchesGetParams) {
  // The draws are ours, not torch's: only the distribution of boxes must agree. Per image
  // shape, the same number of boxes as the script drew; each statistic's mean and std must lie
  // within kSigmas standard errors of torchvision's (the std's standard error from the fourth
  // central moment, sqrt((m4 - s^4) / n) / (2 s)).
  constexpr double kSigmas = 4.0;
  const int n = std::stoi(fixture().metadata().at("rrc_draws"));
  const char* const names[] = {"area_fraction", "log_aspect", "top_over_height", "left_over_width",
                               "fallback"};
  constexpr int kStats = 5;
  int shapes = 0;
  for (const TensorInfo& info : fixture().tensors()) {
    int height = 0, width = 0;
    if (std::sscanf(info.name.c_str(), "rrc/%dx%d", &height, &width) != 2) continue;
    if (info.name != "rrc/" + std::to_string(height) + "x" + std::to_string(width)) continue;
    ++shapes;
    ASSERT_EQ(info.dtype, DType::F64);
    ASSERT_EQ(info.shape, (std::vector<std::int64_t>{kStats, 3}));
    std::vector<double> theirs(kStats * 3);
    std::memcpy(theirs.data(), fixture().data(info), theirs.size() * sizeof(double));

    // The fallback box is torchvision's centre crop; ours is what no successful attempt gives.
    CropParams no_attempts;
    no_attempts.attempts = 0;
    Rng unused(0);
    const CropBox fallback = random_resized_crop_box(height, width, unused, no_attempts);
    const std::vector<int> tv_fallback = crop_box(info.name + "/fallback");
    EXPECT_EQ((std::vector<int>{fallback.top, fallback.left, fallback.height, fallback.width}),
              tv_fallback)
        << info.name;

    Rng rng(
        mix_seed({2024, static_cast<std::uint64_t>(height), static_cast<std::uint64_t>(width)}));
    std::vector<double> values(static_cast<std::size_t>(n) * kStats);
    for (int i = 0; i < n; ++i) {
      const CropBox b = random_resized_crop_box(height, width, rng);
      double* v = &values[static_cast<std::size_t>(i) * kStats];
      v[0] = static_cast<double>(b.height) * b.width / (static_cast<double>(height) * width);
      v[1] = std::log(static_cast<double>(b.width) / b.height);
      v[2] = static_cast<double>(b.top) / height;
      v[3] = static_cast<double>(b.left) / width;
      v[4] = b.top == fallback.top && b.left == fallback.left && b.height == fallback.height &&
                     b.width == fallback.width
                 ? 1.0
                 : 0.0;
    }
    for (int s = 0; s < kStats; ++s) {
      double mean = 0, m2 = 0, m4 = 0;
      for (int i = 0; i < n; ++i) mean += values[static_cast<std::size_t>(i) * kStats + s];
      mean /= n;
      for (int i = 0; i < n; ++i) {
        const double d = values[static_cast<std::size_t>(i) * kStats + s] - mean;
        m2 += d * d;
        m4 += d * d * d * d;
      }
      m2 /= n;
      m4 /= n;
      const double sd = std::sqrt(m2);
      const double tv_mean = theirs[s * 3], tv_sd = theirs[s * 3 + 1], tv_m4 = theirs[s * 3 + 2];
      const double se_mean = std::sqrt((m2 + tv_sd * tv_sd) / n);
      auto se_sd_one = [n](double m4_, double sd_) {
        return sd_ > 0 ? std::sqrt(std::max(m4_ - sd_ * sd_ * sd_ * sd_, 0.0) / n) / (2 * sd_) : 0;
      };
      const double se_sd = std::hypot(se_sd_one(m4, sd), se_sd_one(tv_m4, tv_sd));
      std::printf("%-12s %-16s mean %.4f vs %.4f (%+.1f se), std %.4f vs %.4f (%+.1f se)\n",
                  info.name.c_str(), names[s], mean, tv_mean,
                  se_mean > 0 ? (mean - tv_mean) / se_mean : 0.0, sd, tv_sd,
                  se_sd > 0 ? (sd - tv_sd) / se_sd : 0.0);
      EXPECT_LE(std::fabs(mean - tv_mean), kSigmas * se_mean + 1e-12)
          << info.name << " " << names[s] << " mean " << mean << " vs torchvision " << tv_mean;
      EXPECT_LE(std::fabs(sd - tv_sd), kSigmas * se_sd + 1e-12)
          << info.name << " " << names[s] << " std " << sd << " vs torchvision " << tv_sd;
    }
  }
  EXPECT_EQ(shapes, 3);
}
