// The GPU input path's tensor code (pets/train/input/device_input) run on the CPU device against
// the CPU loader's transforms: the same boxes, the same images, the same tensors within a stated
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
#include "pets/train/device/cuda_parts.hpp"
#include "pets/train/input/batch_resize.hpp"
#include "pets/train/input/device_input.hpp"
#include "pets/util/error.hpp"
#include "train/input/aten_op_counter.hpp"

using pets::data::CropBox;
using pets::data::Image;
using pets::train::CropSlot;
using pets::train::CropSource;
using pets::train::DeviceInput;
using pets::train::HostCrops;
using pets::train::resize_normalize;
using pets::train::resize_normalize_per_crop;

namespace {

constexpr int kSize = 224;

// Tolerances of the device path against the CPU path, in normalised units (one grey level is
// 1 / (255 * std) = 0.0153 to 0.0175), set for LibTorch's antialiased interpolate (the per-crop
// path, resize_normalize_per_crop): the same triangle filter and tap ranges, but sample centres
// and weights in float where the CPU path uses double (a centre near 1000 px off by up to ~1e-4
// px). Measured over these 80 crops with Debian's LibTorch 1.13 (CPU): max |diff| 7.1e-5 (train)
// and 6.8e-5 (eval); mean |diff| over all crops 1.8e-6 and 1.9e-6, over one crop at most 5.3e-6
// and 4.7e-6. The bounds are about twice that. The batched path DeviceInput now runs applies the
// CPU path's own weights and differs only in the order of the sums: max |diff| 9.5e-7 (train and
// eval), mean 1e-7. The bounds are a hundred times below one grey level, so a one-pixel shift or a
// missing antialias filter (each 0.01 or more; ToleranceDetectsAShiftOrAMissingAntialias) fails
// them.
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

/// The CPU path's result for one box (its resize and normalisation, HWC).
std::vector<float> cpu_result(const CropSource& c, int size) {
  std::vector<float> out(3 * static_cast<std::size_t>(size) * size);
  pets::data::resize_crop_bilinear(c.image->pixels.data(), c.image->height, c.image->width, c.box,
                                   size, size, out.data());
  pets::data::normalize_hwc(out.data(), size, size, out.data());
  return out;
}

/// `count` crops of every kind on `images`: random places and sides (about a quarter of the sides
/// one pixel), then a whole image, a 1 x 1 crop, one row and one column.
std::vector<CropSource> random_crops(const std::vector<Image>& images, std::uint64_t seed,
                                     int count) {
  pets::data::Rng rng(seed);
  std::vector<CropSource> out;
  auto side = [&](int most) {
    return rng.uniform() < 0.25 ? 1 : static_cast<int>(rng.randint(1, most + 1));
  };
  for (int i = 0; i < count; ++i) {
    const Image& img = images[static_cast<std::size_t>(rng.randint(0, images.size()))];
    const int h = side(img.height), w = side(img.width);
    out.push_back({&img,
                   {static_cast<int>(rng.randint(0, img.height - h + 1)),
                    static_cast<int>(rng.randint(0, img.width - w + 1)), h, w}});
  }
  const Image& big = images[images.size() / 2];
  out.push_back({&big, {0, 0, big.height, big.width}});
  out.push_back({&big, {big.height / 2, big.width / 3, 1, 1}});
  out.push_back({&big, {big.height - 1, 0, 1, big.width}});
  out.push_back({&big, {0, big.width - 1, big.height, 1}});
  return out;
}

struct Stats {
  double worst = 0, worst_crop_mean = 0, mean_sum = 0;
  int crops = 0;
  void add(const Diff& d) {
    worst = std::max(worst, d.max_abs);
    worst_crop_mean = std::max(worst_crop_mean, d.mean_abs);
    mean_sum += d.mean_abs;
    ++crops;
  }
  double mean() const { return crops ? mean_sum / crops : 0.0; }
};

/// Image i of two [n, 3, s, s] tensors compared.
Diff compare_images(const at::Tensor& a, const at::Tensor& b, std::int64_t i) {
  const at::Tensor d = (a[i].to(torch::kFloat64) - b[i].to(torch::kFloat64)).abs();
  return {d.max().item<double>(), d.mean().item<double>()};
}

/// `crops` cut out of whole images held one after another in one buffer, as ResidentImages holds
/// a store: each slot's stride the image's row, the widest image's row unused after the last.
HostCrops strided_crops(const std::vector<CropSource>& crops) {
  std::vector<const Image*> held;
  std::vector<std::int64_t> offsets;
  std::int64_t total = 0, widest = 0;
  for (const CropSource& c : crops)
    if (std::find(held.begin(), held.end(), c.image) == held.end()) {
      held.push_back(c.image);
      offsets.push_back(total);
      total += static_cast<std::int64_t>(c.image->pixels.size());
      widest = std::max<std::int64_t>(widest, c.image->width);
    }
  HostCrops out;
  out.bytes = torch::empty({total + widest * 3}, torch::kUInt8);
  for (std::size_t k = 0; k < held.size(); ++k)
    std::copy(held[k]->pixels.begin(), held[k]->pixels.end(),
              out.bytes.data_ptr<std::uint8_t>() + offsets[k]);
  for (const CropSource& c : crops) {
    const auto k =
        static_cast<std::size_t>(std::find(held.begin(), held.end(), c.image) - held.begin());
    const std::int64_t stride = static_cast<std::int64_t>(c.image->width) * 3;
    out.slots.push_back(
        {offsets[k] + c.box.top * stride + static_cast<std::int64_t>(c.box.left) * 3, c.box.height,
         c.box.width, stride});
  }
  return out;
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
  const at::Tensor crop = staged.bytes.narrow(0, 0, pets::train::crop_bytes(box))
                              .to(torch::kFloat32)
                              .view({1, box.height, box.width, 3})
                              .permute({0, 3, 1, 2});
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
  // The crops, then the widest one's row (HostCrops).
  EXPECT_EQ(staged.bytes.numel(), 150 * 200 * 3 + 301 * 157 * 3 + 200 * 3);
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
  // Every bad slot is refused by the one check, with its one message, before any work.
  const auto refusal = [&](const CropSlot& slot) {
    HostCrops bad = staged;
    bad.slots = {slot};
    try {
      input.submit(bad);
    } catch (const pets::Error& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  const std::string message =
      "device input: a crop slot is empty, narrower than its rows or runs past the staged bytes";
  CropSlot slot = staged.slots[0];
  slot.height = 12;  // one row more fits the room after the crop; two do not
  EXPECT_NE(refusal(slot).find(message), std::string::npos) << refusal(slot);
  slot = staged.slots[0];
  slot.width = 0;
  EXPECT_NE(refusal(slot).find(message), std::string::npos) << refusal(slot);
  slot = staged.slots[0];
  slot.stride = slot.width * 3 - 1;
  EXPECT_NE(refusal(slot).find(message), std::string::npos) << refusal(slot);
  EXPECT_EQ(refusal(staged.slots[0]), "accepted");
  staged.bytes = torch::zeros({300}, torch::kFloat32);
  EXPECT_THROW(input.submit(staged), pets::Error);
}

// The batched resize (pets/train/input/batch_resize) against the plain per-crop path and the CPU
// path, over crops of every size: enlarged and reduced (by up to 20x), one-pixel rows, columns and
// squares, whole images, batches of one.
TEST(BatchResize, MatchesPerCropAndCpuPathOverRandomCrops) {
  const std::vector<Image> images = test_images();
  const pets::train::InputNormalization norm = pets::train::input_normalization(torch::kCPU);
  Stats vs_cpu, vs_plain;
  bool saw_upscale = false, saw_big_reduction = false, saw_one_pixel = false;
  for (const int size : {224, 37}) {
    const std::vector<CropSource> crops =
        random_crops(images, static_cast<std::uint64_t>(size), 32);
    // Batches of 9 (the last of 9 + 3 - 8 = 4): each pads to its own widest crop and window.
    for (std::size_t first = 0; first < crops.size(); first += 9) {
      const std::vector<CropSource> batch(
          crops.begin() + static_cast<std::ptrdiff_t>(first),
          crops.begin() + static_cast<std::ptrdiff_t>(std::min(first + 9, crops.size())));
      const HostCrops staged = pets::train::stage_crops(batch, false);
      const at::Tensor batched = resize_normalize(staged.bytes, staged.slots, size, norm.scale,
                                                  norm.shift, torch::kFloat32);
      const at::Tensor plain = resize_normalize_per_crop(staged.bytes, staged.slots, size,
                                                         norm.scale, norm.shift, torch::kFloat32);
      ASSERT_EQ(batched.sizes(), plain.sizes());
      EXPECT_EQ(batched.scalar_type(), torch::kFloat32);
      EXPECT_TRUE(batched.is_contiguous(at::MemoryFormat::ChannelsLast));
      for (std::size_t i = 0; i < batch.size(); ++i) {
        const CropBox& b = batch[i].box;
        saw_upscale |= std::min(b.height, b.width) < size;
        saw_big_reduction |= std::min(b.height, b.width) > 2 * size;
        saw_one_pixel |= std::min(b.height, b.width) == 1;
        const auto k = static_cast<std::int64_t>(i);
        const Diff d = compare(batched, k, cpu_result(batch[i], size));
        EXPECT_LE(d.max_abs, kMaxAbs) << size << " " << describe(*batch[i].image, b);
        EXPECT_LE(d.mean_abs, kCropMeanAbs) << size << " " << describe(*batch[i].image, b);
        vs_cpu.add(d);
        const Diff p = compare_images(batched, plain, k);
        EXPECT_LE(p.max_abs, kMaxAbs) << size << " " << describe(*batch[i].image, b);
        vs_plain.add(p);
      }
    }
    // A batch of one crop: the largest, then a one-pixel column.
    for (const std::size_t i : {crops.size() - 4, crops.size() - 1}) {
      const HostCrops one = pets::train::stage_crops({crops[i]}, false);
      const at::Tensor single =
          resize_normalize(one.bytes, one.slots, size, norm.scale, norm.shift, torch::kFloat32);
      ASSERT_EQ(single.size(0), 1);
      const Diff d = compare(single, 0, cpu_result(crops[i], size));
      EXPECT_LE(d.max_abs, kMaxAbs) << describe(*crops[i].image, crops[i].box);
      vs_cpu.add(d);
    }
  }
  EXPECT_LE(vs_cpu.mean(), kMeanAbs);
  EXPECT_TRUE(saw_upscale && saw_big_reduction && saw_one_pixel);
  std::printf(
      "batched vs CPU path: max |diff| %.3g, mean %.3g (largest of one crop %.3g) over %d crops; "
      "vs per-crop path: max %.3g, mean %.3g\n",
      vs_cpu.worst, vs_cpu.mean(), vs_cpu.worst_crop_mean, vs_cpu.crops, vs_plain.worst,
      vs_plain.mean());
}

TEST(BatchResize, AnyTileSizeGivesTheSameImages) {
  // Tiles of one output row (the narrowest windows), sizes that do not divide the output (the
  // last tile partly empty), and one tile over the whole output (whole-crop matrices).
  std::vector<Image> images = test_images();
  images.resize(10);  // up to 517 px: windows of modest size even for single-row tiles
  const pets::train::InputNormalization norm = pets::train::input_normalization(torch::kCPU);
  const int size = 45;
  const std::vector<CropSource> crops = random_crops(images, 99, 12);
  const HostCrops staged = pets::train::stage_crops(crops, false);
  const at::Tensor ref =
      resize_normalize(staged.bytes, staged.slots, size, norm.scale, norm.shift, torch::kFloat32);
  std::vector<std::vector<float>> expected;
  for (const CropSource& c : crops) expected.push_back(cpu_result(c, size));
  double worst = 0;
  for (const int tile : {1, 7, 16, 44, 45, 1000}) {
    const at::Tensor out = resize_normalize(staged.bytes, staged.slots, size, norm.scale,
                                            norm.shift, torch::kFloat32, tile);
    for (std::size_t i = 0; i < crops.size(); ++i) {
      const Diff d = compare(out, static_cast<std::int64_t>(i), expected[i]);
      EXPECT_LE(d.max_abs, kMaxAbs)
          << "tile " << tile << " " << describe(*crops[i].image, crops[i].box);
    }
    worst = std::max(worst, (out - ref).abs().max().item<double>());
  }
  // The tiles change only the order of the float sums.
  EXPECT_LE(worst, 1e-5);
  EXPECT_THROW(resize_normalize(staged.bytes, staged.slots, size, norm.scale, norm.shift,
                                torch::kFloat32, 0),
               pets::Error);
}

TEST(BatchResize, NarrowLastCropsAndOverlappingSlots) {
  // The rows of narrow crops at the end of the buffer are read from before their start (their
  // full-width row would run past the end); slots that overlap are read from a padded copy.
  const Image wide = synthetic(40, 300, 4), tall = noise(250, 9, 5);
  const pets::train::InputNormalization norm = pets::train::input_normalization(torch::kCPU);
  const std::vector<CropSource> crops = {
      {&wide, {3, 0, 20, 300}}, {&tall, {0, 0, 250, 9}}, {&tall, {10, 2, 200, 1}}};
  // The crops without the room stage_crops leaves after them.
  HostCrops staged = pets::train::stage_crops(crops, false);
  staged.bytes = staged.bytes.narrow(0, 0, pets::train::slot_end(staged.slots.back()));
  const at::Tensor out =
      resize_normalize(staged.bytes, staged.slots, 64, norm.scale, norm.shift, torch::kFloat32);
  for (std::size_t i = 0; i < crops.size(); ++i)
    EXPECT_LE(compare(out, static_cast<std::int64_t>(i), cpu_result(crops[i], 64)).max_abs, kMaxAbs)
        << i;
  // Slots that overlap: the tall crop's bytes alone, read as a 1 x 300 row and as the crop. Its
  // last rows cannot be read from before its start (it begins the buffer): padded.
  HostCrops overlapping;
  overlapping.bytes = staged.bytes.narrow(0, staged.slots[1].offset, 250 * 9 * 3 + 200 * 3).clone();
  overlapping.slots = {{0, 1, 300}, {0, 250, 9}};
  const at::Tensor padded = resize_normalize(overlapping.bytes, overlapping.slots, 64, norm.scale,
                                             norm.shift, torch::kFloat32);
  const at::Tensor plain = resize_normalize_per_crop(overlapping.bytes, overlapping.slots, 64,
                                                     norm.scale, norm.shift, torch::kFloat32);
  EXPECT_LE((padded - plain).abs().max().item<double>(), kMaxAbs);
  EXPECT_LE(compare(padded, 1, cpu_result(crops[1], 64)).max_abs, kMaxAbs);
  HostCrops past_end = staged;
  past_end.slots[2].height += 1;
  EXPECT_THROW(
      resize_normalize(past_end.bytes, past_end.slots, 64, norm.scale, norm.shift, torch::kFloat32),
      pets::Error);
}

TEST(BatchResize, StridedSlotsGiveThePackedCropsResultBitForBit) {
  // Crops cut out of whole images by a row stride (ResidentImages) against the same crops packed
  // (stage_crops): the same taps on the same bytes, so the same images bit for bit, in every
  // dtype and at two output sizes.
  const std::vector<Image> images = test_images();
  const pets::train::InputNormalization norm = pets::train::input_normalization(torch::kCPU);
  for (const int size : {kSize, 37}) {
    const std::vector<CropSource> crops = random_crops(images, 23 + size, 40);
    const HostCrops packed = pets::train::stage_crops(crops, false);
    const HostCrops strided = strided_crops(crops);
    for (const auto dtype : {torch::kFloat32, torch::kBFloat16}) {
      const at::Tensor a =
          resize_normalize(packed.bytes, packed.slots, size, norm.scale, norm.shift, dtype);
      const at::Tensor b =
          resize_normalize(strided.bytes, strided.slots, size, norm.scale, norm.shift, dtype);
      EXPECT_TRUE(torch::equal(a, b)) << size << " " << c10::toString(dtype);
    }
  }
}

TEST(BatchResize, HeldImagesPast2GiBGiveTheSameImages) {
  // A store held in memory can pass 2 GiB (the gather indices are 64-bit): the same held images
  // 2.5 GiB into a buffer (the pages before them never written, so never resident) give the
  // same images bit for bit.
  const std::vector<Image> images = test_images();
  const pets::train::InputNormalization norm = pets::train::input_normalization(torch::kCPU);
  const std::vector<CropSource> crops = random_crops(images, 5, 6);
  const HostCrops near = strided_crops(crops);
  const std::int64_t skip = std::int64_t{5} << 29;
  HostCrops far;
  far.bytes = torch::empty({skip + near.bytes.numel()}, torch::kUInt8);
  far.bytes.narrow(0, skip, near.bytes.numel()).copy_(near.bytes);
  far.slots = near.slots;
  for (pets::train::CropSlot& slot : far.slots) slot.offset += skip;
  const at::Tensor a =
      resize_normalize(near.bytes, near.slots, kSize, norm.scale, norm.shift, torch::kFloat32);
  const at::Tensor b =
      resize_normalize(far.bytes, far.slots, kSize, norm.scale, norm.shift, torch::kFloat32);
  EXPECT_TRUE(torch::equal(a, b));
}

TEST(BatchResize, RefusesStridedSlotsOutsideTheBuffer) {
  const std::vector<Image> images = test_images();
  const pets::train::InputNormalization norm = pets::train::input_normalization(torch::kCPU);
  const std::vector<CropSource> crops = {{&images[0], {0, 0, images[0].height, images[0].width}}};
  HostCrops strided = strided_crops(crops);
  EXPECT_NO_THROW(
      resize_normalize(strided.bytes, strided.slots, 32, norm.scale, norm.shift, torch::kFloat32));
  // Rows closer than the row is wide.
  HostCrops narrow = strided;
  narrow.slots[0].stride = narrow.slots[0].width * 3 - 3;
  EXPECT_THROW(
      resize_normalize(narrow.bytes, narrow.slots, 32, norm.scale, norm.shift, torch::kFloat32),
      pets::Error);
  // A stride that carries the last row past the end.
  HostCrops past = strided;
  past.slots[0].stride += 3 * images[0].width;
  EXPECT_THROW(
      resize_normalize(past.bytes, past.slots, 32, norm.scale, norm.shift, torch::kFloat32),
      pets::Error);
  DeviceInput input(torch::kCPU, 32);
  EXPECT_THROW(input(past), pets::Error);
}

TEST(BatchResize, HalfPrecisionIsTheFloatResultRoundedOnce) {
  std::vector<Image> images = test_images();
  images.resize(10);
  const pets::train::InputNormalization norm = pets::train::input_normalization(torch::kCPU);
  const std::vector<CropSource> crops = random_crops(images, 7, 16);
  const HostCrops staged = pets::train::stage_crops(crops, false);
  const at::Tensor ref =
      resize_normalize(staged.bytes, staged.slots, kSize, norm.scale, norm.shift, torch::kFloat32);
  for (const auto dtype : {torch::kBFloat16, torch::kFloat16}) {
    const at::Tensor out =
        resize_normalize(staged.bytes, staged.slots, kSize, norm.scale, norm.shift, dtype);
    const at::Tensor plain =
        resize_normalize_per_crop(staged.bytes, staged.slots, kSize, norm.scale, norm.shift, dtype);
    EXPECT_EQ(out.scalar_type(), dtype);
    EXPECT_TRUE(out.is_contiguous(at::MemoryFormat::ChannelsLast));
    EXPECT_TRUE(torch::equal(out, ref.to(dtype)));
    // Each is its float result rounded once: apart by at most the float results' difference
    // plus one unit in the last place at |v| < 4 (2^-6 in bf16, 2^-9 in fp16).
    const double ulp = dtype == torch::kBFloat16 ? 1.0 / 64 : 1.0 / 512;
    EXPECT_LE((out.to(torch::kFloat32) - plain.to(torch::kFloat32)).abs().max().item<double>(),
              kMaxAbs + ulp);
  }
}

TEST(BatchResize, OneBatchIsAFixedNumberOfOperators) {
  // The point of the batched path: the ATen calls per batch (on a GPU, the kernel launches) do
  // not grow with the batch; the per-crop path's do.
  const std::vector<Image> images = test_images();
  const pets::train::InputNormalization norm = pets::train::input_normalization(torch::kCPU);
  const std::vector<CropSource> crops = random_crops(images, 3, 20);
  auto ops = [&](std::size_t n, bool batched) {
    const HostCrops staged = pets::train::stage_crops(
        std::vector<CropSource>(crops.begin(), crops.begin() + static_cast<std::ptrdiff_t>(n)),
        false);
    torch::NoGradGuard no_grad;
    const pets::testing::AtenOpCounter counter;
    if (batched)
      (void)resize_normalize(staged.bytes, staged.slots, 32, norm.scale, norm.shift,
                             torch::kBFloat16);
    else
      (void)resize_normalize_per_crop(staged.bytes, staged.slots, 32, norm.scale, norm.shift,
                                      torch::kBFloat16);
    return counter.ops();
  };
  const pets::testing::AtenOps batched2 = ops(2, true), batched20 = ops(20, true);
  EXPECT_EQ(batched2.top_names, batched20.top_names);
  EXPECT_LE(batched20.computing(), 8);
  // The counter sees the per-crop path's calls: 2 more per crop (resize, copy into the batch).
  const pets::testing::AtenOps plain2 = ops(2, false), plain20 = ops(20, false);
  EXPECT_GE(plain20.computing(), plain2.computing() + 2 * 18);
  std::printf(
      "ATen calls per batch computing (all top-level): batched %lld (%lld) with 2 or 20 "
      "crops, per-crop %lld (%lld) with 20 crops\n",
      static_cast<long long>(batched20.computing()), static_cast<long long>(batched20.top),
      static_cast<long long>(plain20.computing()), static_cast<long long>(plain20.top));
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

TEST(DeviceInputCuda, BatchedResizeMatchesPerCropAndCpuPath) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  const std::vector<Image> images = test_images();
  const torch::Device cuda(torch::kCUDA);
  const pets::train::InputNormalization norm = pets::train::input_normalization(cuda);
  const std::vector<CropSource> crops = random_crops(images, 11, 60);
  const HostCrops staged = pets::train::stage_crops(crops, true);
  const at::Tensor bytes = staged.bytes.to(cuda, torch::kUInt8, /*non_blocking=*/true);
  const at::Tensor batched =
      resize_normalize(bytes, staged.slots, kSize, norm.scale, norm.shift, torch::kFloat32);
  const at::Tensor plain = resize_normalize_per_crop(bytes, staged.slots, kSize, norm.scale,
                                                     norm.shift, torch::kFloat32);
  EXPECT_TRUE(batched.is_cuda());
  EXPECT_TRUE(batched.is_contiguous(at::MemoryFormat::ChannelsLast));
  const at::Tensor host = batched.cpu(), host_plain = plain.cpu();
  Stats vs_cpu;
  for (std::size_t i = 0; i < crops.size(); ++i) {
    const auto k = static_cast<std::int64_t>(i);
    const Diff d = compare(host, k, cpu_result(crops[i], kSize));
    EXPECT_LE(d.max_abs, kMaxAbs) << describe(*crops[i].image, crops[i].box);
    EXPECT_LE(d.mean_abs, kCropMeanAbs) << describe(*crops[i].image, crops[i].box);
    EXPECT_LE(compare_images(host, host_plain, k).max_abs, kMaxAbs);
    vs_cpu.add(d);
  }
  EXPECT_LE(vs_cpu.mean(), kMeanAbs);
  for (const auto dtype : {torch::kBFloat16, torch::kFloat16}) {
    const at::Tensor low =
        resize_normalize(bytes, staged.slots, kSize, norm.scale, norm.shift, dtype);
    EXPECT_EQ(low.scalar_type(), dtype);
    EXPECT_TRUE(low.is_contiguous(at::MemoryFormat::ChannelsLast));
    EXPECT_TRUE(torch::equal(low, batched.to(dtype)));
  }
  std::printf("CUDA batched vs CPU path: max |diff| %.3g, mean %.3g over %d crops\n", vs_cpu.worst,
              vs_cpu.mean(), vs_cpu.crops);
}

// The CUDA kernel (CudaParts::resize_normalize), which DeviceInput runs on a GPU, against the
// batched tensor path on the same device and the CPU path, over crops of every size (enlarged,
// reduced by up to 20x, one-pixel rows and columns) at two output sizes; its bf16 and fp16 are
// its float result rounded once; bad slots and dtypes are refused as the batched path refuses
// them.
TEST(DeviceInputCuda, KernelMatchesBatchedPathAndCpuPath) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  const pets::train::CudaParts* cuda = pets::train::cuda_parts();
  ASSERT_NE(cuda, nullptr);
  const std::vector<Image> images = test_images();
  const torch::Device device(torch::kCUDA);
  const pets::train::InputNormalization norm = pets::train::input_normalization(device);
  Stats vs_cpu;
  double vs_batched = 0;
  bool saw_upscale = false, saw_one_pixel = false;
  for (const int size : {kSize, 37}) {
    const std::vector<CropSource> crops = random_crops(images, 17 + size, 60);
    const HostCrops staged = pets::train::stage_crops(crops, true);
    const at::Tensor bytes = staged.bytes.to(device, torch::kUInt8, /*non_blocking=*/true);
    const at::Tensor kernel =
        cuda->resize_normalize(bytes, staged.slots, size, norm.scale, norm.shift, torch::kFloat32);
    const at::Tensor batched =
        resize_normalize(bytes, staged.slots, size, norm.scale, norm.shift, torch::kFloat32);
    ASSERT_EQ(kernel.sizes(), batched.sizes());
    EXPECT_TRUE(kernel.is_cuda());
    EXPECT_TRUE(kernel.is_contiguous(at::MemoryFormat::ChannelsLast));
    vs_batched = std::max(vs_batched, (kernel - batched).abs().max().item<double>());
    const at::Tensor host = kernel.cpu();
    for (std::size_t i = 0; i < crops.size(); ++i) {
      const CropBox& b = crops[i].box;
      saw_upscale |= std::min(b.height, b.width) < size;
      saw_one_pixel |= std::min(b.height, b.width) == 1;
      const Diff d = compare(host, static_cast<std::int64_t>(i), cpu_result(crops[i], size));
      EXPECT_LE(d.max_abs, kMaxAbs) << size << " " << describe(*crops[i].image, b);
      EXPECT_LE(d.mean_abs, kCropMeanAbs) << size << " " << describe(*crops[i].image, b);
      vs_cpu.add(d);
    }
    for (const auto dtype : {torch::kBFloat16, torch::kFloat16}) {
      const at::Tensor low =
          cuda->resize_normalize(bytes, staged.slots, size, norm.scale, norm.shift, dtype);
      EXPECT_EQ(low.scalar_type(), dtype);
      EXPECT_TRUE(low.is_contiguous(at::MemoryFormat::ChannelsLast));
      EXPECT_TRUE(torch::equal(low, kernel.to(dtype)));
    }
    std::vector<pets::train::CropSlot> past = staged.slots;
    past.back().offset = bytes.numel();
    EXPECT_THROW(cuda->resize_normalize(bytes, past, size, norm.scale, norm.shift, torch::kFloat32),
                 pets::Error);
    EXPECT_THROW(
        cuda->resize_normalize(bytes, staged.slots, size, norm.scale, norm.shift, torch::kInt32),
        pets::Error);
    EXPECT_THROW(cuda->resize_normalize(staged.bytes, staged.slots, size, norm.scale, norm.shift,
                                        torch::kFloat32),
                 pets::Error);  // host bytes
  }
  EXPECT_TRUE(saw_upscale && saw_one_pixel);
  EXPECT_LE(vs_cpu.mean(), kMeanAbs);
  EXPECT_LE(vs_batched, kMaxAbs);
  EXPECT_EQ(
      cuda->resize_normalize(torch::empty({0}, torch::TensorOptions(device).dtype(torch::kUInt8)),
                             {}, kSize, norm.scale, norm.shift, torch::kFloat32)
          .size(0),
      0);
  std::printf(
      "CUDA kernel vs CPU path: max |diff| %.3g, mean %.3g over %d crops; vs batched %.3g\n",
      vs_cpu.worst, vs_cpu.mean(), vs_cpu.crops, vs_batched);
}

// The kernel with a row stride (crops cut out of whole images held on the device, as
// ResidentImages holds a store) against the same crops packed: bit for bit, in every dtype; a
// stride narrower than the row or carrying the crop past the bytes is refused.
TEST(DeviceInputCuda, KernelStridedSlotsGiveThePackedCropsResultBitForBit) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  const pets::train::CudaParts* cuda = pets::train::cuda_parts();
  ASSERT_NE(cuda, nullptr);
  const std::vector<Image> images = test_images();
  const torch::Device device(torch::kCUDA);
  const pets::train::InputNormalization norm = pets::train::input_normalization(device);
  for (const int size : {kSize, 37}) {
    const std::vector<CropSource> crops = random_crops(images, 29 + size, 60);
    const HostCrops packed = pets::train::stage_crops(crops, false);
    const HostCrops strided = strided_crops(crops);
    const at::Tensor packed_bytes = packed.bytes.to(device);
    const at::Tensor strided_bytes = strided.bytes.to(device);
    for (const auto dtype : {torch::kFloat32, torch::kBFloat16, torch::kFloat16}) {
      const at::Tensor a =
          cuda->resize_normalize(packed_bytes, packed.slots, size, norm.scale, norm.shift, dtype);
      const at::Tensor b =
          cuda->resize_normalize(strided_bytes, strided.slots, size, norm.scale, norm.shift, dtype);
      EXPECT_TRUE(torch::equal(a, b)) << size << " " << c10::toString(dtype);
    }
    // The batched tensor path on the device reads the same strided slots.
    EXPECT_TRUE(torch::equal(
        resize_normalize(packed_bytes, packed.slots, size, norm.scale, norm.shift, torch::kFloat32),
        resize_normalize(strided_bytes, strided.slots, size, norm.scale, norm.shift,
                         torch::kFloat32)));
    std::vector<pets::train::CropSlot> narrow = strided.slots;
    narrow.front().stride = narrow.front().width * 3 - 3;
    EXPECT_THROW(cuda->resize_normalize(strided_bytes, narrow, size, norm.scale, norm.shift,
                                        torch::kFloat32),
                 pets::Error);
    std::vector<pets::train::CropSlot> past = strided.slots;
    past.back().stride = strided_bytes.numel();
    EXPECT_THROW(
        cuda->resize_normalize(strided_bytes, past, size, norm.scale, norm.shift, torch::kFloat32),
        pets::Error);
  }
}
