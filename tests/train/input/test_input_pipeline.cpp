// The trainer's batch source (pets/train/input/input_pipeline): which path --input takes, and, on
// the CPU device, the device path's batches against the CPU path's: the same images, labels and
// order, the images within DeviceInput's stated tolerance, one batch submitted ahead, resumed
// epochs.
#include <gtest/gtest.h>
#include <mpi.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "data/data_test_util.hpp"
#include "pets/comm/communicator.hpp"
#include "pets/comm/mpi_comm.hpp"
#include "pets/data/loader.hpp"
#include "pets/train/input/device_input.hpp"
#include "pets/train/input/input_pipeline.hpp"
#include "pets/train/input/resident_images.hpp"
#include "pets/util/error.hpp"

using pets::data::Loader;
using pets::data::LoaderOptions;
using pets::data::SplitKind;
using pets::train::InputChoice;
using pets::train::InputPipeline;

namespace {

/// A store of 3 x 8 images of up to 160 px: crops both reduced and enlarged to kSize.
class InputPaths : public ::testing::Test {
 protected:
  static constexpr int kSize = 96;
  static void SetUpTestSuite() {
    dir_ = new pets::data::testing::ScratchDir("input_pipeline");
    pets::data::testing::make_store(*dir_ / "images", *dir_ / "store.h5", 3, 8, MPI_COMM_WORLD,
                                    160);
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }
  static LoaderOptions options(bool device_input) {
    LoaderOptions o;
    o.path = *dir_ / "store.h5";
    o.batch_size = 5;
    o.eval_batch_size = 3;
    o.image_size = kSize;
    o.seed = 5;
    o.workers = 2;
    o.prefetch = 2;
    pets::train::configure_loader(o, device_input, /*pinned=*/false);
    return o;
  }
  /// The device path's input on the CPU device.
  static std::unique_ptr<pets::train::DeviceInput> on_device() {
    return std::make_unique<pets::train::DeviceInput>(torch::kCPU, kSize);
  }
  static pets::data::testing::ScratchDir* dir_;
};
pets::data::testing::ScratchDir* InputPaths::dir_ = nullptr;

struct Diff {
  double max_abs = 0, mean_abs = 0;
};

Diff diff(const at::Tensor& a, const at::Tensor& b) {
  const at::Tensor d = (a.to(torch::kFloat64) - b.to(torch::kFloat64)).abs();
  return {d.max().item<double>(), d.mean().item<double>()};
}

}  // namespace

TEST(InputChoiceRule, DevicePathOnlyWhenAskedOrOnCuda) {
  const c10::Device cpu(c10::kCPU), cuda(c10::kCUDA, 0);
  EXPECT_FALSE(pets::train::use_device_input(InputChoice::kAuto, cpu));
  EXPECT_TRUE(pets::train::use_device_input(InputChoice::kAuto, cuda));
  EXPECT_FALSE(pets::train::use_device_input(InputChoice::kCpu, cpu));
  EXPECT_FALSE(pets::train::use_device_input(InputChoice::kCpu, cuda));
  EXPECT_TRUE(pets::train::use_device_input(InputChoice::kDevice, cpu));
  EXPECT_TRUE(pets::train::use_device_input(InputChoice::kDevice, cuda));
}

