#pragma once
/// \file
/// Dynamic loss scaling for fp16 training, as torch.cuda.amp.GradScaler with its defaults: the
/// loss is multiplied by the scale before backward; the gradients are divided by it before the
/// optimiser step, which is skipped when any of them is inf or NaN; the scale then halves after a
/// skipped step and doubles after `growth_interval` good steps in a row.

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

namespace pets::train {

struct GradScalerOptions {
  double init_scale = 65536.0;
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int64_t growth_interval = 2000;
};

class GradScaler {
 public:
  explicit GradScaler(GradScalerOptions options = {});

  double scale() const { return scale_; }
  int64_t growth_tracker() const { return growth_tracker_; }

  /// loss * scale.
  at::Tensor scale_loss(const at::Tensor& loss) const;
  /// Divides every defined gradient by the scale in place (in float32, as PyTorch's
  /// _amp_foreach_non_finite_check_and_unscale_); true when all of them are finite. Call it on
  /// gradients already summed across ranks, so every rank takes the same decision.
  bool unscale(const std::vector<at::Tensor>& grads) const;
  /// After the step: backoff when `found_inf`, growth after growth_interval good steps.
  void update(bool found_inf);

  /// Restores the state of a checkpoint.
  void restore(double scale, int64_t growth_tracker);

 private:
  GradScalerOptions options_;
  double scale_;
  int64_t growth_tracker_ = 0;
};

}  // namespace pets::train
