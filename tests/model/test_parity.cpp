// Parity with timm 0.9.16 / torch 1.13: the fixture's state dict loaded into our ResNet-50d must
// reproduce torch's eval logits and features, train-mode logits and BN running statistics, and the
// frozen-backbone loss and fc gradients. Sizes come from the files, so another fixture fits.
#include <gtest/gtest.h>

#include <thread>

#include "fixture_dir.hpp"
#include "pets/model/folded.hpp"
#include "pets/model/resnet50d.hpp"
#include "pets/model/state_dict.hpp"

namespace {

using pets::model::ResNet50d;

struct Reference {
  std::map<std::string, torch::Tensor> io;
  std::string weights;
  int64_t num_classes = 0;
};

const Reference& reference() {
  static const Reference ref = [] {
    torch::set_num_threads(static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
    Reference r;
    const std::string dir = pets::test::fixture_dir();
    r.weights = dir + "/weights.safetensors";
    for (auto& [name, t] : pets::model::read_tensors(dir + "/io.safetensors")) r.io[name] = t;
    const auto weights = pets::model::SafetensorsFile::open(r.weights);
    r.num_classes = weights.at("fc.weight").shape.at(0);
    return r;
  }();
  return ref;
}

torch::Tensor io(const std::string& key) {
  const auto& m = reference().io;
  const auto it = m.find(key);
  if (it == m.end()) throw std::runtime_error("fixture io.safetensors has no '" + key + "'");
  return it->second.to(it->second.is_floating_point() ? torch::kFloat32 : torch::kInt64);
}

ResNet50d load_model() {
  ResNet50d model(reference().num_classes);
  const auto report = pets::model::load_state_dict(*model, reference().weights);
  EXPECT_TRUE(report.skipped.empty());
  model->freeze_backbone();
  return model;
}

/// max |actual - expected| <= 1e-3 * max |expected|, with the numbers in the failure message.
void expect_close(const torch::Tensor& actual, const torch::Tensor& expected, const char* what) {
  ASSERT_EQ(actual.sizes(), expected.sizes()) << what;
  const double scale = expected.abs().max().item<double>();
  const double error =
      (actual.to(torch::kFloat64) - expected.to(torch::kFloat64)).abs().max().item<double>();
  EXPECT_LE(error, 1e-3 * scale) << what << ": max abs error " << error << ", max |reference| "
                                 << scale;
}

TEST(ResNet50dParity, FixtureShapesAreConsistent) {
  const auto input = io("input");
  ASSERT_EQ(input.dim(), 4);
  EXPECT_EQ(input.size(1), 3);
  EXPECT_EQ(io("logits_eval").sizes(),
            (std::vector<int64_t>{input.size(0), reference().num_classes}));
  EXPECT_EQ(io("features_eval").size(1), pets::model::ResNet50dImpl::kFeatures);
}

TEST(ResNet50dParity, EvalLogitsAndFeatures) {
  ResNet50d model = load_model();
  model->eval();
  torch::NoGradGuard no_grad;
  const torch::Tensor features = model->forward_features(io("input"));
  expect_close(features, io("features_eval"), "features_eval");
  expect_close(model->forward_head(features), io("logits_eval"), "logits_eval");
}

// --bn-mode eval runs the folded backbone: it must match timm's eval features as the model does.
TEST(ResNet50dParity, FoldedEvalFeatures) {
  ResNet50d model = load_model();
  model->eval();
  model->to_channels_last();
  const pets::model::FoldedBackbone folded(*model);
  const torch::Tensor features =
      folded.forward_features(io("input").contiguous(torch::MemoryFormat::ChannelsLast));
  expect_close(features, io("features_eval"), "folded features_eval");
  torch::NoGradGuard no_grad;
  expect_close(model->forward_head(features), io("logits_eval"), "folded logits_eval");
}

TEST(ResNet50dParity, TrainModeLogitsAndRunningStats) {
  ResNet50d model = load_model();
  model->train();
  torch::Tensor logits;
  {
    torch::NoGradGuard no_grad;
    logits = model->forward(io("input"));
  }
  expect_close(logits, io("logits_train"), "logits_train");
  expect_close(model->bn1->running_mean, io("bn1.running_mean_after_train_step"),
               "bn1.running_mean");
  expect_close(model->bn1->running_var, io("bn1.running_var_after_train_step"), "bn1.running_var");
  const auto named = model->named_buffers(true);
  expect_close(named["layer4.2.bn3.running_var"], io("layer4.2.bn3.running_var_after_train_step"),
               "layer4.2.bn3.running_var");
  const auto weights = pets::model::SafetensorsFile::open(reference().weights);
  const int64_t before =
      pets::model::to_tensor(weights, weights.at("bn1.num_batches_tracked")).item<int64_t>();
  EXPECT_EQ(model->bn1->num_batches_tracked.item<int64_t>(), before + 1);
}

// The trainer's path: backbone without autograd, head with it. Loss and gradients must match
// torch's frozen-backbone step, where only fc.weight and fc.bias require grad.
TEST(ResNet50dParity, FrozenBackboneLossAndFcGradients) {
  ResNet50d model = load_model();
  model->train();
  torch::Tensor features;
  {
    torch::NoGradGuard no_grad;
    features = model->forward_features(io("input"));
  }
  const torch::Tensor logits = model->forward_head(features);
  const torch::Tensor loss = torch::nn::functional::cross_entropy(logits, io("labels"));
  loss.backward();
  expect_close(loss.reshape({1}), io("loss_train"), "loss_train");
  expect_close(model->fc->weight.grad(), io("fc.weight.grad"), "fc.weight.grad");
  expect_close(model->fc->bias.grad(), io("fc.bias.grad"), "fc.bias.grad");
  for (const auto& p : model->named_parameters(true)) {
    if (p.key().rfind("fc.", 0) != 0) {
      EXPECT_FALSE(p.value().grad().defined()) << p.key();
    }
  }
}

}  // namespace
