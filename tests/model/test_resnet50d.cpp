// Structure of our ResNet-50d against timm's: the state-dict names and shapes of the reference
// fixture (a timm resnet50d state dict), odd input sizes (ceil_mode shortcuts), freezing, init.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "fixture_dir.hpp"
#include "model/model_test_util.hpp"
#include "pets/model/folded.hpp"
#include "pets/model/resnet50d.hpp"
#include "pets/model/state_dict.hpp"

namespace {

using pets::model::ResNet50d;

TEST(ResNet50d, StateDictNamesAndShapesAreTimms) {
  const auto timm =
      pets::model::SafetensorsFile::open(pets::test::fixture_dir() + "/weights.safetensors");
  const int64_t classes = timm.at("fc.weight").shape.at(0);
  ResNet50d model(classes);
  const auto ours = pets::model::state_dict(*model);
  ASSERT_EQ(ours.size(), timm.tensors().size());
  for (const auto& [name, tensor] : ours) {
    const auto* info = timm.find(name);
    ASSERT_NE(info, nullptr) << "timm has no '" << name << "'";
    EXPECT_EQ(tensor.sizes(), c10::IntArrayRef(info->shape)) << name;
  }
}

TEST(ResNet50d, DeepStemAndAvgDownLayout) {
  ResNet50d model(37);
  const auto params = model->named_parameters(true);
  EXPECT_EQ(params["conv1.0.weight"].sizes(), (std::vector<int64_t>{32, 3, 3, 3}));
  EXPECT_EQ(params["conv1.3.weight"].sizes(), (std::vector<int64_t>{32, 32, 3, 3}));
  EXPECT_EQ(params["conv1.6.weight"].sizes(), (std::vector<int64_t>{64, 32, 3, 3}));
  EXPECT_EQ(params["layer2.0.downsample.1.weight"].sizes(), (std::vector<int64_t>{512, 256, 1, 1}));
  EXPECT_EQ(params["fc.weight"].sizes(), (std::vector<int64_t>{37, 2048}));
  // The stride sits on conv2 (3x3), not conv1 (1x1).
  auto* block = model->layer2[0]->as<pets::model::BottleneckImpl>();
  ASSERT_NE(block, nullptr);
  EXPECT_EQ(block->conv1->options.stride()->at(0), 1);
  EXPECT_EQ(block->conv2->options.stride()->at(0), 2);
  EXPECT_TRUE(model->named_buffers(true).contains("layer1.0.bn1.num_batches_tracked"));
}

// Odd sizes at every stage: the avg-down shortcut must round up (ceil_mode) exactly as the 3x3
// stride-2 convolution does, or the residual add fails.
TEST(ResNet50d, OddInputSizesFollowCeilMode) {
  torch::manual_seed(0);
  ResNet50d model(5);
  model->eval();
  torch::NoGradGuard no_grad;
  for (auto hw : std::vector<std::pair<int64_t, int64_t>>{{97, 65}, {161, 225}, {33, 33}}) {
    const auto out = model->forward(torch::randn({1, 3, hw.first, hw.second}));
    EXPECT_EQ(out.sizes(), (std::vector<int64_t>{1, 5})) << hw.first << "x" << hw.second;
  }
  // A shortcut pool on a 5x5 map: windows {0,1},{2,3},{4} average 2x2, 2x2 and the lone edge.
  auto* block = model->layer2[0]->as<pets::model::BottleneckImpl>();
  const auto x = torch::arange(25, torch::kFloat32).reshape({1, 1, 5, 5});
  const auto pooled = block->downsample[0]->as<torch::nn::AvgPool2dImpl>()->forward(x);
  ASSERT_EQ(pooled.sizes(), (std::vector<int64_t>{1, 1, 3, 3}));
  EXPECT_FLOAT_EQ(pooled[0][0][2][2].item<float>(), 24.f);
  EXPECT_FLOAT_EQ(pooled[0][0][0][2].item<float>(), (4.f + 9.f) / 2.f);
}

TEST(ResNet50d, FreezeLeavesOnlyTheHeadTrainable) {
  ResNet50d model(37);
  model->freeze_backbone();
  std::set<std::string> trainable;
  for (const auto& p : model->named_parameters(true))
    if (p.value().requires_grad()) trainable.insert(p.key());
  EXPECT_EQ(trainable, (std::set<std::string>{"fc.weight", "fc.bias"}));
}

// --unfreeze's groups: the parameters of the stages from the first trained one on, under their
// state-dict names in the model's order; the stages run one after the other are the features.
TEST(ResNet50d, StageParametersFromEachFirstStage) {
  ResNet50d model(5);
  const auto names_from = [&](int first) {
    std::vector<std::string> names;
    for (const auto& [name, p] : model->stage_parameters(first)) names.push_back(name);
    return names;
  };
  std::vector<std::string> backbone;
  for (const auto& p : model->named_parameters(true))
    if (p.key().rfind("fc.", 0) != 0) backbone.push_back(p.key());
  EXPECT_EQ(names_from(0), backbone);  // all: the stem too
  EXPECT_TRUE(names_from(pets::model::ResNet50dImpl::kStages).empty());
  const auto layer4 = names_from(4);
  ASSERT_FALSE(layer4.empty());
  EXPECT_EQ(layer4.front(), "layer4.0.conv1.weight");
  EXPECT_EQ(layer4.back(), "layer4.2.bn3.bias");
  for (const auto& name : layer4) EXPECT_EQ(name.rfind("layer4.", 0), 0u) << name;
  const auto layer3 = names_from(3);
  EXPECT_EQ(layer3.front(), "layer3.0.conv1.weight");
  EXPECT_EQ(std::vector<std::string>(layer3.end() - layer4.size(), layer3.end()), layer4);
  const auto stem = names_from(0);
  EXPECT_EQ(stem.front(), "conv1.0.weight");
  EXPECT_NE(std::find(stem.begin(), stem.end(), "bn1.weight"), stem.end());
  EXPECT_THROW(model->stage_parameters(6), pets::Error);
}

TEST(ResNet50d, StagesInTurnAreTheFeatures) {
  torch::manual_seed(3);
  ResNet50d model(5);
  model->eval();
  torch::NoGradGuard no_grad;
  const torch::Tensor x = torch::randn({2, 3, 64, 64});
  const torch::Tensor features = model->forward_features(x);
  const torch::Tensor split = pets::model::ResNet50dImpl::pool(model->forward_stages(
      model->forward_stages(x, 0, 3), 3, pets::model::ResNet50dImpl::kStages));
  EXPECT_TRUE(torch::equal(split, features));
  EXPECT_THROW(model->forward_stages(x, 3, 2), pets::Error);
}

TEST(ResNet50d, TimmInitZeroesLastBnOfEachBlock) {
  ResNet50d model(37);
  const auto params = model->named_parameters(true);
  EXPECT_EQ(params["layer3.4.bn3.weight"].abs().sum().item<float>(), 0.f);
  EXPECT_EQ(params["layer3.4.bn2.weight"].mean().item<float>(), 1.f);
  // Kaiming normal, fan_out, ReLU gain: std = sqrt(2 / (out * k * k)).
  const auto w = params["layer4.0.conv2.weight"];
  const double expected = std::sqrt(2.0 / (512 * 9));
  EXPECT_NEAR(w.std().item<double>(), expected, 0.05 * expected);
}

// --bn-mode eval's folded backbone against the model in eval mode, with BatchNorm statistics and
// affine parameters far from the identity (so that a fold in the wrong place or order shows), at
// an odd size (the avg-down shortcuts round up) and channels-last, as the trainer runs it.
TEST(FoldedBackbone, EqualsTheEvalModeModel) {
  torch::manual_seed(3);
  ResNet50d model(5);
  pets::test::spread_batchnorms(*model, 0.3, 0.5, 2.0);
  model->eval();
  model->to_channels_last();
  const auto x = torch::randn({2, 3, 97, 65}).contiguous(torch::MemoryFormat::ChannelsLast);
  torch::NoGradGuard no_grad;
  const auto expected = model->forward_features(x);
  const auto folded = pets::model::FoldedBackbone(*model).forward_features(x);
  ASSERT_EQ(folded.sizes(), expected.sizes());
  const double scale = expected.abs().max().item<double>();
  const double error = (folded - expected).abs().max().item<double>();
  EXPECT_GT(scale, 0.0);
  EXPECT_LE(error, 1e-4 * scale) << "max abs error " << error << ", max |features| " << scale;
  // A fold of other statistics is a different function: the comparison can see a stale fold.
  for (auto& m : model->modules(false))
    if (auto* bn = m->as<torch::nn::BatchNorm2d>()) bn->running_mean.add_(0.5);
  const double stale =
      (pets::model::FoldedBackbone(*model).forward_features(x) - folded).abs().max().item<double>();
  EXPECT_GT(stale, 1e-2 * scale);
}

// A folded convolution's weights in another type are cast once and kept, and cast anew for
// another type or other weights.
TEST(FoldedBackbone, ConvWeightsCastOnceAndKept) {
  torch::manual_seed(4);
  pets::model::FoldedBackbone::Conv conv;
  conv.weight = torch::randn({4, 3, 3, 3});
  conv.bias = torch::randn({4});
  const auto [weight, bias] = conv.in_type(torch::kBFloat16);
  EXPECT_TRUE(torch::equal(weight, conv.weight.to(torch::kBFloat16)));
  EXPECT_TRUE(torch::equal(bias, conv.bias.to(torch::kBFloat16)));
  const auto [again, again_bias] = conv.in_type(torch::kBFloat16);
  EXPECT_TRUE(again.is_same(weight));
  EXPECT_TRUE(again_bias.is_same(bias));
  const auto half = conv.in_type(torch::kHalf);
  EXPECT_TRUE(torch::equal(half.first, conv.weight.to(torch::kHalf)));
  EXPECT_TRUE(torch::equal(half.second, conv.bias.to(torch::kHalf)));
  conv.weight = torch::randn({4, 3, 3, 3});
  EXPECT_TRUE(torch::equal(conv.in_type(torch::kHalf).first, conv.weight.to(torch::kHalf)));
  conv.bias = torch::randn({4});
  EXPECT_TRUE(torch::equal(conv.in_type(torch::kHalf).second, conv.bias.to(torch::kHalf)));
  // In their own type: the weights themselves.
  EXPECT_TRUE(conv.in_type(torch::kFloat32).first.is_same(conv.weight));
}

}  // namespace
