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
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

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

/// The buffer of a step's allreduce for one head: float64 on the head's device, in this order:
/// fc.weight's gradient, fc.bias's, the rank's loss sum, its image count, its stop request (1 or
/// 0). Its size does not depend on the number of ranks (ResNet-50d's head on 37 classes: 75,816
/// values, 606,528 bytes). float64 keeps the sum independent of the order of the reduction.
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
  /// On the summed buffer (the first head's), before anything is read from it.
  std::function<void(int64_t step, StepSums& sums)> after_allreduce;
  /// On every head's averaged gradients, before the optimiser uses them: fc.weight's and
  /// fc.bias's of head 0, then of head 1, ... (two per head, in --max-lr order).
  std::function<void(int64_t step, const std::vector<at::Tensor>& grads)> averaged;
};

/// The backbone's stages that a TrainStep trains besides the head (--unfreeze), once
/// TrainStep::set_backbone_training turns them on: their parameters are an Adam group of their own
/// whose OneCycle schedule is head 0's with every lr scaled by `lr_ratio` (PyTorch's OneCycleLR
/// with max_lr=[lr_ratio * max_lr, max_lr]), stepped with it.
struct BackboneTraining {
  int first_stage = 0;    ///< the first trained stage (ResNet50dImpl::kStages' numbering)
  double lr_ratio = 0.1;  ///< --backbone-lr-ratio
};

/// How a TrainStep runs, besides the model and the schedule.
struct StepSettings {
  BackboneForward forward;  ///< the backbone's forward, with the run's autocast
  /// fp16: dynamic loss scaling with these settings; nothing for fp32 and bf16.
  std::optional<GradScalerOptions> loss_scaling;
  StepHooks hooks;  ///< what runs around the numerics (the test switches: step_hooks.hpp)
  /// --unfreeze other than none: the backbone's stages trained (one head only); else none.
  std::optional<BackboneTraining> backbone;
};

/// What one step did to one head: the same on every rank.
struct HeadStepResult {
  double loss_sum = 0.0;  ///< cross-entropy summed over the global batch
  double lr = 0.0;        ///< the head's schedule's lr when the step ran
  bool skipped = false;   ///< fp16: inf/NaN gradients, no update (the schedule stays too)
};

/// What one step did: the same on every rank.
struct StepResult {
  double loss_sum = 0.0;  ///< the first head's cross-entropy summed over the global batch
  int64_t images = 0;     ///< images in the global batch
  double lr = 0.0;        ///< the first head's lr when the step ran
  bool skipped = false;   ///< fp16: the first head's gradients were inf/NaN, no update
  bool stop = false;      ///< some rank asked to stop
  /// With StepSettings::backbone, its group's lr when the step ran (before it trains too); else 0.
  double backbone_lr = 0.0;
  std::vector<HeadStepResult> heads;  ///< every head, in --max-lr order (the first too)
};

/// Trains the head (fc) of a frozen-backbone model, or several heads at once over one backbone
/// pass (a sweep of --max-lr): head 0 is the model's fc; every other starts as a copy of the fc it
/// was given (the same initialisation) and has its own Adam state, OneCycle schedule and fp16 loss
/// scaler. A head's features, loss, gradients, sums and updates are computed as a run of that head
/// alone computes them, so each head trains bitwise as a single run with its max_lr.
///
/// With StepSettings::backbone (one head), the backbone's last stages train too once
/// set_backbone_training turns them on: the frozen stages run without autograd, the trained ones
/// with it (BackboneForward::trained), and their gradients of the summed loss travel in one fp32
/// allreduce (4 bytes a parameter, as DDP's) after the head's float64 one, each divided by the
/// global batch's image count on every rank.
class TrainStep {
 public:
  /// Trains `model`'s fc (the backbone must be frozen) with Adam and a OneCycle schedule of
  /// `schedule` on the ranks of `comm`, whose collectives take tensors on the model's device.
  TrainStep(model::ResNet50dImpl& model, comm::Communicator& comm, const OneCycleOptions& schedule,
            StepSettings settings);
  /// One head per schedule in `schedules` (not empty): head 0 is `model`'s fc.
  TrainStep(model::ResNet50dImpl& model, comm::Communicator& comm,
            const std::vector<OneCycleOptions>& schedules, StepSettings settings);
  ~TrainStep();
  TrainStep(const TrainStep&) = delete;
  TrainStep& operator=(const TrainStep&) = delete;

