#include "pets/train/step/batchnorm_sync.hpp"

#include <torch/torch.h>

#include "pets/comm/communicator.hpp"
#include "pets/comm/mpi_comm.hpp"
#include "pets/train/state/training_state.hpp"
#include "pets/util/error.hpp"

namespace pets::train {

namespace {

/// The tensors flattened into one, in order.
torch::Tensor pack(const std::vector<torch::Tensor>& tensors) {
  std::vector<torch::Tensor> flat;
  flat.reserve(tensors.size());
  for (const auto& t : tensors) flat.push_back(t.flatten());
  return torch::cat(flat);
}

/// Copies consecutive slices of `packed` back into `tensors` (the inverse of pack); `packed`
/// must hold exactly their elements.
void unpack(const torch::Tensor& packed, std::vector<torch::Tensor>& tensors) {
  int64_t offset = 0;
  for (auto& t : tensors) {
    PETS_CHECK(offset + t.numel() <= packed.numel(), "packed tensor too short for its tensors");
    t.copy_(packed.narrow(0, offset, t.numel()).view_as(t));
    offset += t.numel();
  }
  PETS_CHECK(offset == packed.numel(), "packed tensor longer than its tensors");
}

/// A module's buffers by kind, each in registration order: the floating-point ones (running
/// means and variances) and the integer ones (num_batches_tracked).
struct BuffersByKind {
  std::vector<torch::Tensor> floats, ints;
};

BuffersByKind buffers_by_kind(const torch::nn::Module& module) {
  BuffersByKind out;
  for (const auto& b : module.named_buffers(true))
    (b.value().is_floating_point() ? out.floats : out.ints).push_back(b.value());
  return out;
}

}  // namespace

void sync_batchnorm(torch::nn::Module& module, comm::Communicator& comm) {
  auto [floats, ints] = buffers_by_kind(module);
  torch::NoGradGuard no_grad;
  // Running means and variances: averaged over the ranks, in one collective.
  if (!floats.empty()) {
    torch::Tensor packed = pack(floats);
    comm.allreduce_average(packed);
    unpack(packed, floats);
  }
  // num_batches_tracked counters: the same on every rank by construction; rank 0's are kept.
  if (!ints.empty()) {
    torch::Tensor packed = pack(ints);
    comm.broadcast(packed, 0);
    unpack(packed, ints);
  }
}

at::Tensor rank_buffer_row(const torch::nn::Module& module) {
  std::vector<torch::Tensor> buffers;
  for (const auto& b : module.named_buffers(true)) buffers.push_back(b.value().to(torch::kFloat64));
  return pack(buffers);
}

void scatter_rank_buffers(torch::nn::Module& module, const at::Tensor& all, int rank) {
  PETS_CHECK(all.dim() == 2 && rank >= 0 && rank < all.size(0), "rank_buffers has the wrong shape");
  std::vector<torch::Tensor> buffers;
  for (const auto& b : module.named_buffers(true)) buffers.push_back(b.value());
  torch::NoGradGuard no_grad;
  unpack(all[rank], buffers);  // checks that the row holds exactly the model's buffers
}

BatchNormSync::BatchNormSync(torch::nn::Module& model, const comm::MpiComm& mpi,
                             comm::Communicator& device_comm, bool train_mode)
    : model_(model), mpi_(mpi), device_comm_(device_comm), train_mode_(train_mode) {}

void BatchNormSync::synchronise() {
  if (train_mode_ && mpi_.size() > 1) sync_batchnorm(model_, device_comm_);
}

void BatchNormSync::save(TrainingState& state) const {
  for (const auto& b : model_.named_buffers(true)) state.model.emplace_back(b.key(), b.value());
  // Mid-epoch, train-mode statistics differ per rank (they are averaged only before evaluation):
  // each rank keeps its own, so that a resumed run continues each rank exactly.
  state.rank_shards = state.mid_epoch() && varies_per_rank();
  if (state.rank_shards)
    for (const auto& b : model_.named_buffers(true)) state.per_rank.push_back(b.key());
}

bool BatchNormSync::varies_per_rank() const { return train_mode_ && mpi_.size() > 1; }

void BatchNormSync::restore(const TrainingState& state, const std::string& path,
                            const TrainingState* own) {
  TrainingState::Tensors buffers;
  for (const auto& b : model_.named_buffers(true)) buffers.emplace_back(b.key(), b.value());
  if ((state.rank_shards || state.rank_buffers.defined()) && state.world_size != mpi_.size())
    throw UsageError(path + ": a mid-epoch checkpoint of " + std::to_string(state.world_size) +
                     " ranks; resume it with as many");
  if (state.rank_shards && mpi_.rank() != 0) {
    PETS_CHECK(own != nullptr, "rank " + std::to_string(mpi_.rank()) + " has no shard to restore");
    own->restore_model_tensors(buffers, path);
    return;
  }
  state.restore_model_tensors(buffers, path);
  if (state.rank_buffers.defined()) scatter_rank_buffers(model_, state.rank_buffers, mpi_.rank());
}

}  // namespace pets::train
