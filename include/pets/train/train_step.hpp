#pragma once
/// \file
/// One training step of the frozen-backbone model, on every rank: the backbone's features
/// without autograd (autocast under mixed precision), the head and the summed cross-entropy in
/// fp32, one allreduce carrying fc's gradients, the loss, the image count and the ranks' stop
/// requests, then Adam with OneCycle's lr and beta1 (and fp16's loss scaling).

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "pets/train/backbone_forward.hpp"
#include "pets/train/debug_switches.hpp"
#include "pets/train/grad_scaler.hpp"
#include "pets/train/onecycle.hpp"

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

struct StepSettings {
  BackboneForward forward;  ///< the backbone's forward, with the run's autocast
  /// fp16: dynamic loss scaling with these settings; nothing for fp32 and bf16.
  std::optional<GradScalerOptions> loss_scaling;
  std::optional<FaultSpec> fault;  ///< PETS_INJECT_FAULT, checked before every allreduce
  std::optional<StepPause> pause;  ///< PETS_PAUSE_STEP, on rank 0 before that step's allreduce
  /// What each rank keeps of its own and a checkpoint of this step needs from every rank (the
  /// train-mode BatchNorm statistics): a float64 vector of the same length on every rank, on the
  /// model's device, taken after the forward pass. The step's allreduce carries every rank's
  /// (StepResult::rank_states). Null: none.
  std::function<at::Tensor()> rank_state;
  /// PETS_VERIFY_RANKS: after every allreduce, the averaged gradients' digests are compared over
  /// this host communicator (collective); null: no check.
  comm::Communicator* verify = nullptr;
};

/// What one step did: the same on every rank.
struct StepResult {
  double loss_sum = 0.0;  ///< cross-entropy summed over the global batch
  int64_t images = 0;     ///< images in the global batch
  double lr = 0.0;        ///< the schedule's lr when the step ran
  bool skipped = false;   ///< fp16: inf/NaN gradients, no update (the schedule stays too)
  bool stop = false;      ///< some rank asked to stop
  /// With StepSettings::rank_state: every rank's, [ranks, n] float64 on the model's device, row r
  /// rank r's as of this step. A view of the step's buffer: copy what is kept.
  at::Tensor rank_states;
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
  /// end: the update is that of the mean loss over the images of all ranks).
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
  /// Steps whose averaged gradients were compared across ranks (PETS_VERIFY_RANKS).
  int64_t gradient_steps_verified() const { return verified_; }
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
  int64_t verified_ = 0;
  double last_lr_ = 0.0;
};

}  // namespace pets::train
