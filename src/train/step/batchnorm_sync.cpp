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

at::Tensor gather_rank_buffers(const torch::nn::Module& module, const comm::MpiComm& mpi) {
  const torch::Tensor mine = rank_buffer_row(module).cpu().contiguous();
  const int count = static_cast<int>(mine.numel());
  torch::Tensor all = torch::empty({mpi.size(), count}, torch::kFloat64);
  PETS_MPI_CHECK(MPI_Gather(mine.data_ptr(), count, MPI_DOUBLE, all.data_ptr(), count, MPI_DOUBLE,
                            0, mpi.get()));
  return all;
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
  // keep every rank's, so that a resumed run continues each rank exactly.
  if (state.mid_epoch() && mpi_.size() > 1) state.rank_buffers = gather_rank_buffers(model_, mpi_);
}

bool BatchNormSync::varies_per_rank() const { return train_mode_ && mpi_.size() > 1; }

at::Tensor BatchNormSync::rank_row() const {
  // Two copies per kind (a cat of like tensors, then the cast into the row), not one cast per
  // buffer: this runs in every training step.
  const BuffersByKind b = buffers_by_kind(model_);
  int64_t floats = 0, ints = 0;
  for (const auto& t : b.floats) floats += t.numel();
  for (const auto& t : b.ints) ints += t.numel();
  const torch::Device device = !b.floats.empty() ? b.floats[0].device()
                               : !b.ints.empty() ? b.ints[0].device()
                                                 : torch::kCPU;
  torch::Tensor row =
      torch::empty({floats + ints}, torch::TensorOptions(torch::kFloat64).device(device));
  if (floats > 0) row.narrow(0, 0, floats).copy_(pack(b.floats));
  if (ints > 0) row.narrow(0, floats, ints).copy_(pack(b.ints));
  return row;
}

at::Tensor BatchNormSync::in_registration_order(const at::Tensor& rows) const {
  // Column j of the result (registration order) is column index[j] of `rows` (by kind).
  std::vector<int64_t> index;
  int64_t next_float = 0, next_int = 0;
  for (const auto& t : buffers_by_kind(model_).floats) next_int += t.numel();
  for (const auto& b : model_.named_buffers(true)) {
    int64_t& next = b.value().is_floating_point() ? next_float : next_int;
    for (int64_t k = 0; k < b.value().numel(); ++k) index.push_back(next++);
  }
  PETS_CHECK(rows.dim() == 2 && rows.size(1) == static_cast<int64_t>(index.size()),
             "the step's BatchNorm statistics do not match the model's buffers");
  return rows.index_select(1, torch::tensor(index, torch::kInt64).to(rows.device()));
}

void BatchNormSync::save_after_step(TrainingState& state, const at::Tensor& rank_rows) const {
  for (const auto& b : model_.named_buffers(true)) state.model.emplace_back(b.key(), b.value());
  if (!state.mid_epoch() || mpi_.size() == 1) return;
  if (varies_per_rank()) {
    PETS_CHECK(rank_rows.defined() && rank_rows.size(0) == mpi_.size(),
               "the step carried no BatchNorm statistics of every rank");
    state.rank_buffers = in_registration_order(rank_rows.cpu());
  } else {
    state.rank_buffers =
        rank_buffer_row(model_).cpu().unsqueeze(0).expand({mpi_.size(), -1}).contiguous();
  }
}

void BatchNormSync::restore(const TrainingState& state, const std::string& path) {
  TrainingState::Tensors buffers;
  for (const auto& b : model_.named_buffers(true)) buffers.emplace_back(b.key(), b.value());
  state.restore_model_tensors(buffers, path);
  if (!state.rank_buffers.defined()) return;
  if (state.rank_buffers.size(0) != mpi_.size())
    throw UsageError(path + ": a mid-epoch checkpoint of " +
                     std::to_string(state.rank_buffers.size(0)) + " ranks; resume it with as many");
  scatter_rank_buffers(model_, state.rank_buffers, mpi_.rank());
}

}  // namespace pets::train
