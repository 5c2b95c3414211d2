#pragma once
/// \file
/// The ResNet-50d backbone with every BatchNorm folded into the convolution before it: what
/// `--bn-mode eval` runs. In eval mode a BatchNorm is a fixed per-channel affine map, so
/// conv(x, w) followed by it equals conv(x, w * s) + (beta - mean * s), s = gamma / sqrt(var +
/// eps): one pass over each activation instead of two. Equal to the unfolded model up to float
/// rounding.

#include <ATen/core/Tensor.h>

#include <functional>
#include <utility>
#include <vector>

namespace pets::model {

struct ResNet50dImpl;

class FoldedBackbone {
 public:
  /// One convolution with its BatchNorm folded in (square kernel, stride and padding).
  struct Conv {
    at::Tensor weight, bias;
    int64_t stride = 1, padding = 0;
    at::Tensor operator()(const at::Tensor& x) const;
    /// {weight.to(type), bias.to(type)}, cast once and kept while weight and bias are the same
    /// tensors and `type` the same (a fold's weights do not change): a fused convolution that
    /// takes its operands in one type would otherwise cast them on every call.
    std::pair<at::Tensor, at::Tensor> in_type(c10::ScalarType type) const;

   private:
    mutable at::Tensor cast_from_weight_, cast_from_bias_, cast_weight_, cast_bias_;
  };

  /// How a folded convolution runs with what follows it in the backbone: `conv(x)`, then
  /// `residual` added when it is defined, then ReLU when `relu`. plain_conv is LibTorch's
  /// separate operations; a device may fuse them (the backend's choice, backbone_forward.hpp).
  using ConvRun = std::function<at::Tensor(const Conv& conv, const at::Tensor& x,
                                           const at::Tensor& residual, bool relu)>;
  static at::Tensor plain_conv(const Conv& conv, const at::Tensor& x, const at::Tensor& residual,
                               bool relu);

  /// Folds `model`'s current weights and running statistics (the model itself is unchanged; fold
  /// again after they change).
  explicit FoldedBackbone(const ResNet50dImpl& model);

  /// The 2048-d pooled features, as ResNet50dImpl::forward_features in eval mode. No autograd:
  /// the folded weights are constants. Takes channels-last input, like the model.
  /// Each convolution runs through `run` (empty: plain_conv).
  at::Tensor forward_features(const at::Tensor& x, const ConvRun& run = {}) const;

 private:
  struct Block {
    Conv conv1, conv2, conv3;
    bool has_shortcut = false;  ///< avg-down shortcut (AvgPool2d when stride > 1, then conv+BN)
    int64_t shortcut_stride = 1;
    Conv shortcut;
  };
  std::vector<Conv> stem_;
  std::vector<Block> blocks_;
};

}  // namespace pets::model
