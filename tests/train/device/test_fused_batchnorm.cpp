// The train-mode forward with the fused BatchNorm kernel (pets/train/step/train_mode_forward.hpp,
// CudaParts::batch_norm_train) against LibTorch's own BatchNorm, add and ReLU. On the CPU: the
// forward driven by the plain operations is the model's forward bit for bit (outputs, running
// statistics, batch counts), which keeps the walk over the model honest everywhere. On a CUDA
// device: the kernel against at::batch_norm for each type and epilogue, the same result run to
// run, and the whole backbone as accurate as LibTorch's under each precision.
#include <gtest/gtest.h>
#include <torch/cuda.h>
#include <torch/torch.h>

#include <algorithm>
#include <iostream>
#include <string>
#include <vector>

#include "model/cuda_test_util.hpp"
#include "pets/compat/torch.hpp"
#include "pets/model/resnet50d.hpp"
#include "pets/train/device/cuda_parts.hpp"
#include "pets/train/step/train_mode_forward.hpp"
#include "pets/util/error.hpp"
#include "train/device/train_cuda_test_util.hpp"

namespace {

using pets::model::ResNet50d;
using pets::test::cuda_or_skip;
using pets::test::max_abs;
using pets::test::random_images;
using pets::train::NormAfterConv;

/// The model's buffers (running statistics, batch counts), copied.
std::vector<torch::Tensor> buffers(const ResNet50d& model) {
  std::vector<torch::Tensor> out;
  for (const auto& b : model->named_buffers(true)) out.push_back(b.value().clone());
  return out;
}

void set_buffers(ResNet50d& model, const std::vector<torch::Tensor>& values) {
  torch::NoGradGuard no_grad;
  std::size_t i = 0;
  for (auto& b : model->named_buffers(true)) b.value().copy_(values.at(i++));
}

/// A model in train mode on `device` with BatchNorm weights, biases and running statistics away
/// from their initial 1 and 0 (zeroed bn3 weights would hide the residual path).
ResNet50d train_mode_model(const torch::Device& device) {
  ResNet50d model = pets::test::spread_model(device, 5, 0.1, 0.8, 1.2);
  model->set_backbone_training(true);
  return model;
}

/// Features under autocast to `dtype` (kFloat: none) with the backbone's BatchNorms through
/// `norm`, or the model's own forward when `norm` is empty.
torch::Tensor features(ResNet50d& model, const torch::Tensor& x, at::ScalarType dtype,
                       const NormAfterConv& norm) {
  torch::NoGradGuard no_grad;
  const bool autocast = dtype != at::kFloat;
  if (autocast) pets::compat::set_autocast(x.device().type(), true, dtype);
  torch::Tensor out =
      norm ? pets::train::train_mode_features(*model, x, norm) : model->forward_features(x);
  if (autocast) pets::compat::end_autocast(x.device().type());
  return out.to(torch::kFloat64).cpu();
}

TEST(TrainModeForward, PlainNormIsTheModelsForwardBitForBit) {
  const torch::Device cpu(torch::kCPU);
  ResNet50d model = train_mode_model(cpu);
  const torch::Tensor x = random_images(cpu, 3, 64);
  const std::vector<torch::Tensor> before = buffers(model);
  for (const auto dtype : {at::kFloat, at::kBFloat16}) {
    set_buffers(model, before);
    const torch::Tensor expected = features(model, x, dtype, {});
    const std::vector<torch::Tensor> expected_buffers = buffers(model);
    set_buffers(model, before);
    const torch::Tensor actual = features(model, x, dtype, pets::train::plain_norm_after_conv());
    EXPECT_TRUE(torch::equal(actual, expected)) << c10::toString(dtype);
    const std::vector<torch::Tensor> actual_buffers = buffers(model);
    ASSERT_EQ(actual_buffers.size(), expected_buffers.size());
    for (std::size_t i = 0; i < actual_buffers.size(); ++i)
      EXPECT_TRUE(torch::equal(actual_buffers[i], expected_buffers[i])) << "buffer " << i;
    // The walk ran every BatchNorm: each batch count advanced by one.
    for (const auto& b : model->named_buffers(true)) {
      if (b.key().find("num_batches_tracked") != std::string::npos) {
        EXPECT_EQ(b.value().item<int64_t>(), 1) << b.key();
      }
    }
  }
}

/// at::batch_norm in train mode, then add and ReLU as the model's operations.
torch::Tensor plain(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& b,
                    torch::Tensor& mean, torch::Tensor& var, const torch::Tensor& residual,
                    bool relu) {
  torch::Tensor y = at::batch_norm(x, w, b, mean, var, /*training=*/true, 0.1, 1e-5,
                                   /*cudnn_enabled=*/true);
  if (residual.defined()) y.add_(residual);
  if (relu) y.relu_();
  return y;
}

TEST(FusedBatchNormCuda, MatchesBatchNormForEachTypeAndEpilogue) {
  const pets::train::CudaParts* cuda = cuda_or_skip();
  if (cuda == nullptr) GTEST_SKIP() << "no CUDA device";
  const torch::Device device(torch::kCUDA);
  const auto f32 = torch::TensorOptions().device(device).dtype(torch::kFloat32);
  const std::vector<std::vector<int64_t>> shapes = {
      {8, 64, 28, 28}, {4, 2048, 7, 7}, {3, 32, 15, 17}, {2, 8, 1, 1}};
  for (const auto& shape : shapes) {
    const int64_t c = shape[1];
    torch::manual_seed(c);
    // Channel means far from zero against their spread: the sums must not cancel.
    const torch::Tensor base =
        torch::randn(shape, f32) * (torch::rand({1, c, 1, 1}, f32) * 2 + 0.5) +
        torch::randn({1, c, 1, 1}, f32) * 8;
    const torch::Tensor w = torch::rand({c}, f32) + 0.5, b = torch::randn({c}, f32);
    const torch::Tensor mean0 = torch::randn({c}, f32), var0 = torch::rand({c}, f32) + 0.5;
    for (const auto dtype : {at::kFloat, at::kBFloat16, at::kHalf}) {
      const torch::Tensor x = base.to(dtype).contiguous(torch::MemoryFormat::ChannelsLast);
      const torch::Tensor r =
          torch::randn(shape, f32).to(dtype).contiguous(torch::MemoryFormat::ChannelsLast);
      // The type's relative rounding (float: what summing in another order leaves of the
      // statistics).
      const double unit = dtype == at::kBFloat16 ? 1.0 / 256
                          : dtype == at::kHalf   ? 1.0 / 2048
                                                 : 1e-5;
      for (const bool residual : {false, true}) {
        for (const bool relu : {false, true}) {
          const std::string what = std::string(c10::toString(dtype)) + " C=" + std::to_string(c) +
                                   (residual ? " +residual" : "") + (relu ? " relu" : "");
          torch::Tensor m1 = mean0.clone(), v1 = var0.clone(), m2 = mean0.clone(),
                        v2 = var0.clone();
          const torch::Tensor res = residual ? r : torch::Tensor();
          const torch::Tensor expected = plain(x, w, b, m1, v1, res, relu);
          const torch::Tensor actual =
              cuda->batch_norm_train(x, w, b, m2, v2, 0.1, 1e-5, res, relu);
          ASSERT_EQ(actual.scalar_type(), dtype) << what;
          EXPECT_TRUE(actual.is_contiguous(torch::MemoryFormat::ChannelsLast)) << what;
          const torch::Tensor e = expected.to(torch::kFloat64), a = actual.to(torch::kFloat64);
          // A rounding flipped either way, before and after the residual: within four units of
          // the larger of the result and the residual (and of 1 near zero).
          const torch::Tensor bound =
              (e.abs() + (residual ? r.to(torch::kFloat64).abs() : torch::zeros_like(e)) + 1) *
              (4 * unit);
          const torch::Tensor excess = (a - e).abs() - bound;
          EXPECT_LE(excess.max().item<double>(), 0.0) << what << ": max |diff| " << max_abs(a - e);
          EXPECT_LE(max_abs(m2 - m1), 1e-5 * (1 + max_abs(m1))) << what;
          EXPECT_LE(max_abs(v2 - v1), 1e-4 * (1 + max_abs(v1))) << what;
        }
      }
    }
  }
}

TEST(FusedBatchNormCuda, SameResultRunToRun) {
  const pets::train::CudaParts* cuda = cuda_or_skip();
  if (cuda == nullptr) GTEST_SKIP() << "no CUDA device";
  const auto f32 = torch::TensorOptions().device(torch::kCUDA).dtype(torch::kFloat32);
  const torch::Tensor x = (torch::randn({64, 256, 28, 28}, f32) + 3)
                              .to(torch::kBFloat16)
                              .contiguous(torch::MemoryFormat::ChannelsLast);
  const torch::Tensor w = torch::rand({256}, f32), b = torch::randn({256}, f32);
  std::vector<torch::Tensor> outs, means;
  for (int run = 0; run < 2; ++run) {
    torch::Tensor m = torch::zeros({256}, f32), v = torch::ones({256}, f32);
    outs.push_back(cuda->batch_norm_train(x, w, b, m, v, 0.1, 1e-5, x, true));
    means.push_back(torch::cat({m, v}));
  }
  EXPECT_TRUE(torch::equal(outs[0], outs[1]));
  EXPECT_TRUE(torch::equal(means[0], means[1]));
}

TEST(FusedBatchNormCuda, RefusesWhatItDoesNotTake) {
  const pets::train::CudaParts* cuda = cuda_or_skip();
  if (cuda == nullptr) GTEST_SKIP() << "no CUDA device";
  const auto f32 = torch::TensorOptions().device(torch::kCUDA).dtype(torch::kFloat32);
  torch::Tensor m = torch::zeros({12}, f32), v = torch::ones({12}, f32);
  const torch::Tensor w = torch::ones({12}, f32), b = torch::zeros({12}, f32);
  // 12 channels: not a multiple of 8.
  EXPECT_THROW(cuda->batch_norm_train(torch::randn({2, 12, 4, 4}, f32), w, b, m, v, 0.1, 1e-5,
                                      torch::Tensor(), false),
               pets::Error);
  // One value per channel.
  torch::Tensor m8 = torch::zeros({8}, f32), v8 = torch::ones({8}, f32);
  EXPECT_THROW(
      cuda->batch_norm_train(torch::randn({1, 8, 1, 1}, f32), torch::ones({8}, f32),
                             torch::zeros({8}, f32), m8, v8, 0.1, 1e-5, torch::Tensor(), false),
      pets::Error);
}

/// The backbone in train mode under `dtype`: the fused forward's error against the fp32 forward
/// (TF32 off) at most twice LibTorch's own forward's under the same precision, plus a margin
/// (fp32: LibTorch's is the reference itself; the fused one within `margin`); the running
/// statistics likewise.
void expect_backbone_as_accurate(at::ScalarType dtype, double margin) {
  const pets::train::CudaParts* cuda = pets::train::cuda_parts();
  const torch::Device device(torch::kCUDA);
  const pets::test::NoTf32 exact;
  ResNet50d model = train_mode_model(device);
  const torch::Tensor x = random_images(device, 16, 128);
  const std::vector<torch::Tensor> before = buffers(model);
  const torch::Tensor reference = features(model, x, at::kFloat, {});
  const std::vector<torch::Tensor> reference_buffers = buffers(model);
  set_buffers(model, before);
  const torch::Tensor native = features(model, x, dtype, {});
  const std::vector<torch::Tensor> native_buffers = buffers(model);
  set_buffers(model, before);
  const torch::Tensor fused = features(model, x, dtype, pets::train::fused_norm_after_conv(*cuda));
  const std::vector<torch::Tensor> fused_buffers = buffers(model);

  const std::string what = c10::toString(dtype);
  pets::test::expect_fused_as_accurate(reference, native, fused, margin, "train-mode " + what);
  double native_stats = 0, fused_stats = 0;
  for (std::size_t i = 0; i < before.size(); ++i) {
    const torch::Tensor r = reference_buffers[i].to(torch::kFloat64);
    if (!reference_buffers[i].is_floating_point()) {
      EXPECT_TRUE(torch::equal(fused_buffers[i], reference_buffers[i])) << "batch count " << i;
      continue;
    }
    const double scale = 1 + max_abs(r);
    native_stats =
        std::max(native_stats, max_abs(native_buffers[i].to(torch::kFloat64) - r) / scale);
    fused_stats = std::max(fused_stats, max_abs(fused_buffers[i].to(torch::kFloat64) - r) / scale);
  }
  std::cout << "[ parity  ] train-mode " << what
            << ": running statistics' error against fp32, LibTorch " << native_stats << ", fused "
            << fused_stats << "\n";
  EXPECT_LE(fused_stats, 2 * native_stats + margin) << what;
}

/// The whole backbone under each precision (the parameter).
class FusedBatchNormCudaBackbone : public ::testing::TestWithParam<at::ScalarType> {};

TEST_P(FusedBatchNormCudaBackbone, AsAccurateAsLibTorchs) {
  if (cuda_or_skip() == nullptr) GTEST_SKIP() << "no CUDA device";
  expect_backbone_as_accurate(GetParam(), 1e-4);
}

INSTANTIATE_TEST_SUITE_P(Precisions, FusedBatchNormCudaBackbone,
                         ::testing::ValuesIn(pets::test::kPrecisions), pets::test::precision_name);

}  // namespace
