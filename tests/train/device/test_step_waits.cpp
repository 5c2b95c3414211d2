// How often a training step on a CUDA device makes the host wait for it (LibTorch's sync debug
// mode counts the waits, CudaParts::device_waits): once in fp32 and bf16 (the allreduced loss,
// image count and stop requests, read together), twice in fp16 (and whether the unscaled
// gradients are finite). Each wait leaves the device idle while the host queues the next work.
// The step runs as pets_train runs it: the backend's forward (the fused BatchNorm kernel), its
// communicator (NCCL), the images already on the device (the device input path), the BatchNorm
// statistics that several ranks carry in each step. And the warm-up before the first epoch leaves
// the model as it was. And a trained layer4 (--unfreeze) takes LibTorch's differentiable path,
// not the forward-only fused kernels: its gradients on the device are the CPU's. And the caching
// allocator's peaks that `pets_bench --step-only` reports on a GPU (CudaParts::memory_peaks) cover
// what a step held and outlast the cache's return to the driver. Skipped without a CUDA device.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "pets/comm/communicator.hpp"
#include "pets/comm/mpi_comm.hpp"
#include "pets/data/loader.hpp"
#include "pets/model/resnet50d.hpp"
#include "pets/train/device/cuda_parts.hpp"
#include "pets/train/run/backend.hpp"
#include "pets/train/step/train_step.hpp"
#include "train/device/train_cuda_test_util.hpp"

