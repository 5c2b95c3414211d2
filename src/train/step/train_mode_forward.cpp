#include "pets/train/step/train_mode_forward.hpp"

#include <torch/torch.h>

#include "pets/model/resnet50d.hpp"
#include "pets/train/device/cuda_parts.hpp"
#include "pets/util/error.hpp"

namespace pets::train {
namespace nn = torch::nn;

NormAfterConv plain_norm_after_conv() {
  return [](nn::BatchNorm2dImpl& bn, const at::Tensor& x, const at::Tensor& residual, bool relu) {
    at::Tensor y = bn.forward(x);
    if (residual.defined()) y.add_(residual);
    if (relu) y.relu_();
    return y;
  };
}

NormAfterConv fused_norm_after_conv(const CudaParts& cuda) {
  return
      [&cuda](nn::BatchNorm2dImpl& bn, const at::Tensor& x, const at::Tensor& residual, bool relu) {
        const auto& o = bn.options;
        PETS_CHECK(o.momentum().has_value() && o.affine() && o.track_running_stats(),
                   "the fused BatchNorm takes affine BatchNorms with running statistics and a "
                   "momentum");
        bn.num_batches_tracked.add_(1);
        return cuda.batch_norm_train(x, bn.weight, bn.bias, bn.running_mean, bn.running_var,
                                     *o.momentum(), o.eps(), residual, relu);
      };
}

at::Tensor train_mode_features(model::ResNet50dImpl& model, const at::Tensor& images,
                               const NormAfterConv& norm) {
  torch::NoGradGuard no_grad;
  const at::Tensor none;
  const nn::Sequential& stem = model.conv1;
  // The deep stem: conv-BN-ReLU, conv-BN-ReLU, conv, then bn1 and ReLU (resnet50d.cpp).
  at::Tensor x = norm(model::module_at<nn::BatchNorm2dImpl>(stem, 1),
                      model::module_at<nn::Conv2dImpl>(stem, 0).forward(images), none, true);
  x = norm(model::module_at<nn::BatchNorm2dImpl>(stem, 4),
           model::module_at<nn::Conv2dImpl>(stem, 3).forward(x), none, true);
  x = norm(*model.bn1, model::module_at<nn::Conv2dImpl>(stem, 6).forward(x), none, true);
  x = torch::max_pool2d(x, 3, 2, 1);
  for (const auto* layer : {&model.layer1, &model.layer2, &model.layer3, &model.layer4}) {
    for (const auto& module : (*layer)->children()) {
      auto* b = module->as<model::BottleneckImpl>();
      PETS_CHECK(b != nullptr, "a layer holds something other than a Bottleneck");
      // BottleneckImpl::forward's order: the shortcut first.
      at::Tensor shortcut = x;
      if (b->downsample) {
        shortcut = b->downsample->ptr(0)->as<nn::AvgPool2dImpl>()
                       ? model::module_at<nn::AvgPool2dImpl>(b->downsample, 0).forward(x)
                       : x;
        shortcut =
            norm(model::module_at<nn::BatchNorm2dImpl>(b->downsample, 2),
                 model::module_at<nn::Conv2dImpl>(b->downsample, 1).forward(shortcut), none, false);
      }
      at::Tensor y = norm(*b->bn1, b->conv1->forward(x), none, true);
      y = norm(*b->bn2, b->conv2->forward(y), none, true);
      x = norm(*b->bn3, b->conv3->forward(y), shortcut, true);
    }
  }
  return x.mean({2, 3});
}

}  // namespace pets::train
