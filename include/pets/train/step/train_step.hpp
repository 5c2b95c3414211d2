#pragma once
/// \file
/// One training step of the frozen-backbone model, on every rank: the backbone's features
/// without autograd (autocast under mixed precision), the head and the summed cross-entropy in
/// fp32, one allreduce carrying fc's gradients, the loss, the image count and the ranks' stop
/// requests, then Adam with OneCycle's lr and beta1 (and fp16's loss scaling).

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "pets/train/step/backbone_forward.hpp"
#include "pets/train/step/grad_scaler.hpp"
#include "pets/train/step/onecycle.hpp"

namespace pets::comm {
class Communicator;
}
namespace pets::data {
struct Batch;
}
namespace pets::model {
struct ResNet50dImpl;
class FoldedBackbone;
}  // namespace pets::model

namespace pets::train {

class Adam;
struct TrainingState;

/// The buffer of a step's one allreduce: float64 on the head's device, in this order: fc.weight's
/// gradient, fc.bias's, the rank's loss sum, its image count, its stop request (1 or 0). Its size
/// does not depend on the number of ranks (ResNet-50d's head on 37 classes: 75,816 values, 606,528
/// bytes). float64 keeps the sum independent of the order of the reduction.
class StepSums {
 public:
  StepSums(int64_t weight_numel, int64_t bias_numel, const c10::Device& device);

  at::Tensor& buffer() { return buffer_; }  ///< the whole buffer, as the allreduce takes it
  at::Tensor weight_grad() const { return buffer_.narrow(0, 0, weight_numel_); }
  at::Tensor bias_grad() const {
    return buffer_.narrow(0, weight_numel_, head_numel_ - weight_numel_);
  }
  at::Tensor head_grad() const { return buffer_.narrow(0, 0, head_numel_); }  ///< weight, bias
  at::Tensor loss() const { return buffer_.select(0, head_numel_); }
  at::Tensor images() const { return buffer_.select(0, head_numel_ + 1); }
  at::Tensor stop() const { return buffer_.select(0, head_numel_ + 2); }
  at::Tensor totals() const { return buffer_.narrow(0, head_numel_, 3); }  ///< loss, images, stop

 private:
  int64_t weight_numel_;
  int64_t head_numel_;
  at::Tensor buffer_;
};

/// What runs around a step's numerics, each at its point and given the step's number (the
/// schedule's step count); empty functions are skipped. The test switches install them
/// (pets/train/step/step_hooks.hpp); the numerics do not depend on them.
struct StepHooks {
  /// Before the rank's stop request is read and the sums travel.
  std::function<void(int64_t step)> before_allreduce;
  /// On the summed buffer, before anything is read from it.
  std::function<void(int64_t step, StepSums& sums)> after_allreduce;
  /// On the averaged gradients (fc.weight's, fc.bias's), before the optimiser uses them.
  std::function<void(int64_t step, const at::Tensor& weight_grad, const at::Tensor& bias_grad)>
      averaged;
};

/// How a TrainStep runs, besides the model and the schedule.
struct StepSettings {
  BackboneForward forward;  ///< the backbone's forward, with the run's autocast
  /// fp16: dynamic loss scaling with these settings; nothing for fp32 and bf16.
  std::optional<GradScalerOptions> loss_scaling;
  StepHooks hooks;  ///< what runs around the numerics (the test switches: step_hooks.hpp)
};

/// What one step did: the same on every rank.
struct StepResult {
  double loss_sum = 0.0;  ///< cross-entropy summed over the global batch
  int64_t images = 0;     ///< images in the global batch
  double lr = 0.0;        ///< the schedule's lr when the step ran
  bool skipped = false;   ///< fp16: inf/NaN gradients, no update (the schedule stays too)
  bool stop = false;      ///< some rank asked to stop
};

class TrainStep {
 public:
  /// Trains `model`'s fc (the backbone must be frozen) with Adam and a OneCycle schedule of
  /// `schedule` on the ranks of `comm`, whose collectives take tensors on the model's device.
  TrainStep(model::ResNet50dImpl& model, comm::Communicator& comm, const OneCycleOptions& schedule,
            StepSettings settings);
  ~TrainStep();
  TrainStep(const TrainStep&) = delete;
  TrainStep& operator=(const TrainStep&) = delete;

  /// One step over this rank's share of the global batch (empty on some ranks at an epoch's
  /// end: the update is that of the mean loss over the images of all ranks). Its one collective
  /// is the allreduce of StepSums over `comm`.
  /// `stop_requested` is asked just before the allreduce, which carries its answer to every rank
  /// (a signal that arrives during the forward pass stops the run at this step). `folded`, when
  /// given, runs the backbone (--bn-mode eval). `images`, when defined, are the batch's images
  /// already made on the model's device (the device input path); else batch_images(batch).
  /// Collective over `comm`.
  StepResult run(data::Batch& batch, const std::function<bool()>& stop_requested,
                 const model::FoldedBackbone* folded = nullptr, const at::Tensor& images = {});

  Adam& adam() { return *adam_; }
  const Adam& adam() const { return *adam_; }
  OneCycleSchedule& schedule() { return schedule_; }
  const OneCycleSchedule& schedule() const { return schedule_; }
  /// The loss scaler under fp16, else null.
  GradScaler* scaler() { return scaler_ ? &*scaler_ : nullptr; }
  const GradScaler* scaler() const { return scaler_ ? &*scaler_ : nullptr; }
  /// The lr of the last step taken (restored on resume).
  double last_lr() const { return last_lr_; }

  /// Adds what the step trains and keeps to `state`: fc's parameters (state.model, under their
  /// state-dict names), Adam's moments and update count, the schedule's position, last_lr() and,
  /// under fp16, the loss scale.
  void save(TrainingState& state) const;
  /// Restores them from `state`, read from `path`; the schedule continues at `schedule_steps`.
  /// Throws pets::UsageError naming `path` when they do not fit this head.
  void restore(const TrainingState& state, int64_t schedule_steps, const std::string& path);

 private:
  model::ResNet50dImpl& model_;
  comm::Communicator& comm_;
  StepSettings settings_;
  std::unique_ptr<Adam> adam_;
  OneCycleSchedule schedule_;
  std::optional<GradScaler> scaler_;
  double last_lr_ = 0.0;
};

}  // namespace pets::train
