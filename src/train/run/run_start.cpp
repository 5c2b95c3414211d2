#include "pets/train/run/run_start.hpp"

#include <mpi.h>

#include <filesystem>
#include <optional>
#include <string>

#include "pets/comm/communicator.hpp"
#include "pets/comm/program.hpp"
#include "pets/data/loader.hpp"
#include "pets/model/state_dict.hpp"
#include "pets/train/options/resume_check.hpp"
#include "pets/train/report/tensorboard.hpp"
#include "pets/train/run/backend.hpp"
#include "pets/train/run/run_session.hpp"
#include "pets/train/state/checkpoint.hpp"
#include "pets/train/state/training_state.hpp"
#include "pets/train/step/batchnorm_sync.hpp"
#include "pets/train/step/train_step.hpp"
#include "pets/util/log.hpp"

namespace pets::train {

model::ResNet50d make_run_model(const TrainOptions& options, std::int64_t num_classes,
                                Backend& backend, RankLog& log) {
  model::ResNet50d model(num_classes);
  if (!options.pretrained.empty()) {
    log.note("notice: " + model::load_report_text(agree_on_usage(
                              [&] { return model::load_state_dict(*model, options.pretrained); })));
  } else {
    log.note(
        "warning: no --pretrained weights: the frozen backbone is randomly initialised; "
        "data/fetch_weights.sh DIR fetches timm's, then --pretrained "
        "DIR/resnet50d.ra2_in1k.safetensors");
  }
  model->freeze_backbone();
  model->to_channels_last();
  comm::broadcast_module(backend.host_comm(), *model, 0);
  model->to(backend.device());
  return model;
}

ResumePoint resume_run(RunSession& session, const RunShape& shape, int world_size,
                       std::int64_t steps_per_epoch, BatchNormSync& batchnorm, TrainStep& step,
                       TensorBoardLog& board, RankLog& log) {
  std::string path;
  const TrainingState state = session.read_latest(shape, path);
  const bool same_ranks = state.world_size == world_size;
  ResumePoint point;
  point.epoch = state.epoch;
  point.position = state.position;
  point.history = state.history;
  const auto epochs = shape.config.options.find("epochs");
  const bool finished = !state.mid_epoch() && epochs != shape.config.options.end() &&
                        std::to_string(state.epoch) == epochs->second;
  // Another rank count splits an epoch into another number of steps: the schedule continues
  // from the epoch boundary as a run at this rank count reaches it (its optimiser steps so far;
  // OneCycleSchedule::position follows from them), Adam keeps its count of updates made, and
  // nothing is marked as redone.
  agree_on_usage([&] {
    check_schedule_resumable(path, state.world_size, state.schedule_steps_per_update, finished);
    check_batching_resumable(
        path, {state.world_size, state.batching, state.version, &state.config.options}, world_size,
        data::kTrainBatching, finished);
    const std::optional<TrainingState> own = session.read_own_shard(state);
    batchnorm.restore(state, path, own ? &*own : nullptr);
    step.restore(state, same_ranks ? std::nullopt : std::optional(point.epoch * steps_per_epoch),
                 path);
  });
  board.resumed(same_ranks ? std::optional(state.schedule_steps) : std::nullopt);
  log.note("resumed from " + path + " at epoch " + std::to_string(point.epoch) + ", step " +
           std::to_string(point.position.step));
  if (!same_ranks)
    log.note("notice: the checkpoint was written by " + std::to_string(state.world_size) +
             " ranks, this run has " + std::to_string(world_size) +
             ": the global batch and the steps per epoch change from here on");
  return point;
}

TrainOptions options_to_run(const ParseResult& parsed) {
  const TrainOptions& o = parsed.options;
  if (o.resume == ResumeMode::kNo) return o;
  std::optional<Checkpoint> ckpt;
  try {
    // Damaged checkpoints are named when the run opens them (resume_run).
    ckpt = share_latest_checkpoint(o.out, nullptr, MPI_COMM_WORLD);
  } catch (const IncompatibleCheckpoint&) {
    if (!o.data.empty()) return o;  // refused, with the reason, when the run opens it
    throw;
  }
  if (!ckpt) {
    if (!o.data.empty()) return o;
    std::error_code ec;
    const bool folder = std::filesystem::is_directory(o.out, ec);
    if (o.resume == ResumeMode::kYes)
      throw UsageError(
          "--resume: " +
          (folder ? "no checkpoint in " + o.out + " can be read" : o.out + " does not exist") +
          ", so there is no run to continue (and no --data for a new one)");
    throw UsageError("the option '--data' is required: --out " + o.out +
                     " holds no run to continue (--resume=auto)");
  }
  const TrainingState state = TrainingState::from_checkpoint(*ckpt);
  const auto epochs = state.config.options.find("epochs");
  const bool finished = !state.mid_epoch() && epochs != state.config.options.end() &&
                        std::to_string(state.epoch) == epochs->second;
  return resume_options(o, parsed.given, state.config, ckpt->path, finished);
}

}  // namespace pets::train
