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

/// Every rank's buffers of `module`, flattened in registration order into rows of a
/// [world, n] float64 CPU tensor (exact for float32 statistics and int64 counters), on rank 0;
/// other ranks get a tensor of that shape with unspecified contents. Collective over `mpi`.
at::Tensor gather_rank_buffers(const torch::nn::Module& module, const comm::MpiComm& mpi);

/// Row `rank` of a gather_rank_buffers() result back into `module`'s buffers. Throws
/// pets::Error when the row's length does not match the buffers.
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
  /// Adds the buffers to `state.model` under their state-dict names; with several ranks inside an
  /// epoch (state.mid_epoch()), where they differ per rank, every rank's too
  /// (state.rank_buffers, on rank 0). Collective over `mpi` then.
  void save(TrainingState& state) const;
  /// Whether the ranks' statistics differ inside an epoch (train mode, several ranks): then each
  /// training step carries every rank's (rank_row() as TrainStep's rank_state).
  bool varies_per_rank() const;
  /// This rank's buffers as one float64 row on their device, for every training step: the
  /// floating-point buffers in registration order, then the integer ones (not
  /// rank_buffer_row()'s order, which interleaves them: see in_registration_order()).
  at::Tensor rank_row() const;
  /// Rows of rank_row()'s layout ([ranks, n]) with their columns in registration order, the
  /// layout of rank_buffer_row() and of a checkpoint's rank_buffers.
  at::Tensor in_registration_order(const at::Tensor& rows) const;
  /// save() without a collective, for the state just after a training step whose allreduce
  /// carried `rank_rows` (StepResult::rank_states; undefined unless varies_per_rank()): every
  /// rank's buffers come from there, or, where they are the same on every rank, from this one.
  void save_after_step(TrainingState& state, const at::Tensor& rank_rows) const;
  /// Restores the buffers from `state` (read from `path`), this rank's own row when it holds
  /// every rank's. Throws pets::UsageError naming `path` when a buffer is missing or the
  /// checkpoint holds another number of ranks.
  void restore(const TrainingState& state, const std::string& path);

 private:
  torch::nn::Module& model_;
  const comm::MpiComm& mpi_;
  comm::Communicator& device_comm_;
  bool train_mode_;
};

}  // namespace pets::train
