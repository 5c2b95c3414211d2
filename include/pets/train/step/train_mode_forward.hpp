#pragma once
/// \file
/// The backbone's forward in train mode (--bn-mode train) with each BatchNorm, and the ReLU or
/// the residual add and ReLU after it, done by one call of a NormAfterConv: the model's own
/// operations (plain_norm_after_conv) or, on a CUDA device, one fused BatchNorm kernel
/// (fused_norm_after_conv, CudaParts::batch_norm_train) instead of the three or four passes over
/// each activation that the separate operations make.

#include <ATen/core/Tensor.h>

#include <functional>

namespace torch::nn {
class BatchNorm2dImpl;
}  // namespace torch::nn

namespace pets::model {
struct ResNet50dImpl;
}  // namespace pets::model

namespace pets::train {

class CudaParts;

/// `bn` in train mode on the convolution's output `x` (its running statistics and batch count
/// updated), plus `residual` when defined, then ReLU when `relu`.
using NormAfterConv = std::function<at::Tensor(torch::nn::BatchNorm2dImpl& bn, const at::Tensor& x,
                                               const at::Tensor& residual, bool relu)>;

/// The model's operations: bn's forward, add_, relu_ (ResNet50dImpl::forward_features's).
NormAfterConv plain_norm_after_conv();

/// `cuda`'s batch_norm_train, bn's batch count advanced as its forward does. Equal to the plain
/// one up to float rounding: the batch statistics are summed in another order.
NormAfterConv fused_norm_after_conv(const CudaParts& cuda);

/// ResNet50dImpl::forward_features of channels-last `images` with the backbone in train mode,
/// each BatchNorm through `norm`; with plain_norm_after_conv the same operations in the same
/// order. No autograd.
at::Tensor train_mode_features(model::ResNet50dImpl& model, const at::Tensor& images,
                               const NormAfterConv& norm);

}  // namespace pets::train
