#pragma once
/// \file
/// What a run starts from: its model, and, when it resumes, the point of the checkpoint it
/// continues (the training loop's wiring, trainer.cpp, calls both once).

#include <cstdint>
#include <vector>

#include "pets/model/resnet50d.hpp"
#include "pets/train/metrics.hpp"
#include "pets/train/options.hpp"

namespace pets {
class RankLog;
}  // namespace pets

namespace pets::train {

class Backend;
class BatchNormSync;
class RunSession;
class TensorBoardLog;
class TrainStep;
struct RunShape;

/// The run's model (collective): ResNet-50d for `num_classes`, with --pretrained's weights when
/// given (every rank throws the same UsageError when they do not load) or a warning, the
/// backbone frozen, channels-last, rank 0's weights on every rank, on `backend`'s device.
model::ResNet50d make_run_model(const TrainOptions& options, std::int64_t num_classes,
                                Backend& backend, RankLog& log);

/// Where a resumed run continues.
struct ResumePoint {
  std::int64_t epoch = 0;
  EpochPosition position;
  std::vector<EpochMetrics> history;
};

/// Continues from the latest checkpoint of `session` (collective): `batchnorm` and `step` restore
/// their state (another rank count than the checkpoint's restarts the schedule at the epoch
/// boundary of its new length, `steps_per_epoch`), `board` learns the step count, and `log` says
/// from where.
ResumePoint resume_run(RunSession& session, const RunShape& shape, int world_size,
                       std::int64_t steps_per_epoch, BatchNormSync& batchnorm, TrainStep& step,
                       TensorBoardLog& board, RankLog& log);

}  // namespace pets::train
