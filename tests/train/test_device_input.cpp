// The GPU input path's tensor code (pets/train/device_input) run on the CPU device against the
// CPU loader's transforms: the same boxes, the same images, the same tensors within a stated
// tolerance; and the layout, shapes and dtypes the model takes.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "pets/data/augment.hpp"
#include "pets/data/image.hpp"
#include "pets/data/rng.hpp"
#include "pets/testdata/synth.hpp"
#include "pets/train/device_input.hpp"
#include "pets/util/error.hpp"

using pets::data::CropBox;
using pets::data::Image;
using pets::train::CropSource;
using pets::train::DeviceInput;
using pets::train::HostCrops;

namespace {

constexpr int kSize = 224;

// Tolerances of the device path against the CPU path, in normalised units (one grey level is
// 1 / (255 * std) = 0.0153 to 0.0175). Both resize with the same triangle filter, the same tap
// ranges (PIL's truncating rule, which torch's antialias kernel copies) and normalised weights,
// and normalise with the same float multiply-add; they differ only in rounding: the CPU path
// computes sample centres and weights in double, torch in float (a centre near 1000 px is off by
// up to ~1e-4 px, which on per-pixel noise moves a value by a few thousandths of a grey level),
// and the summation orders differ. Measured over these 80 crops with Debian's LibTorch 1.13
// (CPU): max |diff| 7.1e-5 (train) and 6.8e-5 (eval); mean |diff| over all crops 1.8e-6 and
// 1.9e-6, over one crop at most 5.3e-6 and 4.7e-6. The bounds are about twice that, still a
// hundred times below one grey level, so a one-pixel shift or a missing antialias filter (each
// 0.01 or more; ToleranceDetectsAShiftOrAMissingAntialias) fails them.
constexpr double kMaxAbs = pets::train::kInputMaxAbsDiff;            ///< any value
constexpr double kCropMeanAbs = pets::train::kInputCropMeanAbsDiff;  ///< mean over one crop
constexpr double kMeanAbs = pets::train::kInputMeanAbsDiff;  ///< mean over all crops of a test

/// Pets-like content (edges, texture, noise) of any size.
Image synthetic(int height, int width, std::int64_t index) {
  return pets::testdata::render_synthetic_image(static_cast<int>(index % 37), 7, index, height,
                                                width);
}

/// Per-pixel uniform noise: the hardest case for a filter (all frequencies up to Nyquist).
Image noise(int height, int width, std::uint64_t seed) {
  Image img;
  img.height = height;
  img.width = width;
  img.pixels.resize(static_cast<std::size_t>(height) * width * 3);
  pets::data::Rng rng(seed);
  for (auto& p : img.pixels) p = static_cast<std::uint8_t>(rng.randint(0, 256));
  return img;
}

/// Stored-image shapes: square, landscape, portrait, odd sides, a strip that forces
/// RandomResizedCrop's centre fallback, small ones whose crops are upscaled to 224, and large
/// ones whose crops are reduced by more than 2x (a crop of at least half the area of 1100x900
/// is at least ~600 px a side).
struct Shape {
  int height, width;
};
const std::vector<Shape>& shapes() {
  static const std::vector<Shape> s = {{512, 384}, {384, 512},  {333, 517},  {97, 131},
                                       {150, 113}, {1100, 900}, {901, 1203}, {60, 400},
                                       {225, 224}, {511, 511}};
  return s;
}

std::vector<Image> test_images() {
  std::vector<Image> images;
  std::int64_t k = 0;
  for (const Shape& s : shapes()) {
    images.push_back(synthetic(s.height, s.width, k++));
    images.push_back(noise(s.height, s.width, static_cast<std::uint64_t>(k++)));
  }
  return images;
}

struct Diff {
  double max_abs = 0;
  double mean_abs = 0;
};

/// Compares image i of a [n, 3, s, s] tensor (any memory format) with an HWC float array, the
/// CPU transforms' layout.
Diff compare(const at::Tensor& batch, std::int64_t i, const std::vector<float>& hwc) {
  const at::Tensor got = batch[i].permute({1, 2, 0}).to(torch::kFloat32).contiguous();
  const float* g = got.data_ptr<float>();
  Diff d;
  for (std::size_t k = 0; k < hwc.size(); ++k) {
    const double e = std::fabs(static_cast<double>(g[k]) - hwc[k]);
    d.max_abs = std::max(d.max_abs, e);
    d.mean_abs += e;
  }
  d.mean_abs /= static_cast<double>(hwc.size());
  return d;
}

std::string describe(const Image& img, const CropBox& box) {
  return std::to_string(img.height) + "x" + std::to_string(img.width) + " box " +
         std::to_string(box.top) + "," + std::to_string(box.left) + "," +
         std::to_string(box.height) + "x" + std::to_string(box.width);
}

}  // namespace

