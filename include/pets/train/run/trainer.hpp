#pragma once
/// \file
/// The training job of pets_train: what the tutorial's `training_loop` does, on every rank of an
/// MPI job. It puts together the parts: TrainStep (train_step.hpp), Evaluator (evaluation.hpp),
/// TrainingState (training_state.hpp, the checkpoint schema), check_resume_compatible
/// (resume_check.hpp), sync_batchnorm (batchnorm_sync.hpp), the debug switches
/// (debug_switches.hpp). LibTorch stays out of this header.

#include <cstdint>
#include <string>
#include <vector>

#include "pets/train/options/options.hpp"
#include "pets/train/report/metrics.hpp"

namespace pets::comm {
class MpiComm;
}

namespace pets::train {

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
/// bad input (agreed across ranks) and pets::Error for faults. SIGUSR1, SIGTERM or SIGINT: rank 0
/// writes the checkpoint of the last step completed as soon as the signal reaches it (at once, or
/// through the next step's allreduce when another rank got it: stop_checkpoint.hpp), and every
/// rank stops at the next collective of the loop (result.preempted).
TrainResult run_training(const TrainOptions& options, const comm::MpiComm& mpi);

}  // namespace pets::train
