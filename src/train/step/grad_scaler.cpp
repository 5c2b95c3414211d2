#include "pets/train/step/grad_scaler.hpp"

#include <torch/torch.h>

#include <vector>

#include "pets/util/error.hpp"

namespace pets::train {

GradScaler::GradScaler(GradScalerOptions options) : options_(options), scale_(options.init_scale) {
  PETS_CHECK(options_.init_scale > 0 && options_.growth_factor > 1 && options_.backoff_factor > 0 &&
                 options_.backoff_factor < 1 && options_.growth_interval > 0,
             "GradScaler: invalid options");
}

at::Tensor GradScaler::scale_loss(const at::Tensor& loss) const { return loss * scale_; }

bool GradScaler::unscale(const std::vector<at::Tensor>& grads) const {
  torch::NoGradGuard no_grad;
  // PyTorch multiplies by the float32 reciprocal of the scale; so do we, for the same bits.
  const float inverse = static_cast<float>(1.0 / scale_);
  std::vector<at::Tensor> finite;
  for (const at::Tensor& g : grads) {
    if (!g.defined()) continue;
    g.mul_(inverse);
    finite.push_back(g.isfinite().all());
  }
  // One read of the device for all of them.
  return finite.empty() || torch::stack(finite).all().item<bool>();
}

void GradScaler::update(bool found_inf) {
  if (found_inf) {
    scale_ *= options_.backoff_factor;
    growth_tracker_ = 0;
    return;
  }
  if (++growth_tracker_ == options_.growth_interval) {
    scale_ *= options_.growth_factor;
    growth_tracker_ = 0;
  }
}

void GradScaler::restore(double scale, int64_t growth_tracker) {
  if (!(scale > 0) || growth_tracker < 0 || growth_tracker >= options_.growth_interval)
    throw UsageError("GradScaler state out of range: scale " + std::to_string(scale) +
                     ", growth tracker " + std::to_string(growth_tracker));
  scale_ = scale;
  growth_tracker_ = growth_tracker;
}

}  // namespace pets::train
