#pragma once
/// \file
/// The BatchNorm statistics across ranks. In train mode each rank's running statistics see only
/// its own batches: before evaluating (and in end-of-epoch checkpoints) they are averaged so
/// that every rank holds the same model; inside an epoch a checkpoint keeps every rank's.

#include <ATen/core/Tensor.h>

#include <string>

namespace torch::nn {
class Module;
}

namespace pets::comm {
class Communicator;
class MpiComm;
}  // namespace pets::comm

namespace pets::train {

struct TrainingState;

/// Averages every floating-point buffer of `module` (running mean and variance) over the ranks
/// of `comm` and gives every rank rank 0's integer buffers (num_batches_tracked, equal on all
/// ranks that ran the same steps). Collective; buffers on the communicator's device.
void sync_batchnorm(torch::nn::Module& module, comm::Communicator& comm);

/// This rank's buffers of `module` flattened in registration order into one float64 vector on
/// their device (exact for float32 statistics and int64 counters): one row of the tensors below.
at::Tensor rank_buffer_row(const torch::nn::Module& module);

/// Row `rank` of `all` (rows of rank_buffer_row(), one per rank: what an earlier pets_train's
/// mid-epoch checkpoints hold) back into `module`'s buffers. Throws pets::Error when the row's
/// length does not match the buffers.
void scatter_rank_buffers(torch::nn::Module& module, const at::Tensor& all, int rank);

/// The BatchNorm statistics of a run's model (every buffer) on the ranks of `mpi`: averaged
/// before each evaluation under --bn-mode train, and saved in and restored from checkpoints.
class BatchNormSync {
 public:
  /// `device_comm` carries `model`'s buffers (on its device); `train_mode`: --bn-mode train,
  /// where each rank's statistics see only its own batches. Both must outlive this.
  BatchNormSync(torch::nn::Module& model, const comm::MpiComm& mpi, comm::Communicator& device_comm,
                bool train_mode);

  /// Before an evaluation: every rank gets the average (train mode, several ranks; collective).
  void synchronise();
  /// Adds this rank's buffers to `state.model` under their state-dict names, and, with several
  /// ranks inside an epoch under train mode (state.mid_epoch(), varies_per_rank()), marks the state
  /// as one whose other ranks write their own (state.rank_shards). No collective.
  void save(TrainingState& state) const;
  /// Whether the ranks' statistics differ inside an epoch (train mode, several ranks).
  bool varies_per_rank() const;
  /// Restores this rank's buffers from `state` (read from `path`), or, on a rank other than 0 when
  /// the state has rank shards, from `own`, its shard (TrainingState::read_shard). Throws
  /// pets::UsageError naming `path` when a buffer is missing or a mid-epoch checkpoint holds
  /// another number of ranks.
  void restore(const TrainingState& state, const std::string& path,
               const TrainingState* own = nullptr);

 private:
  torch::nn::Module& model_;
  const comm::MpiComm& mpi_;
  comm::Communicator& device_comm_;
  bool train_mode_;
};

}  // namespace pets::train
