#pragma once
/// \file
/// timm's resnet50d in LibTorch: deep 3-conv stem, avg-down shortcuts, parameter and buffer names
/// identical to timm's state dict, so its checkpoints load without renaming.

#include <torch/torch.h>

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "pets/util/error.hpp"

namespace pets::model {

/// timm's Bottleneck: 1x1 -> 3x3 (carries the stride) -> 1x1 (x4 channels), BN after each.
struct BottleneckImpl : torch::nn::Module {
  BottleneckImpl(int64_t in_channels, int64_t planes, int64_t stride);
  torch::Tensor forward(torch::Tensor x);

  torch::nn::Conv2d conv1{nullptr}, conv2{nullptr}, conv3{nullptr};
  torch::nn::BatchNorm2d bn1{nullptr}, bn2{nullptr}, bn3{nullptr};
  /// avg-down shortcut: [0] AvgPool2d(2, stride, ceil_mode, no pad count) or Identity,
  /// [1] 1x1 conv, [2] BN. Empty when the block keeps shape.
  torch::nn::Sequential downsample{nullptr};
};
TORCH_MODULE(Bottleneck);

struct ResNet50dImpl : torch::nn::Module {
  static constexpr int64_t kFeatures = 2048;
  /// The backbone's stages in forward order: 0 the stem (conv1, bn1, ReLU, max-pool), 1 to 4
  /// layer1 to layer4; the global average pool follows them.
  static constexpr int kStages = 5;

  explicit ResNet50dImpl(int64_t num_classes);

  /// The 2048-d globally average-pooled features (input of `fc`): stages 0 to 4, then the pool.
  torch::Tensor forward_features(torch::Tensor x);
  /// Stages [begin, end) of the backbone on `x` (the images for begin 0, else stage begin - 1's
  /// output), without the pool.
  torch::Tensor forward_stages(torch::Tensor x, int begin, int end);
  /// The global average pool of the last stage's output: the features.
  static torch::Tensor pool(const torch::Tensor& x) { return x.mean({2, 3}); }
  /// The parameters of stages [first, kStages) under their state-dict names, in registration
  /// order (PyTorch's `model.parameters()` order); none for first == kStages.
  std::vector<std::pair<std::string, torch::Tensor>> stage_parameters(int first);
  /// The classifier on pooled features.
  torch::Tensor forward_head(const torch::Tensor& features);
  torch::Tensor forward(torch::Tensor x);

  /// Every parameter but `fc`'s stops requiring gradients.
  void freeze_backbone();
  /// The backbone (everything but `fc`) in train or eval mode; `fc` has no mode-dependent layer.
  void set_backbone_training(bool on);

  /// Stores every convolution weight channels-last (NHWC), the layout oneDNN runs fastest on
  /// the CPU; feed it channels-last inputs. Values and names are unchanged.
  void to_channels_last();

  int64_t num_classes() const { return num_classes_; }

  torch::nn::Sequential conv1{nullptr};
  torch::nn::BatchNorm2d bn1{nullptr};
  torch::nn::Sequential layer1{nullptr}, layer2{nullptr}, layer3{nullptr}, layer4{nullptr};
  torch::nn::Linear fc{nullptr};

 private:
  int64_t num_classes_;
};
TORCH_MODULE(ResNet50d);

/// Module `i` of `s` (the deep stem `conv1` or a Bottleneck's `downsample`, laid out as above) as
/// an M, for code that walks the backbone layer by layer. Throws pets::Error when it is not one.
template <class M>
M& module_at(const torch::nn::Sequential& s, std::size_t i) {
  auto* m = s->ptr(i)->as<M>();
  PETS_CHECK(m != nullptr, "the backbone's layout is not ResNet-50d's");
  return *m;
}

/// timm's initialisation: Kaiming-normal (fan_out, ReLU) convolutions, BN weight 1 / bias 0,
/// the last BN of every bottleneck zeroed (zero_init_last), PyTorch's default Linear init.
void init_like_timm(ResNet50dImpl& model);

}  // namespace pets::model