TEST(DeviceInput, TrainCropsMatchTransformTrain) {
  const std::vector<Image> images = test_images();
  DeviceInput input(torch::kCPU, kSize);
  double worst = 0, mean_sum = 0, worst_mean = 0;
  int compared = 0;
  bool saw_upscale = false, saw_big_reduction = false;
  for (std::uint64_t round = 0; round < 3; ++round) {
    std::vector<CropSource> sources;
    std::vector<std::vector<float>> expected;
    for (std::size_t i = 0; i < images.size(); ++i) {
      const std::uint64_t seed = pets::data::mix_seed({round, i});
      // The CPU path draws its box from the same stream first: equal seeds, equal boxes.
      pets::data::Rng cpu_rng(seed), box_rng(seed);
      expected.emplace_back(3 * kSize * kSize);
      pets::data::transform_train(images[i], cpu_rng, kSize, expected.back().data());
      const CropBox box =
          pets::data::random_resized_crop_box(images[i].height, images[i].width, box_rng);
      sources.push_back(CropSource{&images[i], box});
      saw_upscale |= std::min(box.height, box.width) < kSize;
      saw_big_reduction |= std::min(box.height, box.width) > 2 * kSize;
    }
    // One batch of every size at once: the packing and per-crop offsets are exercised too.
    const at::Tensor out = input(input.stage(sources));
    ASSERT_EQ(out.size(0), static_cast<std::int64_t>(images.size()));
    for (std::size_t i = 0; i < images.size(); ++i) {
      const Diff d = compare(out, static_cast<std::int64_t>(i), expected[i]);
      EXPECT_LE(d.max_abs, kMaxAbs) << describe(images[i], sources[i].box);
      EXPECT_LE(d.mean_abs, kCropMeanAbs) << describe(images[i], sources[i].box);
      worst = std::max(worst, d.max_abs);
      worst_mean = std::max(worst_mean, d.mean_abs);
      mean_sum += d.mean_abs;
      ++compared;
    }
  }
  EXPECT_LE(mean_sum / compared, kMeanAbs);
  EXPECT_TRUE(saw_upscale);
  EXPECT_TRUE(saw_big_reduction);
  std::printf("train: max |diff| %.3g, mean |diff| %.3g (largest of one crop %.3g) over %d crops\n",
              worst, mean_sum / compared, worst_mean, compared);
}

TEST(DeviceInput, WholeImagesMatchTransformEval) {
  const std::vector<Image> images = test_images();
  DeviceInput input(torch::kCPU, kSize);
  std::vector<CropSource> sources;
  for (const Image& img : images)
    sources.push_back(CropSource{&img, {0, 0, img.height, img.width}});
  const at::Tensor out = input(input.stage(sources));
  double worst = 0, mean_sum = 0, worst_mean = 0;
  for (std::size_t i = 0; i < images.size(); ++i) {
    std::vector<float> expected(3 * kSize * kSize);
    pets::data::transform_eval(images[i], kSize, expected.data());
    const Diff d = compare(out, static_cast<std::int64_t>(i), expected);
    EXPECT_LE(d.max_abs, kMaxAbs) << describe(images[i], sources[i].box);
    EXPECT_LE(d.mean_abs, kCropMeanAbs) << describe(images[i], sources[i].box);
    worst = std::max(worst, d.max_abs);
    worst_mean = std::max(worst_mean, d.mean_abs);
    mean_sum += d.mean_abs;
  }
  std::printf(
      "eval: max |diff| %.3g, mean |diff| %.3g (largest of one image %.3g) over %zu images\n",
      worst, mean_sum / static_cast<double>(images.size()), worst_mean, images.size());
}