TEST_F(InputPaths, DevicePathMatchesCpuPathWithinTheStatedTolerance) {
  Loader cpu_loader(options(false)), device_loader(options(true));
  InputPipeline cpu(cpu_loader, torch::kCPU, nullptr),
      device(device_loader, torch::kCPU, on_device());
  EXPECT_FALSE(cpu.device_input());
  EXPECT_TRUE(device.device_input());
  double worst = 0, mean_sum = 0;
  std::int64_t images = 0;
  for (const SplitKind kind : {SplitKind::kTrain, SplitKind::kEval})
    for (std::int64_t epoch = 0; epoch < 2; ++epoch) {
      cpu.start_epoch(kind, epoch);
      device.start_epoch(kind, epoch);
      const std::int64_t steps = cpu_loader.steps_per_epoch(kind);
      for (std::int64_t step = 0; step < steps; ++step) {
        auto a = cpu.next();
        auto b = device.next();
        ASSERT_TRUE(a.has_value() && b.has_value()) << "step " << step;
        // Prefetch: the batch after this one is already submitted, except after the last.
        EXPECT_EQ(device.has_ahead(), step + 1 < steps) << "step " << step;
        EXPECT_EQ(a->step, step);
        EXPECT_EQ(b->step, step);
        EXPECT_EQ(a->indices, b->indices);
        EXPECT_EQ(a->labels, b->labels);
        const at::Tensor x = cpu.images(*a), y = device.images(*b);
        ASSERT_EQ(x.sizes(), y.sizes());
        EXPECT_EQ(y.dtype(), torch::kFloat32);
        EXPECT_TRUE(y.is_contiguous(at::MemoryFormat::ChannelsLast));
        for (std::int64_t i = 0; i < a->n; ++i) {
          const Diff d = diff(x[i], y[i]);
          EXPECT_LE(d.max_abs, pets::train::kInputMaxAbsDiff) << "step " << step << " image " << i;
          EXPECT_LE(d.mean_abs, pets::train::kInputCropMeanAbsDiff);
          worst = std::max(worst, d.max_abs);
          mean_sum += d.mean_abs;
          ++images;
        }
      }
      EXPECT_FALSE(cpu.next().has_value());
      EXPECT_FALSE(device.next().has_value());
    }
  EXPECT_EQ(images, 2 * 24);
  EXPECT_LE(mean_sum / static_cast<double>(images), pets::train::kInputMeanAbsDiff);
  // Not the same code path in disguise: the two differ by rounding somewhere.
  EXPECT_GT(worst, 0.0);
}

TEST_F(InputPaths, ResumedEpochGivesTheSameBatches) {
  Loader loader(options(true));
  InputPipeline input(loader, torch::kCPU, on_device());
  input.start_epoch(SplitKind::kTrain, 1);
  std::vector<at::Tensor> full;
  while (auto b = input.next()) full.push_back(input.images(*b).clone());
  ASSERT_EQ(full.size(), 4u);  // 19 training images in batches of 5
  input.start_epoch(SplitKind::kTrain, 1, 2);
  auto b = input.next();
  ASSERT_TRUE(b.has_value());
  EXPECT_EQ(b->step, 2);
  EXPECT_TRUE(torch::equal(input.images(*b), full[2]));
}

TEST_F(InputPaths, RefusesAMismatchedLoaderOrAnotherStepsImages) {
  Loader pixels(options(false));
  EXPECT_THROW(InputPipeline(pixels, torch::kCPU, on_device()), pets::Error);
  Loader crops(options(true));
  EXPECT_THROW(InputPipeline(crops, torch::kCPU, nullptr), pets::Error);
  // A device input of another size than the loader's images.
  EXPECT_THROW(InputPipeline(crops, torch::kCPU,
                             std::make_unique<pets::train::DeviceInput>(torch::kCPU, kSize + 1)),
               pets::Error);
  InputPipeline input(crops, torch::kCPU, on_device());
  input.start_epoch(SplitKind::kEval, 0);
  auto first = input.next();
  auto second = input.next();
  ASSERT_TRUE(first && second);
  EXPECT_THROW(input.images(*first), pets::Error);
  EXPECT_NO_THROW(input.images(*second));
}