namespace {

using pets::train::MixedPrecision;

/// The backend pets_train makes for --device cuda and `precision`.
std::unique_ptr<pets::train::Backend> cuda_backend(MixedPrecision precision,
                                                   const pets::comm::MpiComm& mpi) {
  pets::train::TrainOptions o;
  o.data = "unused";
  o.device = pets::train::DeviceChoice::kCuda;
  o.mixed_precision = precision;
  return pets::train::make_backend(o, mpi);
}

/// A seeded ResNet-50d of 5 classes as a run trains it: frozen backbone, channels-last, on
/// `device`, in train mode.
pets::model::ResNet50d train_mode_model(const torch::Device& device) {
  torch::manual_seed(3);
  pets::model::ResNet50d model(5);
  model->freeze_backbone();
  model->to(device);
  model->to_channels_last();
  model->train();
  return model;
}

class StepWaits : public ::testing::TestWithParam<MixedPrecision> {};

TEST_P(StepWaits, OneReadOfTheDevicePerStepTwoUnderFp16) {
  const pets::train::CudaParts* cuda = pets::test::cuda_or_skip();
  if (cuda == nullptr) GTEST_SKIP() << "no CUDA device";
  const pets::comm::MpiComm mpi;
  const auto backend = cuda_backend(GetParam(), mpi);
  pets::model::ResNet50d model = train_mode_model(backend->device());
  pets::train::OneCycleOptions schedule;
  schedule.total_steps = 10;
  pets::train::TrainStep step(*model, backend->device_comm(), schedule, backend->step_settings());
  pets::data::Batch batch;
  batch.n = 8;
  batch.h = batch.w = 64;
  batch.labels = {0, 1, 2, 3, 4, 0, 1, 2};
  const torch::Tensor images = torch::randn({8, 3, 64, 64}, torch::TensorOptions(backend->device()))
                                   .contiguous(torch::MemoryFormat::ChannelsLast);
  const auto one_step = [&] {
    EXPECT_EQ(step.run(
                      batch, [] { return false; }, nullptr, images)
                  .images,
              8);
  };
  one_step();  // first calls: cuDNN's and the allocator's set-up
  const std::int64_t waits = cuda->device_waits([&] {
    for (int i = 0; i < 3; ++i) one_step();
  });
  EXPECT_EQ(waits, 3 * (GetParam() == MixedPrecision::kFp16 ? 2 : 1));
}

// The warm-up before the first epoch on a GPU (Backend::warm_up) runs the backend's train-mode
// forward (the fused BatchNorm kernel) for each batch size: the statistics it updates are put
// back bit for bit.
TEST_P(StepWaits, AWarmUpLeavesTheBatchNormStatisticsAsTheyWere) {
  if (pets::test::cuda_or_skip() == nullptr) GTEST_SKIP() << "no CUDA device";
  const pets::comm::MpiComm mpi;
  const auto backend = cuda_backend(GetParam(), mpi);
  pets::model::ResNet50d model = train_mode_model(backend->device());
  std::vector<torch::Tensor> before;
  for (const auto& b : model->named_buffers(true)) before.push_back(b.value().clone());
  backend->warm_up(*model, nullptr, {8, 5}, 64);
  std::size_t i = 0;
  for (const auto& b : model->named_buffers(true))
    EXPECT_TRUE(torch::equal(b.value(), before[i++])) << b.key();
  // A forward as the warm-up runs it does change them.
  backend->forward()(*model, nullptr,
                     torch::randn({8, 3, 64, 64}, torch::TensorOptions(backend->device()))
                         .contiguous(torch::MemoryFormat::ChannelsLast));
  EXPECT_FALSE(torch::equal(model->named_buffers(true)[0].value(), before[0]));
}

// --unfreeze layer4 on the device as pets_train runs it (the backend's settings, whose frozen
// forward is the fused BatchNorm kernel): the step trains layer4 through autograd, and its
// averaged gradients are those of the same step on the CPU in fp32, within TF32's and bf16's
// rounding.
TEST(TrainedBackboneOnCuda, Layer4TakesTheDifferentiablePath) {
  if (pets::test::cuda_or_skip() == nullptr) GTEST_SKIP() << "no CUDA device";
  const pets::comm::MpiComm mpi;
  pets::train::OneCycleOptions schedule;
  schedule.total_steps = 10;
  pets::data::Batch batch;
  batch.n = 8;
  batch.h = batch.w = 64;
  batch.labels = {0, 1, 2, 3, 4, 0, 1, 2};
  torch::manual_seed(9);
  const torch::Tensor images =
      torch::randn({8, 3, 64, 64}).contiguous(torch::MemoryFormat::ChannelsLast);
  const pets::train::BackboneTraining layer4{4, 0.1};
  // The reference: the CPU in fp32.
  const torch::Device cpu(torch::kCPU);
  pets::comm::MpiCommunicator cpu_comm(mpi);
  pets::model::ResNet50d reference = train_mode_model(cpu);
  pets::train::StepSettings cpu_settings;
  cpu_settings.backbone = layer4;
  pets::train::TrainStep cpu_step(*reference, cpu_comm, schedule, cpu_settings);
  cpu_step.set_backbone_training(true);
  ASSERT_FALSE(cpu_step
                   .run(
                       batch, [] { return false; }, nullptr, images)
                   .skipped);
  for (const MixedPrecision precision : {MixedPrecision::kNo, MixedPrecision::kBf16}) {
    const auto backend = cuda_backend(precision, mpi);
    ASSERT_TRUE(backend->forward().fused_train_norm());
    pets::model::ResNet50d model = train_mode_model(backend->device());
    pets::train::StepSettings settings = backend->step_settings();
    settings.backbone = layer4;
    pets::train::TrainStep step(*model, backend->device_comm(), schedule, settings);
    step.set_backbone_training(true);
    const auto result = step.run(
        batch, [] { return false; }, nullptr, images.to(backend->device()));
    ASSERT_FALSE(result.skipped);
    const auto& ours = step.backbone_parameters();
    const auto& theirs = cpu_step.backbone_parameters();
    ASSERT_EQ(ours.size(), theirs.size());
    const double tolerance = precision == MixedPrecision::kNo ? 2e-2 : 1e-1;
    for (std::size_t i = 0; i < ours.size(); ++i) {
      const torch::Tensor grad = ours[i].second.grad().cpu();
      const torch::Tensor want = theirs[i].second.grad();
      ASSERT_TRUE(torch::isfinite(grad).all().item<bool>()) << ours[i].first;
      const double error =
          (grad - want).norm().item<double>() / std::max(want.norm().item<double>(), 1e-30);
      EXPECT_LT(error, tolerance) << ours[i].first << " under "
                                  << pets::train::to_string(precision);
    }
  }
}

TEST(MemoryPeaksOnCuda, CoverWhatWasHeldAndOutlastItsRelease) {
  const pets::train::CudaParts* cuda = pets::test::cuda_or_skip();
  if (cuda == nullptr) GTEST_SKIP() << "no CUDA device";
  const pets::train::MemoryPeaks before = cuda->memory_peaks(0);
  constexpr std::int64_t kBytes = std::int64_t{256} << 20;
  {
    const torch::Tensor held =
        torch::empty({kBytes}, torch::dtype(torch::kUInt8).device(torch::kCUDA, 0));
    const pets::train::MemoryPeaks during = cuda->memory_peaks(0);
    EXPECT_GE(during.allocated, kBytes);
    EXPECT_GE(during.reserved, during.allocated);
  }
  (void)cuda->free_memory(0);  // gives the allocator's cache back to the driver
  const pets::train::MemoryPeaks after = cuda->memory_peaks(0);
  EXPECT_GE(after.allocated, std::max(before.allocated, kBytes));
  EXPECT_GE(after.reserved, after.allocated);
}

INSTANTIATE_TEST_SUITE_P(Precisions, StepWaits,
                         ::testing::Values(MixedPrecision::kNo, MixedPrecision::kBf16,
                                           MixedPrecision::kFp16),
                         [](const ::testing::TestParamInfo<MixedPrecision>& info) {
                           return info.param == MixedPrecision::kNo     ? std::string("Fp32")
                                  : info.param == MixedPrecision::kBf16 ? std::string("Bf16")
                                                                        : std::string("Fp16");
                         });

}  // namespace
