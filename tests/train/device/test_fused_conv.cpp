// The folded backbone's convolutions through cuDNN's fused convolution + bias (+ add) + ReLU
// (pets::train::fused_folded_conv, CudaParts::conv_bias_relu) against LibTorch's separate
// operations (FoldedBackbone::plain_conv). On the CPU: every convolution of the folded forward
// goes through the run it is given, with the epilogue the architecture asks for, and the plain run
// is the forward bit for bit, which keeps the hook honest everywhere. On a CUDA device: each
// layer shape of ResNet-50d and the whole backbone, as accurate as LibTorch's under each
// precision, and the refusals.
#include <gtest/gtest.h>
#include <torch/cuda.h>
#include <torch/torch.h>

#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "model/cuda_test_util.hpp"
#include "pets/model/folded.hpp"
#include "pets/model/resnet50d.hpp"
#include "pets/train/device/cuda_parts.hpp"
#include "pets/train/step/backbone_forward.hpp"
#include "pets/util/error.hpp"
#include "train/device/train_cuda_test_util.hpp"

namespace {

using pets::model::FoldedBackbone;
using pets::model::ResNet50d;
using pets::test::cuda_or_skip;
using pets::test::max_abs;
using pets::test::random_images;

/// A model in eval mode on `device`, channels-last, with BatchNorms away from the identity.
ResNet50d eval_model(const torch::Device& device) {
  ResNet50d model = pets::test::spread_model(device, 7, 0.3, 0.5, 2.0);
  model->eval();
  return model;
}

TEST(FoldedConvRun, EveryConvolutionGoesThroughTheRunWithItsEpilogue) {
  const ResNet50d model = eval_model(torch::Device(torch::kCPU));
  const FoldedBackbone folded(*model);
  const torch::Tensor x = random_images(torch::Device(torch::kCPU), 2, 64);
  int calls = 0, relus = 0, residuals = 0;
  const FoldedBackbone::ConvRun counting = [&](const FoldedBackbone::Conv& conv,
                                               const torch::Tensor& in,
                                               const torch::Tensor& residual, bool relu) {
    ++calls;
    relus += relu;
    residuals += residual.defined();
    // A residual is added only where a ReLU follows: the last convolution of each block.
    EXPECT_TRUE(!residual.defined() || relu);
    return FoldedBackbone::plain_conv(conv, in, residual, relu);
  };
  const torch::Tensor expected = folded.forward_features(x);
  const torch::Tensor actual = folded.forward_features(x, counting);
  EXPECT_TRUE(torch::equal(actual, expected));
  // The stem's 3, then 16 blocks of 3 and the 4 downsample convolutions (no ReLU of their own).
  EXPECT_EQ(calls, 3 + 16 * 3 + 4);
  EXPECT_EQ(relus, 3 + 16 * 3);
  EXPECT_EQ(residuals, 16);
}

struct LayerShape {
  int64_t batch, in, out, side, kernel, stride;
};

// Each kind of convolution of ResNet-50d (the stem's first on 3 channels, 1x1 and 3x3, stride 1
// and 2), with and without the residual, in each type: the fused result's error against the
// fp32 convolution of the same rounded inputs at most twice LibTorch's separate operations'
// plus 1e-3 of the output's scale.
TEST(FusedConvCuda, MatchesThePlainOperationsForEachLayerKindAndType) {
  const pets::train::CudaParts* cuda = cuda_or_skip();
  if (cuda == nullptr) GTEST_SKIP() << "no CUDA device";
  const torch::Device device(torch::kCUDA);
  const std::vector<LayerShape> shapes = {{4, 3, 32, 64, 3, 2},    {4, 64, 64, 28, 3, 1},
                                          {4, 256, 64, 28, 1, 1},  {4, 64, 256, 28, 1, 1},
                                          {4, 128, 128, 28, 3, 2}, {2, 512, 2048, 7, 1, 1}};
  for (const auto dtype : {at::kFloat, at::kBFloat16, at::kHalf}) {
    for (const LayerShape& s : shapes) {
      for (const bool with_residual : {false, true}) {
        torch::manual_seed(s.in * 7 + s.kernel);
        const auto f32 = torch::TensorOptions().device(device).dtype(torch::kFloat32);
        const auto cl = torch::MemoryFormat::ChannelsLast;
        const torch::Tensor x =
            torch::randn({s.batch, s.in, s.side, s.side}, f32).to(dtype).contiguous(cl);
        const torch::Tensor w =
            (torch::randn({s.out, s.in, s.kernel, s.kernel}, f32) / std::sqrt(s.in * s.kernel))
                .to(dtype)
                .contiguous(cl);
        const torch::Tensor b = torch::randn({s.out}, f32).to(dtype);
        FoldedBackbone::Conv conv;
        conv.weight = w;
        conv.bias = b;
        conv.stride = s.stride;
        conv.padding = s.kernel / 2;
        const int64_t out_side = (s.side + 2 * conv.padding - s.kernel) / s.stride + 1;
        torch::Tensor residual;
        if (with_residual)
          residual =
              torch::randn({s.batch, s.out, out_side, out_side}, f32).to(dtype).contiguous(cl);
        torch::Tensor reference;
        {
          pets::test::NoTf32 exact;
          reference = torch::conv2d(x.to(torch::kFloat32), w.to(torch::kFloat32),
                                    b.to(torch::kFloat32), conv.stride, conv.padding);
          if (with_residual) reference += residual.to(torch::kFloat32);
          reference = reference.relu().to(torch::kFloat64);
        }
        const torch::Tensor plain = FoldedBackbone::plain_conv(conv, x, residual, true);
        const torch::Tensor fused =
            cuda->conv_bias_relu(x, w, b, conv.stride, conv.padding, residual);
        const std::string what = std::string(c10::toString(dtype)) + " " + std::to_string(s.in) +
                                 "->" + std::to_string(s.out) + " " + std::to_string(s.kernel) +
                                 "x" + std::to_string(s.kernel) + " stride " +
                                 std::to_string(s.stride) + (with_residual ? " + residual" : "");
        ASSERT_EQ(fused.sizes(), reference.sizes()) << what;
        EXPECT_EQ(fused.scalar_type(), dtype) << what;
        const double scale = max_abs(reference);
        const double plain_error = max_abs(plain.to(torch::kFloat64) - reference) / scale;
        const double fused_error = max_abs(fused.to(torch::kFloat64) - reference) / scale;
        std::cout << "[ parity  ] conv " << what << ": relative error against fp32, LibTorch "
                  << plain_error << ", fused " << fused_error << "\n";
        EXPECT_LE(fused_error, 2 * plain_error + 1e-3) << what;
      }
    }
  }
}

TEST(FusedConvCuda, RefusesMixedTypes) {
  const pets::train::CudaParts* cuda = cuda_or_skip();
  if (cuda == nullptr) GTEST_SKIP() << "no CUDA device";
  const auto f32 = torch::TensorOptions().device(torch::kCUDA).dtype(torch::kFloat32);
  const torch::Tensor x = torch::randn({1, 8, 4, 4}, f32);
  const torch::Tensor w = torch::randn({8, 8, 1, 1}, f32), b = torch::randn({8}, f32);
  EXPECT_THROW(cuda->conv_bias_relu(x.to(torch::kBFloat16), w, b, 1, 0, {}), pets::Error);
  EXPECT_THROW(
      cuda->conv_bias_relu(x, w, b, 1, 0, torch::randn({1, 8, 4, 4}, f32).to(torch::kHalf)),
      pets::Error);
  EXPECT_THROW(cuda->conv_bias_relu(x.cpu(), w, b, 1, 0, {}), pets::Error);
}

/// The whole folded backbone as BackboneForward runs it under `dtype` (kFloat: no autocast): the
/// fused convolutions' error against the fp32 forward (TF32 off) at most twice LibTorch's own
/// under the same precision plus `margin`.
void expect_backbone_as_accurate(at::ScalarType dtype, double margin) {
  const pets::train::CudaParts* cuda = pets::train::cuda_parts();
  const torch::Device device(torch::kCUDA);
  ResNet50d model = eval_model(device);
  const FoldedBackbone folded(*model);
  const torch::Tensor x = random_images(device, 16, 128);
  const std::optional<c10::ScalarType> autocast =
      dtype == at::kFloat ? std::nullopt : std::optional<c10::ScalarType>(dtype);
  const pets::train::BackboneForward plain(autocast);
  const pets::train::BackboneForward fused(autocast, {},
                                           pets::train::fused_folded_conv(*cuda, autocast));
  ASSERT_TRUE(fused.fused_folded_conv());
  torch::Tensor reference, native, with_fusion;
  {
    pets::test::NoTf32 exact;
    reference = pets::train::BackboneForward(std::nullopt)(*model, &folded, x);
    native = plain(*model, &folded, x);
    with_fusion = fused(*model, &folded, x);
  }
  pets::test::expect_fused_as_accurate(reference, native, with_fusion, margin,
                                       std::string("folded ") + c10::toString(dtype));
}

/// The whole backbone under each precision (the parameter).
class FusedConvCudaBackbone : public ::testing::TestWithParam<at::ScalarType> {};

TEST_P(FusedConvCudaBackbone, AsAccurateAsLibTorchs) {
  if (cuda_or_skip() == nullptr) GTEST_SKIP() << "no CUDA device";
  expect_backbone_as_accurate(GetParam(), 1e-4);
}

INSTANTIATE_TEST_SUITE_P(Precisions, FusedConvCudaBackbone,
                         ::testing::ValuesIn(pets::test::kPrecisions), pets::test::precision_name);

}  // namespace
