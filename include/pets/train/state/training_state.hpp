#pragma once
/// \file
/// Everything a pets_train checkpoint holds, as plain values, and its schema: the JSON keys and
/// tensor names are written (to_json, tensors) and read (from_checkpoint) here and nowhere else.

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "pets/train/options/resume_check.hpp"
#include "pets/train/report/metrics.hpp"
#include "pets/train/state/checkpoint.hpp"

namespace pets::train {

/// fp16's dynamic loss scaling (GradScaler) as saved.
struct GradScalerState {
  double scale = 0.0;
  int64_t growth_tracker = 0;
};

/// What a sweep's head after the first keeps besides its tensors (the first's are
/// TrainingState's own fields of the same names).
struct HeadState {
  int64_t adam_steps = 0;
  int64_t schedule_steps = 0;
  double last_lr = 0.0;
  std::optional<GradScalerState> grad_scaler;
};

struct TrainingState {
  using Tensors = std::vector<std::pair<std::string, at::Tensor>>;

  RunConfig config;  ///< must match the resuming run (check_resume_compatible)
  /// The pets_train that wrote it (PETS_VERSION) and how its training batches were made
  /// (data::kTrainBatching); both empty in checkpoints from before they were recorded.
  std::string version, batching;
  int64_t world_size = 1;       ///< ranks of the run that wrote it
  int64_t steps_per_epoch = 0;  ///< at world_size ranks
  int64_t epoch = 0;            ///< the epoch to continue (after an epoch's end: the next one)
  EpochPosition position;       ///< inside `epoch`; step 0: at its start
  int64_t adam_steps = 0;       ///< Adam's update count
  /// OneCycle's position in optimiser steps taken (also the checkpoint's index); the scheduler's
  /// is min(schedule_steps_per_update * schedule_steps, total_steps).
  int64_t schedule_steps = 0;
  /// OneCycle steps per optimiser step: world_size (as Accelerate). Absent from an earlier
  /// pets_train's checkpoints, which stepped it once per optimiser step over the run's own steps:
  /// read as 1 (check_schedule_resumable).
  int64_t schedule_steps_per_update = 1;
  double last_lr = 0.0;                        ///< the lr of the last step taken
  std::vector<EpochMetrics> history;           ///< every finished epoch's metrics
  std::optional<GradScalerState> grad_scaler;  ///< fp16 runs only
  StoreIdentity store;  ///< the image store trained on; id empty in older checkpoints
  /// What training changes in the model, under its state-dict names: fc's parameters and every
  /// buffer (BatchNorm statistics). The frozen weights come from --pretrained (or the seeded
  /// init) again on resume.
  Tensors model;
  /// Mid-epoch with several ranks under --bn-mode train, where each rank's BatchNorm statistics
  /// differ until the next evaluation averages them: `model` holds rank 0's, and every other rank
  /// writes its own beside the checkpoint (save_shard). A checkpoint is complete, and `latest`,
  /// once all of them are there.
  bool rank_shards = false;
  /// With rank_shards: the names in `model` whose values differ per rank (the BatchNorm
  /// buffers), all that a shard holds.
  std::vector<std::string> per_rank;
  /// Checkpoints of an earlier pets_train kept every rank's buffers here instead, [world_size, n]
  /// float64 (read, never written). Undefined otherwise.
  at::Tensor rank_buffers;
  /// Per parameter of each head, in head order (fc.weight's, fc.bias's, then the next head's),
  /// then per trained backbone parameter (--unfreeze; TrainStep::backbone_parameters' order).
  std::vector<at::Tensor> adam_exp_avg, adam_exp_avg_sq;
  /// The trained backbone's Adam update count (0 before --unfreeze-epoch, and without one).
  int64_t backbone_adam_steps = 0;
  /// A sweep (several --max-lr values): the heads after the first, whose tensors are in `model`
  /// as heads.<k>.weight and heads.<k>.bias (k from 1). Empty for one head.
  std::vector<HeadState> more_heads;

  /// A state at `position` of `epoch` of the run `shape`, after the epochs of `history`; the
  /// parts of the run add theirs (TrainStep::save, BatchNormSync::save).
  static TrainingState at(const RunShape& shape, int64_t epoch, const EpochPosition& position,
                          std::vector<EpochMetrics> history);

  /// A copy whose tensors are copies too (a state that training goes on changing in place).
  TrainingState cloned() const;
  /// What a rank other than 0 keeps of this state for its shard (save_shard): a copy with the
  /// tensors of `model` named in per_rank, copied, and none of the others (fc, a sweep's heads,
  /// Adam's moments), which rank 0 alone writes. Without rank_shards, no tensor at all.
  TrainingState shard_part() const;

  bool mid_epoch() const { return position.step > 0; }
  /// The run as resume compares it.
  RunShape shape() const { return {config, world_size, steps_per_epoch, store}; }

  /// The checkpoint's JSON state.
  nlohmann::json to_json() const;
  /// The checkpoint's tensors, on the CPU.
  Tensors tensors() const;
  /// Writes `<dir>/ckpt-<schedule_steps>.safetensors` and points `latest` at it; returns its path.
  /// A state with rank_shards must not: write() it, then commit() once its shards are there.
  std::string save(const std::string& dir) const;
  /// The checkpoint file alone (`latest` is left alone); returns its path.
  std::string write(const std::string& dir) const;
  /// The shards that belong to this state's checkpoint (rank_shards), else nothing.
  std::optional<ShardSet> shards() const;
  /// Points `latest` at this state's checkpoint.
  void commit(const std::string& dir) const;

  /// Rank `rank`'s shard of this state's checkpoint: the tensors of `model` named in per_rank
  /// (its BatchNorm buffers) written into `dir` (shard_file_name); returns its path.
  std::string save_shard(const std::string& dir, int rank) const;
  /// Reads rank `rank`'s shard of this state's checkpoint (rank_shards) from `dir`: a state whose
  /// `model` holds that rank's buffers. Throws pets::UsageError naming the shard when it is
  /// missing, damaged or of another state.
  TrainingState read_shard(const std::string& dir, int rank) const;

  /// Copies the saved values of `targets` (state-dict names, as in `model`) into them. Throws
  /// pets::UsageError naming `path` and the tensor when one is missing.
  void restore_model_tensors(const Tensors& targets, const std::string& path) const;

  /// Reads a checkpoint's state and tensors; throws pets::UsageError naming its path when a key
  /// or tensor is missing or of the wrong type.
  static TrainingState from_checkpoint(const Checkpoint& checkpoint);
};

}  // namespace pets::train