TEST(DeviceInput, ToleranceDetectsAShiftOrAMissingAntialias) {
  // The bounds must be able to fail: the same crop moved by one source pixel, or resized without
  // the antialias filter, differs from the CPU result by far more.
  const Image img = synthetic(600, 700, 3);
  const CropBox box{20, 30, 500, 560}, moved{21, 30, 500, 560};
  std::vector<float> expected(3 * kSize * kSize);
  pets::data::resize_crop_bilinear(img.pixels.data(), img.height, img.width, box, kSize, kSize,
                                   expected.data());
  pets::data::normalize_hwc(expected.data(), kSize, kSize, expected.data());
  DeviceInput input(torch::kCPU, kSize);
  const HostCrops staged = input.stage({CropSource{&img, box}});
  const at::Tensor same = input(staged);
  const at::Tensor shifted = input(input.stage({CropSource{&img, moved}}));
  EXPECT_LE(compare(same, 0, expected).max_abs, kMaxAbs);
  EXPECT_LE(compare(same, 0, expected).mean_abs, kCropMeanAbs);
  EXPECT_GT(compare(shifted, 0, expected).max_abs, 100 * kMaxAbs);
  EXPECT_GT(compare(shifted, 0, expected).mean_abs, 100 * kCropMeanAbs);

  namespace F = torch::nn::functional;
  const at::Tensor crop =
      staged.bytes.to(torch::kFloat32).view({1, box.height, box.width, 3}).permute({0, 3, 1, 2});
  const at::Tensor plain = F::interpolate(crop, F::InterpolateFuncOptions()
                                                    .size(std::vector<std::int64_t>{kSize, kSize})
                                                    .mode(torch::kBilinear)
                                                    .align_corners(false));
  const at::Tensor scale =
      torch::tensor({1 / (255 * pets::data::kStd[0]), 1 / (255 * pets::data::kStd[1]),
                     1 / (255 * pets::data::kStd[2])})
          .view({1, 3, 1, 1});
  const at::Tensor shift = torch::tensor({pets::data::kMean[0] / pets::data::kStd[0],
                                          pets::data::kMean[1] / pets::data::kStd[1],
                                          pets::data::kMean[2] / pets::data::kStd[2]})
                               .view({1, 3, 1, 1});
  const at::Tensor aliased = plain * scale - shift;
  EXPECT_GT(compare(aliased, 0, expected).max_abs, 100 * kMaxAbs);
  EXPECT_GT(compare(aliased, 0, expected).mean_abs, 100 * kCropMeanAbs);
}

TEST(DeviceInput, ChannelsLastShapesAndDtypes) {
  const Image a = synthetic(200, 300, 1), b = synthetic(301, 157, 2);
  const std::vector<CropSource> sources = {{&a, {10, 20, 150, 200}}, {&b, {0, 0, 301, 157}}};
  DeviceInput fp32(torch::kCPU, 64);
  EXPECT_FALSE(fp32.pinned());
  const HostCrops staged = fp32.stage(sources);
  EXPECT_EQ(staged.bytes.numel(), 150 * 200 * 3 + 301 * 157 * 3);
  const at::Tensor ref = fp32(staged);
  EXPECT_EQ(ref.sizes(), (std::vector<std::int64_t>{2, 3, 64, 64}));
  EXPECT_EQ(ref.scalar_type(), torch::kFloat32);
  EXPECT_TRUE(ref.device().is_cpu());
  EXPECT_TRUE(ref.is_contiguous(at::MemoryFormat::ChannelsLast));
  EXPECT_FALSE(ref.is_contiguous());
  EXPECT_FALSE(ref.requires_grad());
  for (const auto dtype : {torch::kBFloat16, torch::kFloat16}) {
    DeviceInput low(torch::kCPU, 64, dtype);
    const at::Tensor out = low(staged);
    EXPECT_EQ(out.scalar_type(), dtype);
    EXPECT_EQ(out.sizes(), ref.sizes());
    EXPECT_TRUE(out.is_contiguous(at::MemoryFormat::ChannelsLast));
    // One rounding of the float result: relative error at most 2^-8 (bf16) or 2^-11 (fp16),
    // values within about +-2.7.
    const double bound = dtype == torch::kBFloat16 ? 2.7 / 256 : 2.7 / 2048;
    EXPECT_LE((out.to(torch::kFloat32) - ref).abs().max().item<double>(), bound);
    EXPECT_GT((out.to(torch::kFloat32) - ref).abs().max().item<double>(), 0.0);
  }
  EXPECT_THROW(DeviceInput(torch::kCPU, 64, torch::kInt32), pets::Error);
  EXPECT_THROW(DeviceInput(torch::kCPU, 0), pets::Error);
}

TEST(DeviceInput, EmptyBatch) {
  DeviceInput input(torch::kCPU, 32);
  const at::Tensor out = input(input.stage({}));
  EXPECT_EQ(out.sizes(), (std::vector<std::int64_t>{0, 3, 32, 32}));
}

TEST(DeviceInput, CropCopyIsTheBoxBytes) {
  const Image img = noise(7, 9, 11);
  const CropBox box{2, 3, 4, 5};
  std::vector<std::uint8_t> out(static_cast<std::size_t>(pets::train::crop_bytes(box)));
  ASSERT_EQ(out.size(), 4u * 5u * 3u);
  pets::train::copy_crop(img, box, out.data());
  for (int y = 0; y < box.height; ++y)
    for (int x = 0; x < box.width; ++x)
      for (int c = 0; c < 3; ++c)
        ASSERT_EQ(
            out[(static_cast<std::size_t>(y) * box.width + x) * 3 + c],
            img.pixels[(static_cast<std::size_t>(box.top + y) * img.width + box.left + x) * 3 + c]);
  EXPECT_THROW(pets::train::copy_crop(img, CropBox{4, 0, 4, 5}, out.data()), pets::Error);
  EXPECT_THROW(pets::train::copy_crop(img, CropBox{0, 5, 4, 5}, out.data()), pets::Error);
  EXPECT_THROW(pets::train::copy_crop(img, CropBox{0, 0, 0, 5}, out.data()), pets::Error);
}

