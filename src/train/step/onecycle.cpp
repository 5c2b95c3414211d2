#include "pets/train/step/onecycle.hpp"

#include <cmath>
#include <string>

#include "pets/util/error.hpp"

namespace pets::train {
namespace {

double cosine_anneal(double start, double end, double pct) {
  return end + (start - end) / 2.0 * (std::cos(M_PI * pct) + 1.0);
}

}  // namespace

OneCycleOptions accelerate_onecycle(double max_lr, int64_t epochs, int64_t train_images,
                                    int64_t batch_size, int64_t ranks) {
  PETS_CHECK(batch_size > 0, "OneCycle: batch_size must be positive");
  OneCycleOptions o;
  o.max_lr = max_lr;
  o.total_steps = epochs * ((train_images + batch_size - 1) / batch_size);
  o.steps_per_update = ranks;
  return o;
}

OneCycleSchedule::OneCycleSchedule(const OneCycleOptions& options) : options_(options) {
  PETS_CHECK(options.total_steps > 0,
             "OneCycle: total_steps must be positive, got " + std::to_string(options.total_steps));
  PETS_CHECK(options.steps_per_update > 0, "OneCycle: steps_per_update must be positive, got " +
                                               std::to_string(options.steps_per_update));
  PETS_CHECK(options.pct_start >= 0.0 && options.pct_start <= 1.0,
             "OneCycle: pct_start must be in [0, 1]");
  PETS_CHECK(options.max_lr > 0.0 && options.div_factor > 0.0 && options.final_div_factor > 0.0,
             "OneCycle: max_lr, div_factor and final_div_factor must be positive");
  update();
}

int64_t OneCycleSchedule::position() const {
  // Accelerate steps the scheduler only while its _step_count (last_epoch + 1) <= total_steps, so
  // last_epoch stops at total_steps; PyTorch computes the lr there and raises only beyond it.
  // Compared as a quotient, which cannot overflow.
  return step_ > options_.total_steps / options_.steps_per_update
             ? options_.total_steps
             : options_.steps_per_update * step_;
}

void OneCycleSchedule::step() { set_step_count(step_ + 1); }

void OneCycleSchedule::set_step_count(int64_t steps) {
  if (steps < 0 || steps > options_.total_steps)
    PETS_ERROR("OneCycle: tried to take " + std::to_string(steps) +
               " optimiser steps; total_steps is " + std::to_string(options_.total_steps));
  step_ = steps;
  update();
}

void OneCycleSchedule::update() {
  const double initial = initial_lr();
  const double min_lr = initial / options_.final_div_factor;
  // Phase ends are floats, exactly as torch.optim.lr_scheduler.OneCycleLR builds them.
  const double warm_end = options_.pct_start * static_cast<double>(options_.total_steps) - 1.0;
  const double last_end = static_cast<double>(options_.total_steps) - 1.0;
  const double t = static_cast<double>(position());
  if (t <= warm_end) {
    // PyTorch divides by zero here when the warm-up phase ends at step 0; we take its end.
    const double pct = warm_end > 0.0 ? t / warm_end : 1.0;
    lr_ = cosine_anneal(initial, options_.max_lr, pct);
    beta1_ = cosine_anneal(options_.max_momentum, options_.base_momentum, pct);
  } else {
    const double pct = (t - warm_end) / (last_end - warm_end);
    lr_ = cosine_anneal(options_.max_lr, min_lr, pct);
    beta1_ = cosine_anneal(options_.base_momentum, options_.max_momentum, pct);
  }
}

}  // namespace pets::train
