// The backend's decisions (pets/train/run/backend.hpp), each from the options and the CUDA devices
// found, and the backend a CPU machine gets; under mpiexec -n 2.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <cstdlib>
#include <string>

#include "pets/comm/mpi_comm.hpp"
#include "pets/data/loader.hpp"
#include "pets/train/run/backend.hpp"
#include "pets/util/error.hpp"

namespace {

using pets::train::DeviceChoice;
using pets::train::MixedPrecision;
using pets::train::TrainOptions;

TEST(Backend, DeviceChecksNeedAGpuWhereTheyMust) {
  TrainOptions o;
  o.data = "d";
  EXPECT_NO_THROW(pets::train::check_devices(o, 0));
  o.mixed_precision = MixedPrecision::kFp16;
  EXPECT_THROW(pets::train::check_devices(o, 0), pets::UsageError);
  EXPECT_NO_THROW(pets::train::check_devices(o, 1));
  o.device = DeviceChoice::kCpu;
  EXPECT_THROW(pets::train::check_devices(o, 1), pets::UsageError);  // fp16 is CUDA only
  o.mixed_precision = MixedPrecision::kBf16;
  EXPECT_NO_THROW(pets::train::check_devices(o, 0));
  o.device = DeviceChoice::kCuda;
  EXPECT_THROW(pets::train::check_devices(o, 0), pets::UsageError);
  EXPECT_NO_THROW(pets::train::check_devices(o, 2));
}

TEST(Backend, EachRankTakesItsLocalRankModuloTheDevices) {
  EXPECT_EQ(pets::train::pick_device(DeviceChoice::kAuto, 3, 0), c10::Device(c10::kCPU));
  EXPECT_EQ(pets::train::pick_device(DeviceChoice::kCpu, 1, 4), c10::Device(c10::kCPU));
  EXPECT_EQ(pets::train::pick_device(DeviceChoice::kAuto, 5, 4), c10::Device(c10::kCUDA, 1));
  EXPECT_EQ(pets::train::pick_device(DeviceChoice::kCuda, 2, 4), c10::Device(c10::kCUDA, 2));
}

TEST(Backend, AutocastOfEachPrecision) {
  EXPECT_FALSE(pets::train::autocast_dtype(MixedPrecision::kNo).has_value());
  EXPECT_EQ(pets::train::autocast_dtype(MixedPrecision::kBf16), c10::ScalarType::BFloat16);
  EXPECT_EQ(pets::train::autocast_dtype(MixedPrecision::kFp16), c10::ScalarType::Half);
}

TEST(Backend, RunningOutOfMemoryIsOneLineNamingWhatToLower) {
  const pets::comm::MpiComm mpi;
  TrainOptions o;
  o.data = "d";
  o.device = DeviceChoice::kCpu;
  const auto backend = pets::train::make_backend(o, mpi);
  EXPECT_EQ(backend->fitting(pets::train::kBatchSizeKey, 64, [] { return 5; }), 5);
  const auto out_of_memory = [] {
    TORCH_CHECK_WITH(OutOfMemoryError, false,
                     "CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity "
                     "of 139.81 GiB of which 1.20 GiB is free.\nSee the documentation.");
    return 0;
  };
  try {
    backend->fitting(pets::train::kBatchSizeKey, 4096, out_of_memory);
    ADD_FAILURE() << "no error";
  } catch (const pets::UsageError& e) {
    EXPECT_EQ(std::string(e.what()),
              "--batch-size 4096 does not fit in the memory of cpu: 2.00 GiB more were asked "
              "for; lower --batch-size");
  }
  // Another error passes through as it is.
  EXPECT_THROW(
      backend->fitting(pets::train::kBatchSizeKey, 1, []() -> int { throw pets::Error("x"); }),
      pets::Error);
}

TEST(Backend, ACpuRunGetsMpiItsPrecisionAndItsInputPath) {
  const pets::comm::MpiComm mpi;
  TrainOptions o;
  o.data = "d";
  o.device = DeviceChoice::kCpu;
  o.mixed_precision = MixedPrecision::kBf16;
  o.input = pets::train::InputChoice::kDevice;
  const auto backend = pets::train::make_backend(o, mpi);
  EXPECT_TRUE(backend->device().is_cpu());
  EXPECT_EQ(backend->device_comm().backend(), "mpi");
  EXPECT_EQ(backend->device_comm().size(), 2);
  EXPECT_EQ(&backend->device_comm(), &backend->host_comm());
  EXPECT_EQ(backend->forward().autocast(), c10::ScalarType::BFloat16);
  const pets::train::StepSettings step = backend->step_settings();
  EXPECT_EQ(step.forward.autocast(), c10::ScalarType::BFloat16);
  EXPECT_FALSE(step.loss_scaling.has_value());  // fp16 only
  EXPECT_TRUE(backend->device_input());
  pets::data::LoaderOptions lo;
  backend->configure_loader(lo);
  EXPECT_EQ(lo.output, pets::data::LoaderOutput::kCrops);
  ASSERT_TRUE(static_cast<bool>(lo.allocate_staging));
  o.input = pets::train::InputChoice::kAuto;  // the CPU path on the CPU
  o.mixed_precision = MixedPrecision::kNo;
  const auto plain = pets::train::make_backend(o, mpi);
  EXPECT_FALSE(plain->device_input());
  EXPECT_FALSE(plain->forward().autocast().has_value());
  plain->configure_loader(lo);
  EXPECT_EQ(lo.output, pets::data::LoaderOutput::kPixels);
  // What the machine lacks: the same usage error on every rank.
  o.mixed_precision = MixedPrecision::kFp16;
  EXPECT_THROW(pets::train::make_backend(o, mpi), pets::UsageError);
}

// --resident on holds the images for the device input path: with --input auto on the CPU (the
// CPU path) or --input cpu it is a usage error naming both options, made with the device (--data
// "d" does not exist: nothing is read); with --input device it is taken.
TEST(Backend, ResidentOnNeedsTheDeviceInputPath) {
  const pets::comm::MpiComm mpi;
  TrainOptions o;
  o.data = "d";
  o.device = DeviceChoice::kCpu;
  o.resident = pets::train::ResidentChoice::kOn;
  for (const auto input : {pets::train::InputChoice::kAuto, pets::train::InputChoice::kCpu}) {
    o.input = input;
    try {
      (void)pets::train::make_backend(o, mpi);
      ADD_FAILURE() << "no error for --input " << to_string(input);
    } catch (const pets::UsageError& e) {
      EXPECT_NE(std::string(e.what()).find("--resident on"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(input == pets::train::InputChoice::kCpu
                                               ? "not for --input cpu"
                                               : "--input auto does not take on cpu"),
                std::string::npos)
          << e.what();
    }
  }
  o.input = pets::train::InputChoice::kDevice;
  EXPECT_TRUE(pets::train::make_backend(o, mpi)->device_input());
}

// --deterministic sets LibTorch's process-wide switches (this test restores them) and cuBLAS's
// workspace, and says so; without it nothing changes.
TEST(Backend, DeterministicAsksForDeterministicAlgorithmsOnly) {
  const pets::comm::MpiComm mpi;
  auto& context = at::globalContext();
  ::unsetenv("CUBLAS_WORKSPACE_CONFIG");
  TrainOptions o;
  o.data = "d";
  o.device = DeviceChoice::kCpu;
  const auto plain = pets::train::make_backend(o, mpi);
  EXPECT_FALSE(context.deterministicAlgorithms());
  EXPECT_FALSE(context.deterministicCuDNN());
  EXPECT_EQ(std::getenv("CUBLAS_WORKSPACE_CONFIG"), nullptr);
  const auto mentions = [](const std::vector<std::string>& lines, const std::string& part) {
    return std::any_of(lines.begin(), lines.end(),
                       [&](const std::string& l) { return l.find(part) != std::string::npos; });
  };
  EXPECT_FALSE(mentions(plain->notices(), "--deterministic"));
  context.setBenchmarkCuDNN(true);
  o.deterministic = true;
  const auto strict = pets::train::make_backend(o, mpi);
  EXPECT_TRUE(context.deterministicAlgorithms());
  EXPECT_FALSE(context.deterministicAlgorithmsWarnOnly());
  EXPECT_TRUE(context.deterministicCuDNN());
  EXPECT_FALSE(context.benchmarkCuDNN());
  ASSERT_NE(std::getenv("CUBLAS_WORKSPACE_CONFIG"), nullptr);
  EXPECT_STREQ(std::getenv("CUBLAS_WORKSPACE_CONFIG"), ":4096:8");
  EXPECT_TRUE(mentions(strict->notices(), "--deterministic"));
  // An operator without a deterministic algorithm is refused, not run: LibTorch's own check.
  EXPECT_THROW(context.alertNotDeterministic("an operator without one"), c10::Error);
  context.setDeterministicAlgorithms(false, false);
  context.setDeterministicCuDNN(false);
  ::unsetenv("CUBLAS_WORKSPACE_CONFIG");
}

TEST(Backend, NamesItsDeviceForTheStartupLine) {
  const pets::comm::MpiComm mpi;
  TrainOptions o;
  o.data = "d";
  o.device = DeviceChoice::kCpu;
  EXPECT_EQ(pets::train::make_backend(o, mpi)->device_text(), "cpu");
  if (torch::cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device: its name is not checked";
  o.device = DeviceChoice::kCuda;
  const std::string text = pets::train::make_backend(o, mpi)->device_text();
  EXPECT_EQ(text.rfind("cuda ", 0), 0U) << text;  // "cuda" and the GPU's name
  EXPECT_GT(text.size(), std::string("cuda ").size()) << text;
}

}  // namespace
