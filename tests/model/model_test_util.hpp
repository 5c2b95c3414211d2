#pragma once
/// Model set-up shared by the model and CUDA tests.

#include <torch/torch.h>

#include "pets/model/resnet50d.hpp"

namespace pets::test {

/// Draws every BatchNorm's weight from [0.5, 1.5], bias from [-0.2, 0.2], running mean from
/// [-mean, mean] and running variance from [var_low, var_high] (torch's global generator, in
/// module order), so that a BatchNorm applied in the wrong place, order or mode shows: timm's
/// initial 1 and 0 (and its zeroed last BatchNorm of each block) would hide it.
inline void spread_batchnorms(pets::model::ResNet50dImpl& model, double mean, double var_low,
                              double var_high) {
  torch::NoGradGuard no_grad;
  for (auto& m : model.modules(false))
    if (auto* bn = m->as<torch::nn::BatchNorm2dImpl>()) {
      bn->weight.uniform_(0.5, 1.5);
      bn->bias.uniform_(-0.2, 0.2);
      bn->running_mean.uniform_(-mean, mean);
      bn->running_var.uniform_(var_low, var_high);
    }
}

}  // namespace pets::test