TEST(DeviceInput, RejectsSlotsPastTheBuffer) {
  const Image img = noise(20, 20, 1);
  DeviceInput input(torch::kCPU, 16);
  HostCrops staged = input.stage({CropSource{&img, {0, 0, 10, 10}}});
  staged.slots[0].height = 11;
  EXPECT_THROW(input.submit(staged), pets::Error);
  staged.bytes = torch::zeros({300}, torch::kFloat32);
  EXPECT_THROW(input.submit(staged), pets::Error);
}

TEST(DeviceInput, CudaOnlyWhereAvailable) {
  if (torch::cuda::is_available()) {
    DeviceInput input(torch::Device(torch::kCUDA), kSize);
    EXPECT_TRUE(input.pinned());
    EXPECT_TRUE(input.device().has_index());
  } else {
    // A CPU LibTorch (or no GPU): asking for CUDA is an error, not a silent CPU fallback.
    EXPECT_THROW(DeviceInput(torch::Device(torch::kCUDA), kSize), pets::Error);
  }
}

// On a CUDA device (the device check runs these; elsewhere ctest reports them as skipped): the
// same parity against the CPU transforms, with the upload from pinned memory on the input
// stream and the images consumed on another stream.
TEST(DeviceInputCuda, TrainCropsMatchTransformTrain) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  const std::vector<Image> images = test_images();
  DeviceInput input(torch::Device(torch::kCUDA), kSize);
  std::vector<CropSource> sources;
  std::vector<std::vector<float>> expected;
  for (std::size_t i = 0; i < images.size(); ++i) {
    const std::uint64_t seed = pets::data::mix_seed({7, i});
    pets::data::Rng cpu_rng(seed), box_rng(seed);
    expected.emplace_back(3 * kSize * kSize);
    pets::data::transform_train(images[i], cpu_rng, kSize, expected.back().data());
    sources.push_back(CropSource{&images[i], pets::data::random_resized_crop_box(
                                                 images[i].height, images[i].width, box_rng)});
  }
  const HostCrops staged = input.stage(sources);
  EXPECT_TRUE(staged.bytes.is_pinned());
  // Two batches in flight before either is taken: the second must not disturb the first.
  pets::train::PendingImages first = input.submit(staged);
  pets::train::PendingImages second = input.submit(staged);
  const at::Tensor a = first.get(), b = second.get();
  EXPECT_TRUE(a.is_cuda());
  EXPECT_TRUE(a.is_contiguous(at::MemoryFormat::ChannelsLast));
  const at::Tensor host = a.cpu();
  double mean_sum = 0;
  for (std::size_t i = 0; i < images.size(); ++i) {
    const Diff d = compare(host, static_cast<std::int64_t>(i), expected[i]);
    EXPECT_LE(d.max_abs, kMaxAbs) << describe(images[i], sources[i].box);
    EXPECT_LE(d.mean_abs, kCropMeanAbs) << describe(images[i], sources[i].box);
    mean_sum += d.mean_abs;
  }
  EXPECT_LE(mean_sum / static_cast<double>(images.size()), kMeanAbs);
  EXPECT_TRUE(torch::equal(a, b));
}

TEST(DeviceInputCuda, HalfPrecisionWithinOneRounding) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  const Image a = synthetic(384, 512, 1), b = noise(512, 384, 2);
  const std::vector<CropSource> sources = {{&a, {10, 20, 300, 400}}, {&b, {0, 0, 512, 384}}};
  DeviceInput fp32(torch::Device(torch::kCUDA), kSize);
  const HostCrops staged = fp32.stage(sources);
  const at::Tensor ref = fp32(staged);
  for (const auto dtype : {torch::kBFloat16, torch::kFloat16}) {
    DeviceInput low(torch::Device(torch::kCUDA), kSize, dtype);
    const at::Tensor out = low(staged);
    EXPECT_EQ(out.scalar_type(), dtype);
    EXPECT_TRUE(out.is_contiguous(at::MemoryFormat::ChannelsLast));
    // The float result rounded once (|values| < 2.7): half an ulp, 2^-8 (bf16), 2^-11 (fp16).
    const double bound = dtype == torch::kBFloat16 ? 2.7 / 256 : 2.7 / 2048;
    EXPECT_LE((out.to(torch::kFloat32) - ref).abs().max().item<double>(), bound);
  }
}
