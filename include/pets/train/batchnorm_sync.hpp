#pragma once
/// \file
/// The BatchNorm statistics across ranks. In train mode each rank's running statistics see only
/// its own batches: before evaluating (and in end-of-epoch checkpoints) they are averaged so
/// that every rank holds the same model; inside an epoch a checkpoint keeps every rank's.

#include <ATen/core/Tensor.h>

namespace torch::nn {
class Module;
}

namespace pets::comm {
class Communicator;
class MpiComm;
}  // namespace pets::comm

namespace pets::train {

/// Averages every floating-point buffer of `module` (running mean and variance) over the ranks
/// of `comm` and gives every rank rank 0's integer buffers (num_batches_tracked, equal on all
/// ranks that ran the same steps). Collective; buffers on the communicator's device.
void sync_batchnorm(torch::nn::Module& module, comm::Communicator& comm);

/// Every rank's buffers of `module`, flattened in registration order into rows of a
/// [world, n] float64 CPU tensor (exact for float32 statistics and int64 counters), on rank 0;
/// other ranks get a tensor of that shape with unspecified contents. Collective over `mpi`.
at::Tensor gather_rank_buffers(const torch::nn::Module& module, const comm::MpiComm& mpi);

/// Row `rank` of a gather_rank_buffers() result back into `module`'s buffers. Throws
/// pets::Error when the row's length does not match the buffers.
void scatter_rank_buffers(torch::nn::Module& module, const at::Tensor& all, int rank);

}  // namespace pets::train
