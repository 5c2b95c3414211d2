#pragma once
/// \file
/// The frozen backbone's forward of a run, as the training step and the evaluation both run it:
/// pooled features as fp32, without autograd, under the run's autocast (make_backend decides it
/// from --mixed-precision; backend.hpp).

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>

#include <optional>
#include <utility>
#include <vector>

#include "pets/model/folded.hpp"
#include "pets/train/step/train_mode_forward.hpp"

namespace pets::model {
struct ResNet50dImpl;
}  // namespace pets::model

namespace pets::train {

class CudaParts;

/// The folded backbone's convolutions on CUDA through cuDNN's fused convolution + bias (+ add) +
/// ReLU (CudaParts::conv_bias_relu), in `autocast`'s type when given (weights, bias and the first
/// input cast as autocast casts them for a convolution), else in the input's; the one
/// convolution without a ReLU (each downsample's) runs as FoldedBackbone::plain_conv.
model::FoldedBackbone::ConvRun fused_folded_conv(const CudaParts& cuda,
                                                 std::optional<c10::ScalarType> autocast);

class BackboneForward {
 public:
  /// `autocast`: the lower precision the backbone runs in (bf16 on the CPU; bf16 or fp16 on
  /// CUDA), nothing for fp32. The head and the loss stay in fp32 whatever it is.
  /// `train_norm`: how a backbone in train mode runs its BatchNorms on CUDA images
  /// (train_mode_forward.hpp); empty, or on the CPU, the model's own forward.
  BackboneForward() = default;
  /// `folded_conv`: how the folded backbone runs its convolutions (FoldedBackbone::ConvRun);
  /// empty, LibTorch's separate operations.
  explicit BackboneForward(std::optional<c10::ScalarType> autocast, NormAfterConv train_norm = {},
                           model::FoldedBackbone::ConvRun folded_conv = {})
      : autocast_(autocast),
        train_norm_(std::move(train_norm)),
        folded_conv_(std::move(folded_conv)) {}

  std::optional<c10::ScalarType> autocast() const { return autocast_; }
  /// Whether a backbone in train mode on a CUDA device runs its own BatchNorm kernels.
  bool fused_train_norm() const { return static_cast<bool>(train_norm_); }
  /// Whether the folded backbone runs fused convolutions.
  bool fused_folded_conv() const { return static_cast<bool>(folded_conv_); }

  /// The backbone's pooled features of channels-last `images` as fp32, through `folded`
  /// (BatchNorm folded in) when given, else through `model` in its current mode.
  at::Tensor operator()(model::ResNet50dImpl& model, const model::FoldedBackbone* folded,
                        const at::Tensor& images) const;
  /// The same features with autograd through the stages from `first_stage` on (the trained
  /// ones: --unfreeze), the earlier stages without it, all under the run's autocast and through
  /// LibTorch's differentiable operations (the fused kernels are forward-only), in `model`'s mode.
  at::Tensor trained(model::ResNet50dImpl& model, const at::Tensor& images, int first_stage) const;

 private:
  std::optional<c10::ScalarType> autocast_;
  NormAfterConv train_norm_;
  model::FoldedBackbone::ConvRun folded_conv_;
};

/// Runs `forward` and `model`'s head once on a batch of zeros for each size in `batch_sizes`
/// (each size once, sizes under 1 skipped) of `image_size` square channels-last float images on
/// `device`, as a run's steps will, so that what first calls set up (cuDNN's plans for each shape,
/// CUDA's lazily loaded kernels, cuBLAS's handle) is done before the first epoch. `model`'s buffers
/// (a train-mode forward updates the BatchNorm statistics) are put back bit for bit; its parameters
/// and their gradients are not touched.
void warm_up_forward(const BackboneForward& forward, model::ResNet50dImpl& model,
                     const model::FoldedBackbone* folded, const std::vector<int64_t>& batch_sizes,
                     int64_t image_size, const c10::Device& device);

}  // namespace pets::train