  /// One step over this rank's share of the global batch (at several ranks a full batch on every
  /// rank at every step, the epoch's last one completed with its first images; only at one rank can
  /// the last be short): the update is that of the mean loss over the images of all ranks. Its
  /// collectives are one allreduce of StepSums over `comm` per head: the order in which an
  /// allreduce adds up an element depends on its place in the buffer (Open MPI's ring algorithm
  /// reduces each segment from another rank), so each head's buffer is laid out as a run of that
  /// head alone lays it. `stop_requested` is asked just before the allreduce, which carries its
  /// answer to every rank (a signal that arrives during the forward pass stops the run at this
  /// step). `folded`, when given, runs the backbone (--bn-mode eval). `images`, when defined, are
  /// the batch's images already made on the model's device (the device input path); else
  /// batch_images(batch). Collective over `comm`.
  StepResult run(data::Batch& batch, const std::function<bool()>& stop_requested,
                 const model::FoldedBackbone* folded = nullptr, const at::Tensor& images = {});

  /// The number of heads.
  int heads() const { return static_cast<int>(heads_.size()); }
  /// With StepSettings::backbone: whether the next steps train the backbone's stages too (from
  /// --unfreeze-epoch on; off before). Sets their parameters' requires_grad. Every rank the same.
  void set_backbone_training(bool on);
  /// Whether the steps train the backbone now.
  bool trains_backbone() const;
  /// The trained backbone's parameters under their state-dict names (none without
  /// StepSettings::backbone), in the order their gradients travel.
  const std::vector<std::pair<std::string, at::Tensor>>& backbone_parameters() const;
  /// Head `head`'s logits of pooled `features` (head 0: the model's fc).
  at::Tensor forward_head(int head, const at::Tensor& features);
  /// Head `head`'s weight and bias (head 0: the model's fc's).
  const at::Tensor& head_weight(int head) const;
  const at::Tensor& head_bias(int head) const;

  Adam& adam(int head = 0);
  const Adam& adam(int head = 0) const;
  OneCycleSchedule& schedule(int head = 0);
  const OneCycleSchedule& schedule(int head = 0) const;
  /// The head's loss scaler under fp16, else null.
  GradScaler* scaler(int head = 0);
  const GradScaler* scaler(int head = 0) const;
  /// The lr of the head's last step taken (restored on resume).
  double last_lr(int head = 0) const;

  /// Adds what the step trains and keeps to `state`: the heads' parameters (state.model, head 0
  /// under its state-dict names, the others as heads.<k>.weight and .bias), Adam's moments and
  /// update counts, the schedules' positions, the last lrs and, under fp16, the loss scales; with
  /// a trained backbone its parameters (state.model, state-dict names), its Adam moments (after
  /// the heads') and update count.
  void save(TrainingState& state) const;
  /// Restores them from `state`, read from `path`; each head's schedule continues where it was
  /// saved, or every one at `schedule_steps` when given (a checkpoint of another rank count).
  /// Throws pets::UsageError naming `path` when they do not fit these heads.
  void restore(const TrainingState& state, std::optional<int64_t> schedule_steps,
               const std::string& path);

  /// `state` (from save()) made to outlast the steps that follow, without copying the trained
  /// backbone: every tensor is cloned but the backbone's parameters and Adam moments, which stay
  /// this step's own (what a stop's checkpoint of the last step keeps after every step: the
  /// head, the BatchNorm statistics, not hundreds of MB). stable_copy() completes it.
  TrainingState copy_for_stop(const TrainingState& state) const;
  /// A copy_for_stop() state whose own tensors are cloned too, under the lock run() holds while
  /// it updates the backbone: the state as it was after its step. Nothing when the backbone has
  /// been updated since (the next step's state is then the one to take). A state holding none of
  /// the backbone's tensors is returned as it is.
  std::optional<TrainingState> stable_copy(const TrainingState& state) const;

 private:
  struct Head;
  struct Backbone;
  /// The trained backbone's gradients of the summed loss, summed over the ranks, then divided by
  /// `global_n` into the parameters' gradients.
  void average_backbone_gradients(double global_n);

  model::ResNet50dImpl& model_;
  comm::Communicator& comm_;
  StepSettings settings_;
  std::vector<std::unique_ptr<Head>> heads_;
  std::unique_ptr<Backbone> backbone_;  ///< with StepSettings::backbone
  /// Held by run() while it changes the backbone's parameters and moments in place, and by
  /// stable_copy() while it copies them.
  mutable std::mutex update_mutex_;
};

}  // namespace pets::train
