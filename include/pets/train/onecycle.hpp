#pragma once
/// \file
/// PyTorch's OneCycleLR (two phases, cosine annealing, cycle_momentum), as a plain schedule:
/// the trainer applies lr() and beta1() to Adam before each optimiser step.

#include <cstdint>

namespace pets::train {

struct OneCycleOptions {
  double max_lr = 3e-2;
  int64_t total_steps = 0;  ///< epochs * steps_per_epoch
  double pct_start = 0.3;
  double div_factor = 25.0;
  double final_div_factor = 1e4;
  double base_momentum = 0.85;
  double max_momentum = 0.95;
};

class OneCycleSchedule {
 public:
  explicit OneCycleSchedule(const OneCycleOptions& options);

  /// The learning rate in force at the current step (PyTorch's get_last_lr()).
  double lr() const { return lr_; }
  /// Adam's beta1 in force at the current step (cycled inversely to the lr).
  double beta1() const { return beta1_; }
  /// Scheduler steps taken so far (PyTorch's last_epoch).
  int64_t step_count() const { return step_; }
  double initial_lr() const { return options_.max_lr / options_.div_factor; }

  /// Advances one step; throws pets::Error past total_steps, as PyTorch raises ValueError.
  void step();
  /// Jumps to `steps` taken (for resume); same bounds as step().
  void set_step_count(int64_t steps);

 private:
  void update();

  OneCycleOptions options_;
  int64_t step_ = 0;
  double lr_ = 0.0;
  double beta1_ = 0.0;
};

}  // namespace pets::train
