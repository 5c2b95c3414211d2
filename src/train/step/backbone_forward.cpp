#include "pets/train/step/backbone_forward.hpp"

#include <torch/torch.h>

#include <algorithm>

#include "pets/compat/torch.hpp"
#include "pets/model/folded.hpp"
#include "pets/model/resnet50d.hpp"
#include "pets/train/device/cuda_parts.hpp"

namespace pets::train {
namespace {

/// Autocast on the device of the images while it lives.
class AutocastScope {
 public:
  AutocastScope(std::optional<c10::ScalarType> dtype, const torch::Device& device)
      : on_(dtype.has_value()), device_(device.type()) {
    if (on_) compat::set_autocast(device_, true, *dtype);
  }
  ~AutocastScope() {
    if (on_) compat::end_autocast(device_);
  }
  AutocastScope(const AutocastScope&) = delete;
  AutocastScope& operator=(const AutocastScope&) = delete;

 private:
  bool on_;
  c10::DeviceType device_;
};

}  // namespace

model::FoldedBackbone::ConvRun fused_folded_conv(const CudaParts& cuda,
                                                 std::optional<c10::ScalarType> autocast) {
  using model::FoldedBackbone;
  return [&cuda, autocast](const FoldedBackbone::Conv& conv, const at::Tensor& x,
                           const at::Tensor& residual, bool relu) {
    if (!relu) return FoldedBackbone::plain_conv(conv, x, residual, relu);
    const c10::ScalarType type = autocast.value_or(x.scalar_type());
    const auto [weight, bias] = conv.in_type(type);
    return cuda.conv_bias_relu(x.to(type), weight, bias, conv.stride, conv.padding,
                               residual.defined() ? residual.to(type) : residual);
  };
}

at::Tensor BackboneForward::operator()(model::ResNet50dImpl& model,
                                       const model::FoldedBackbone* folded,
                                       const at::Tensor& images) const {
  torch::NoGradGuard no_grad;
  AutocastScope autocast(autocast_, images.device());
  if (folded) return folded->forward_features(images, folded_conv_).to(torch::kFloat32);
  if (train_norm_ && images.is_cuda() && model.is_training())
    return train_mode_features(model, images, train_norm_).to(torch::kFloat32);
  return model.forward_features(images).to(torch::kFloat32);
}

at::Tensor BackboneForward::trained(model::ResNet50dImpl& model, const at::Tensor& images,
                                    int first_stage) const {
  AutocastScope autocast(autocast_, images.device());
  at::Tensor frozen;
  {
    torch::NoGradGuard no_grad;  // no activation kept for the frozen stages
    frozen = model.forward_stages(images, 0, first_stage);
  }
  const at::Tensor last = model.forward_stages(frozen, first_stage, model::ResNet50dImpl::kStages);
  return model::ResNet50dImpl::pool(last).to(torch::kFloat32);
}

void warm_up_forward(const BackboneForward& forward, model::ResNet50dImpl& model,
                     const model::FoldedBackbone* folded, const std::vector<int64_t>& batch_sizes,
                     int64_t image_size, const c10::Device& device) {
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> buffers, kept;
  for (const auto& b : model.named_buffers(true)) {
    buffers.push_back(b.value());
    kept.push_back(b.value().clone());
  }
  std::vector<int64_t> done;
  for (const int64_t n : batch_sizes) {
    if (n < 1 || std::find(done.begin(), done.end(), n) != done.end()) continue;
    done.push_back(n);
    const torch::Tensor images =
        torch::zeros({n, 3, image_size, image_size}, torch::TensorOptions().device(device))
            .contiguous(torch::MemoryFormat::ChannelsLast);
    model.forward_head(forward(model, folded, images));
  }
  for (std::size_t i = 0; i < buffers.size(); ++i) buffers[i].copy_(kept[i]);
}

}  // namespace pets::train
