#pragma once
/// \file
/// The training job of pets_train: what the tutorial's `training_loop` does, on every rank of an
/// MPI job. LibTorch stays out of this header.

#include <cstdint>
#include <string>
#include <vector>

#include "pets/train/options.hpp"

namespace pets::comm {
class MpiComm;
}

namespace pets::train {

/// What one epoch measured (the same on every rank after the reductions).
struct EpochMetrics {
  int64_t epoch = 0;           ///< 0-based, as the tutorial prints it
  double accuracy = 0.0;       ///< percent of evaluation images predicted right
  int64_t correct = 0;
  int64_t evaluated = 0;
  double train_loss = 0.0;     ///< mean cross-entropy over the epoch's training images
  double lr = 0.0;             ///< the lr of the epoch's last step
  double train_images_per_s = 0.0;
  double eval_images_per_s = 0.0;
  double train_seconds = 0.0;
  double eval_seconds = 0.0;
  double loader_wait_share = 0.0;  ///< share of rank 0's step time spent waiting for batches
};

/// pets_train's exit status when SIGUSR1 or SIGTERM stopped it after a checkpoint
/// (EX_TEMPFAIL): run it again with --resume to continue.
inline constexpr int kExitPreempted = 75;

struct TrainResult {
  bool preempted = false;            ///< stopped by a signal; a checkpoint holds the position
  std::vector<EpochMetrics> epochs;  ///< every epoch of the run, resumed ones included
  std::string final_model;           ///< path of the exported safetensors (rank 0), or empty
};

/// Runs the whole job: model, pretrained weights, optional resume, epochs of training and
/// evaluation, checkpoints, metrics, final export. Collective over `mpi`. Rank 0 prints the
/// tutorial's `epoch N: XX.XX` lines on stdout and progress on stderr. Throws pets::UsageError for
/// bad input (agreed across ranks) and pets::Error for faults. SIGUSR1/SIGTERM on any rank stop
/// every rank at the same step boundary, after a checkpoint (result.preempted).
TrainResult run_training(const TrainOptions& options, const comm::MpiComm& mpi);

/// The number of CPUs in this process's affinity mask (at least 1).
int affinity_cpu_count();

}  // namespace pets::train
