#pragma once
/// \file
/// PyTorch's OneCycleLR (two phases, cosine annealing, cycle_momentum), as a plain schedule:
/// the trainer applies lr() and beta1() to Adam before each optimiser step. As Accelerate steps it
/// at N processes: N scheduler steps per optimiser step, none past total_steps.

#include <cstdint>

namespace pets::train {

struct OneCycleOptions {
  double max_lr = 3e-2;
  /// Scheduler steps: epochs * one process's batches per epoch (ceil(n_train / batch_size)).
  int64_t total_steps = 0;
  /// Scheduler steps per optimiser step: the ranks (Accelerate's num_processes).
  int64_t steps_per_update = 1;
  double pct_start = 0.3;
  double div_factor = 25.0;
  double final_div_factor = 1e4;
  double base_momentum = 0.85;
  double max_momentum = 0.95;
};

/// The tutorial's schedule at `ranks` processes: OneCycleLR(max_lr, epochs, steps_per_epoch =
/// ceil(train_images / batch_size)), made before Accelerate's prepare() splits the batches (so one
/// process's count), stepped `ranks` times per optimiser step. `batch_size` is per rank.
OneCycleOptions accelerate_onecycle(double max_lr, int64_t epochs, int64_t train_images,
                                    int64_t batch_size, int64_t ranks);

class OneCycleSchedule {
 public:
  explicit OneCycleSchedule(const OneCycleOptions& options);

  /// The learning rate in force at the current step (PyTorch's get_last_lr()).
  double lr() const { return lr_; }
  /// Adam's beta1 in force at the current step (cycled inversely to the lr).
  double beta1() const { return beta1_; }
  /// Optimiser steps the schedule has advanced by (what checkpoints and the logs count).
  int64_t step_count() const { return step_; }
  /// Scheduler steps taken: min(steps_per_update * step_count(), total_steps) (PyTorch's
  /// last_epoch).
  int64_t position() const;
  double initial_lr() const { return options_.max_lr / options_.div_factor; }
  const OneCycleOptions& options() const { return options_; }

  /// Advances by one optimiser step; throws pets::Error past total_steps optimiser steps (no run
  /// takes more; with one scheduler step per update, where PyTorch raises ValueError).
  void step();
  /// Jumps to `steps` optimiser steps taken (for resume); same bounds as step().
  void set_step_count(int64_t steps);

 private:
  void update();

  OneCycleOptions options_;
  int64_t step_ = 0;
  double lr_ = 0.0;
  double beta1_ = 0.0;
};

}  // namespace pets::train