// --resident on the CPU device: every image of the store held in one tensor, the loader drawing
// only the boxes. Whole train and eval epochs give bitwise the images of the staged crops (the
// same slots cut from the whole images, the same taps and arithmetic), the same labels and order.
TEST_F(InputPaths, ResidentImagesGiveTheStagedPathsImagesBitForBit) {
  Loader staged_loader(options(true)), resident_loader(options(true));
  auto resident =
      std::make_unique<pets::train::ResidentImages>(resident_loader.store(), torch::kCPU, 2, 4096);
  EXPECT_EQ(resident->size_bytes(), pets::train::ResidentImages::bytes_of(resident_loader.store()));
  resident_loader.set_output(pets::data::LoaderOutput::kBoxes);
  InputPipeline staged(staged_loader, torch::kCPU, on_device()),
      held(resident_loader, torch::kCPU, on_device(), std::move(resident));
  EXPECT_EQ(staged.resident_bytes(), -1);
  EXPECT_GT(held.resident_bytes(), 0);
  std::int64_t images = 0;
  for (const SplitKind kind : {SplitKind::kTrain, SplitKind::kEval})
    for (std::int64_t epoch = 0; epoch < 2; ++epoch) {
      staged.start_epoch(kind, epoch);
      held.start_epoch(kind, epoch);
      while (auto a = staged.next()) {
        auto b = held.next();
        ASSERT_TRUE(b.has_value());
        EXPECT_EQ(b->split, kind);
        EXPECT_EQ(a->indices, b->indices);
        EXPECT_EQ(a->labels, b->labels);
        EXPECT_EQ(b->crop_bytes, 0);  // no pixel was copied on the host
        EXPECT_EQ(b->crops.data, nullptr);
        ASSERT_EQ(a->boxes.size(), b->boxes.size());
        const at::Tensor x = staged.images(*a), y = held.images(*b);
        EXPECT_TRUE(y.is_contiguous(at::MemoryFormat::ChannelsLast));
        EXPECT_TRUE(torch::equal(x, y))
            << pets::data::split_name(kind) << " epoch " << epoch << " step " << a->step;
        images += a->n;
      }
      EXPECT_FALSE(held.next().has_value());
    }
  EXPECT_EQ(images, 2 * 24);
}

TEST_F(InputPaths, ResidentImagesAreTheStoresImagesAndRefuseBoxesOutside) {
  Loader loader(options(true));
  const pets::data::Store& store = loader.store();
  // A staging buffer smaller than one image: each fill holds one image (the buffer grows to it).
  const pets::train::ResidentImages held(store, torch::kCPU, 3, 1);
  for (const SplitKind kind : {SplitKind::kTrain, SplitKind::kEval})
    for (std::int64_t i = 0; i < store.split(kind).size(); ++i) {
      const pets::data::Image img = store.read_image(kind, i);
      const pets::train::CropSlot s =
          held.slot(kind, i, pets::data::CropBox{0, 0, img.height, img.width});
      EXPECT_EQ(pets::train::row_stride(s), static_cast<std::int64_t>(img.width) * 3);
      const at::Tensor bytes =
          held.bytes().narrow(0, s.offset, pets::train::slot_end(s) - s.offset);
      ASSERT_EQ(bytes.numel(), static_cast<std::int64_t>(img.pixels.size()));
      EXPECT_EQ(std::memcmp(bytes.data_ptr<std::uint8_t>(), img.pixels.data(), img.pixels.size()),
                0)
          << pets::data::split_name(kind) << " image " << i;
    }
  const auto& shape = store.split(SplitKind::kEval).shapes[0];
  EXPECT_NO_THROW(held.slot(SplitKind::kEval, 0, {1, 2, shape[0] - 1, shape[1] - 2}));
  EXPECT_THROW(held.slot(SplitKind::kEval, 0, {1, 2, shape[0], shape[1] - 2}), pets::Error);
  EXPECT_THROW(held.slot(SplitKind::kEval, 0, {0, 0, 0, 1}), pets::Error);
  EXPECT_THROW(held.slot(SplitKind::kEval, store.split(SplitKind::kEval).size(), {0, 0, 1, 1}),
               pets::Error);
  EXPECT_THROW(held.slot(SplitKind::kTrain, -1, {0, 0, 1, 1}), pets::Error);
  // A slot past the images, submitted by hand, is refused before any work.
  pets::train::DeviceInput input(torch::kCPU, kSize);
  pets::train::CropSlot past = held.slot(SplitKind::kEval, 0, {0, 0, 1, 1});
  past.offset = held.bytes().numel() - 2;
  EXPECT_THROW(input.submit(held, {past}), pets::Error);
}

