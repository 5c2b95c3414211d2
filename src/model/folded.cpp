#include "pets/model/folded.hpp"

#include <torch/torch.h>

#include "pets/compat/torch.hpp"
#include "pets/model/resnet50d.hpp"
#include "pets/util/error.hpp"

namespace pets::model {
namespace nn = torch::nn;

namespace {

/// Folds in float64 and rounds once, so the folded weights are the closest float32s to the
/// exact products.
FoldedBackbone::Conv fold(const nn::Conv2dImpl& conv, const nn::BatchNorm2dImpl& bn) {
  torch::NoGradGuard no_grad;
  PETS_CHECK(!conv.options.bias(), "folding expects bias-free convolutions");
  const auto& o = bn.options;
  const torch::Tensor scale =
      bn.weight.to(torch::kFloat64) / (bn.running_var.to(torch::kFloat64) + o.eps()).sqrt();
  FoldedBackbone::Conv out;
  out.weight = (conv.weight.to(torch::kFloat64) * scale.view({-1, 1, 1, 1}))
                   .to(conv.weight.scalar_type())
                   .contiguous(conv.weight.suggest_memory_format());
  out.bias = (bn.bias.to(torch::kFloat64) - bn.running_mean.to(torch::kFloat64) * scale)
                 .to(conv.weight.scalar_type());
  out.stride = conv.options.stride()->at(0);
  out.padding = compat::variant_get<torch::ExpandingArray<2>>(conv.options.padding())->at(0);
  return out;
}

const nn::Conv2dImpl& as_conv(const nn::Sequential& s, std::size_t i) {
  return module_at<nn::Conv2dImpl>(s, i);
}
const nn::BatchNorm2dImpl& as_bn(const nn::Sequential& s, std::size_t i) {
  return module_at<nn::BatchNorm2dImpl>(s, i);
}

}  // namespace

at::Tensor FoldedBackbone::Conv::operator()(const at::Tensor& x) const {
  return torch::conv2d(x, weight, bias, stride, padding);
}

std::pair<at::Tensor, at::Tensor> FoldedBackbone::Conv::in_type(c10::ScalarType type) const {
  if (!cast_weight_.defined() || cast_weight_.scalar_type() != type ||
      !cast_from_weight_.is_same(weight) || !cast_from_bias_.is_same(bias)) {
    cast_from_weight_ = weight;
    cast_from_bias_ = bias;
    cast_weight_ = weight.to(type);
    cast_bias_ = bias.to(type);
  }
  return {cast_weight_, cast_bias_};
}

FoldedBackbone::FoldedBackbone(const ResNet50dImpl& model) {
  // The deep stem: conv-BN-ReLU, conv-BN-ReLU, conv, then the model's bn1.
  stem_.push_back(fold(as_conv(model.conv1, 0), as_bn(model.conv1, 1)));
  stem_.push_back(fold(as_conv(model.conv1, 3), as_bn(model.conv1, 4)));
  stem_.push_back(fold(as_conv(model.conv1, 6), *model.bn1));
  for (const auto* layer : {&model.layer1, &model.layer2, &model.layer3, &model.layer4}) {
    for (const auto& child : (*layer)->children()) {
      const auto* b = child->as<BottleneckImpl>();
      PETS_CHECK(b != nullptr, "a layer holds something other than a Bottleneck");
      Block block;
      block.conv1 = fold(*b->conv1, *b->bn1);
      block.conv2 = fold(*b->conv2, *b->bn2);
      block.conv3 = fold(*b->conv3, *b->bn3);
      if (b->downsample) {
        block.has_shortcut = true;
        if (const auto* pool = b->downsample->ptr(0)->as<nn::AvgPool2d>())
          block.shortcut_stride = pool->options.stride()->at(0);
        block.shortcut = fold(as_conv(b->downsample, 1), as_bn(b->downsample, 2));
      }
      blocks_.push_back(std::move(block));
    }
  }
}

at::Tensor FoldedBackbone::plain_conv(const Conv& conv, const at::Tensor& x,
                                      const at::Tensor& residual, bool relu) {
  at::Tensor y = conv(x);
  if (residual.defined()) y.add_(residual);
  if (relu) y.relu_();
  return y;
}

at::Tensor FoldedBackbone::forward_features(const at::Tensor& input, const ConvRun& run) const {
  torch::NoGradGuard no_grad;
  const ConvRun& conv = run ? run : ConvRun(plain_conv);
  const torch::Tensor none;
  torch::Tensor x = conv(stem_[0], input, none, true);
  x = conv(stem_[1], x, none, true);
  x = conv(stem_[2], x, none, true);
  x = torch::max_pool2d(x, 3, 2, 1);
  for (const Block& b : blocks_) {
    torch::Tensor shortcut = x;
    if (b.has_shortcut) {
      if (b.shortcut_stride > 1)
        shortcut = torch::avg_pool2d(shortcut, 2, b.shortcut_stride, 0, /*ceil_mode=*/true,
                                     /*count_include_pad=*/false);
      shortcut = conv(b.shortcut, shortcut, none, false);
    }
    torch::Tensor y = conv(b.conv1, x, none, true);
    y = conv(b.conv2, y, none, true);
    x = conv(b.conv3, y, shortcut, true);
  }
  return x.mean({2, 3});
}

}  // namespace pets::model
