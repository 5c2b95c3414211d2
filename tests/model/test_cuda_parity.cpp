// Parity on a CUDA device with the timm 0.9.16 / torch 1.13 fixture that tests/model's parity
// test checks on the CPU: fp32 within the same tolerance (TF32 off: cuDNN and cuBLAS would
// otherwise round the operands to 10 mantissa bits), bf16 and fp16 autocast of the backbone
// within stated tolerances. Without a CUDA device the CUDA cases are skipped; the bf16 autocast
// case on the CPU runs everywhere.
#include <gtest/gtest.h>
#include <torch/cuda.h>

#include <iostream>
#include <optional>
#include <string>

#include "fixture_dir.hpp"
#include "model/cuda_test_util.hpp"
#include "pets/compat/torch.hpp"
#include "pets/model/resnet50d.hpp"
#include "pets/model/state_dict.hpp"

namespace {

using pets::model::ResNet50d;

// max |actual - expected| <= tolerance * max |expected|. fp32: the CPU parity test's 1e-3.
// bf16 (8 mantissa bits): the CPU's bf16 autocast lands at 6.6e-3 on this fixture, the
// tolerance is three times that. fp16 (11 bits, 8 times finer roundings): 5e-3.
constexpr double kFp32Tolerance = 1e-3;
constexpr double kBf16Tolerance = 2e-2;
constexpr double kFp16Tolerance = 5e-3;

torch::Tensor io(const std::string& key) {
  static const auto tensors =
      pets::model::read_tensors(pets::test::fixture_dir() + "/io.safetensors");
  for (const auto& [name, t] : tensors)
    if (name == key) return t.to(t.is_floating_point() ? torch::kFloat32 : torch::kInt64);
  throw std::runtime_error("fixture io.safetensors has no '" + key + "'");
}

ResNet50d load_model(const torch::Device& device) {
  const std::string weights = pets::test::fixture_dir() + "/weights.safetensors";
  const auto file = pets::model::SafetensorsFile::open(weights);
  ResNet50d model(file.at("fc.weight").shape.at(0));
  const auto report = pets::model::load_state_dict(*model, weights);
  EXPECT_TRUE(report.skipped.empty());
  model->freeze_backbone();
  model->to(device);
  return model;
}

/// The relative error max |actual - expected| / max |expected|, in float64 on the CPU.
double relative_error(const torch::Tensor& actual, const torch::Tensor& expected) {
  EXPECT_EQ(actual.sizes(), expected.sizes());
  const auto a = actual.to(torch::kCPU, torch::kFloat64);
  const auto e = expected.to(torch::kCPU, torch::kFloat64);
  EXPECT_TRUE(torch::isfinite(a).all().item<bool>()) << "non-finite output";
  return (a - e).abs().max().item<double>() / e.abs().max().item<double>();
}

/// Eval features and logits of the backbone under autocast to `dtype` (kFloat: none), as the
/// trainer runs it: channels-last, no autograd, head in fp32.
void expect_eval_parity(const torch::Device& device, at::ScalarType dtype, double tolerance) {
  ResNet50d model = load_model(device);
  model->eval();
  model->to_channels_last();
  torch::NoGradGuard no_grad;
  const auto input = io("input").to(device).contiguous(torch::MemoryFormat::ChannelsLast);
  const bool autocast = dtype != at::kFloat;
  if (autocast) pets::compat::set_autocast(device.type(), true, dtype);
  const torch::Tensor features = model->forward_features(input).to(torch::kFloat32);
  if (autocast) pets::compat::end_autocast(device.type());
  const torch::Tensor logits = model->forward_head(features);
  const double feature_error = relative_error(features, io("features_eval"));
  const double logit_error = relative_error(logits, io("logits_eval"));
  EXPECT_LE(feature_error, tolerance) << "features_eval on " << device << ", " << dtype;
  EXPECT_LE(logit_error, tolerance) << "logits_eval on " << device << ", " << dtype;
  std::cout << "[ parity  ] " << device << " " << dtype << ": features " << feature_error
            << ", logits " << logit_error << " (tolerance " << tolerance << ")\n";
}

bool cuda() { return torch::cuda::is_available(); }

/// The tolerance of a precision: fp32 the CPU parity test's, bf16 and fp16 their own.
double tolerance_of(at::ScalarType precision) {
  if (precision == at::kFloat) return kFp32Tolerance;
  return precision == at::kBFloat16 ? kBf16Tolerance : kFp16Tolerance;
}

class CudaEvalParity : public ::testing::TestWithParam<at::ScalarType> {};

TEST_P(CudaEvalParity, WithinItsTolerance) {
  if (!cuda()) GTEST_SKIP() << "no CUDA device";
  std::optional<pets::test::NoTf32> no_tf32;  // fp32 within the CPU's tolerance: TF32 off
  if (GetParam() == at::kFloat) no_tf32.emplace();
  expect_eval_parity(torch::Device(torch::kCUDA, 0), GetParam(), tolerance_of(GetParam()));
}

INSTANTIATE_TEST_SUITE_P(Precisions, CudaEvalParity, ::testing::ValuesIn(pets::test::kPrecisions),
                         pets::test::precision_name);

// The bf16 tolerance on the CPU's autocast: the same check, runnable without a GPU.
TEST(CudaParity, CpuBf16WithinTheBf16Tolerance) {
  expect_eval_parity(torch::Device(torch::kCPU), at::kBFloat16, kBf16Tolerance);
}

// Train mode (batch statistics), the trainer's frozen-backbone step: loss and fc's gradients.
TEST(CudaParity, TrainStepLossAndFcGradientsFp32) {
  if (!cuda()) GTEST_SKIP() << "no CUDA device";
  const pets::test::NoTf32 no_tf32;
  const torch::Device device(torch::kCUDA, 0);
  ResNet50d model = load_model(device);
  model->train();
  torch::Tensor features;
  {
    torch::NoGradGuard no_grad;
    features = model->forward_features(io("input").to(device));
  }
  const torch::Tensor loss =
      torch::nn::functional::cross_entropy(model->forward_head(features), io("labels").to(device));
  loss.backward();
  EXPECT_LE(relative_error(loss.reshape({1}), io("loss_train")), kFp32Tolerance);
  EXPECT_LE(relative_error(model->fc->weight.grad(), io("fc.weight.grad")), kFp32Tolerance);
  EXPECT_LE(relative_error(model->fc->bias.grad(), io("fc.bias.grad")), kFp32Tolerance);
  EXPECT_LE(relative_error(model->bn1->running_mean, io("bn1.running_mean_after_train_step")),
            kFp32Tolerance);
}

}  // namespace