TEST_F(InputPaths, ResidentPathRefusesALoaderThatStillStagesCrops) {
  Loader crops(options(true));
  EXPECT_THROW(
      InputPipeline(crops, torch::kCPU, on_device(),
                    std::make_unique<pets::train::ResidentImages>(crops.store(), torch::kCPU)),
      pets::Error);
  Loader boxes(options(true));
  boxes.set_output(pets::data::LoaderOutput::kBoxes);
  EXPECT_THROW(InputPipeline(boxes, torch::kCPU, on_device()), pets::Error);
  // The output is fixed while an epoch runs.
  boxes.start_epoch(SplitKind::kEval, 0);
  EXPECT_THROW(boxes.set_output(pets::data::LoaderOutput::kCrops), pets::Error);
}

// --resident on holds the images for the device input path: refused, naming both options and
// what to give instead, where --input does not take that path (cpu; auto on the CPU); auto and
// off go with any path.
TEST(ResidentRule, OnNeedsTheDeviceInputPath) {
  using pets::train::resident_path_refusal;
  using pets::train::ResidentChoice;
  const c10::Device cpu(c10::kCPU), cuda(c10::kCUDA, 0);
  EXPECT_EQ(resident_path_refusal(ResidentChoice::kOn, InputChoice::kCpu, cuda),
            "--resident on holds the images for the device input path, not for --input cpu; use "
            "--input device or --resident off");
  EXPECT_EQ(resident_path_refusal(ResidentChoice::kOn, InputChoice::kCpu, cpu),
            resident_path_refusal(ResidentChoice::kOn, InputChoice::kCpu, cuda));
  EXPECT_EQ(resident_path_refusal(ResidentChoice::kOn, InputChoice::kAuto, cpu),
            "--resident on holds the images for the device input path, which --input auto does "
            "not take on cpu; use --input device or --resident off");
  EXPECT_EQ(resident_path_refusal(ResidentChoice::kOn, InputChoice::kAuto, cuda), "");
  for (const c10::Device& device : {cpu, cuda}) {
    EXPECT_EQ(resident_path_refusal(ResidentChoice::kOn, InputChoice::kDevice, device), "");
    for (const InputChoice input : {InputChoice::kAuto, InputChoice::kCpu, InputChoice::kDevice})
      for (const ResidentChoice resident : {ResidentChoice::kAuto, ResidentChoice::kOff})
        EXPECT_EQ(resident_path_refusal(resident, input, device), "")
            << to_string(resident) << " " << to_string(input) << " " << device;
  }
}

// The pipeline takes the same rule: --resident on with --input cpu is the same usage error there,
// before it reads a pixel.
TEST_F(InputPaths, PipelineRefusesResidentOnWithoutTheDevicePath) {
  const pets::comm::MpiComm mpi;
  pets::comm::MpiCommunicator host(mpi);
  Loader loader(options(false));
  try {
    (void)pets::train::make_input_pipeline(loader, torch::kCPU, InputChoice::kCpu,
                                           pets::train::ResidentChoice::kOn, host);
    ADD_FAILURE() << "no error";
  } catch (const pets::UsageError& e) {
    EXPECT_EQ(e.what(), pets::train::resident_path_refusal(pets::train::ResidentChoice::kOn,
                                                           InputChoice::kCpu, torch::kCPU));
  }
  EXPECT_EQ(loader.options().output, pets::data::LoaderOutput::kPixels);
  EXPECT_FALSE(pets::train::make_input_pipeline(loader, torch::kCPU, InputChoice::kCpu,
                                                pets::train::ResidentChoice::kAuto, host)
                   ->device_input());
}

TEST(ResidentRule, HeldWhenTheStoreTakesAtMostHalfOfTheFreeMemory) {
  EXPECT_TRUE(pets::train::resident_fits(1000, 2000));
  EXPECT_FALSE(pets::train::resident_fits(1001, 2000));
  EXPECT_FALSE(pets::train::resident_fits(1, -1));  // the driver did not say
  EXPECT_TRUE(pets::train::resident_fits(0, 0));
}
