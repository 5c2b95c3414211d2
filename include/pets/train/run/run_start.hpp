#pragma once
/// \file
/// What a run starts from: its model, and, when it resumes, the point of the checkpoint it
/// continues (the run's parts, run_parts.cpp, call both once).

#include <cstdint>
#include <vector>

#include "pets/model/resnet50d.hpp"
#include "pets/train/options/options.hpp"
#include "pets/train/report/metrics.hpp"

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

/// The options this start of pets_train runs with. A new run (--resume=no): those parsed. With
/// --resume, when --out holds a checkpoint: the run's own, from its latest complete checkpoint,
/// with those given on the command line or in --config (resume_options; a conflict is a
/// pets::UsageError). Without one, those parsed; when they name no --data, a pets::UsageError
/// saying there is no run to take it from. Collective over MPI_COMM_WORLD: rank 0 reads the
/// checkpoint, the other ranks receive it (share_latest_checkpoint).
TrainOptions options_to_run(const ParseResult& parsed);

}  // namespace pets::train
