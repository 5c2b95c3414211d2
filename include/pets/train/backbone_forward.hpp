#pragma once
/// \file
/// The frozen backbone's forward of a run, as the training step and the evaluation both run it:
/// pooled features as fp32, without autograd, under the run's autocast (make_backend decides it
/// from --mixed-precision; backend.hpp).

#include <ATen/core/Tensor.h>
#include <c10/core/ScalarType.h>

#include <optional>
#include <utility>

#include "pets/train/train_mode_forward.hpp"

namespace pets::model {
struct ResNet50dImpl;
class FoldedBackbone;
}  // namespace pets::model

namespace pets::train {

class BackboneForward {
 public:
  /// `autocast`: the lower precision the backbone runs in (bf16 on the CPU; bf16 or fp16 on
  /// CUDA), nothing for fp32. The head and the loss stay in fp32 whatever it is.
  /// `train_norm`: how a backbone in train mode runs its BatchNorms on CUDA images
  /// (train_mode_forward.hpp); empty, or on the CPU, the model's own forward.
  BackboneForward() = default;
  explicit BackboneForward(std::optional<c10::ScalarType> autocast, NormAfterConv train_norm = {})
      : autocast_(autocast), train_norm_(std::move(train_norm)) {}

  std::optional<c10::ScalarType> autocast() const { return autocast_; }
  /// Whether a backbone in train mode on a CUDA device runs its own BatchNorm kernels.
  bool fused_train_norm() const { return static_cast<bool>(train_norm_); }

  /// The backbone's pooled features of channels-last `images` as fp32, through `folded`
  /// (BatchNorm folded in) when given, else through `model` in its current mode.
  at::Tensor operator()(model::ResNet50dImpl& model, const model::FoldedBackbone* folded,
                        const at::Tensor& images) const;

 private:
  std::optional<c10::ScalarType> autocast_;
  NormAfterConv train_norm_;
};

}  // namespace pets::train
