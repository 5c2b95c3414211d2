#include "pets/train/batchnorm_sync.hpp"

#include <torch/torch.h>

#include "pets/comm/communicator.hpp"
#include "pets/comm/mpi_comm.hpp"
#include "pets/util/error.hpp"

namespace pets::train {

void sync_batchnorm(torch::nn::Module& module, comm::Communicator& comm) {
  std::vector<torch::Tensor> floats, ints;
  for (const auto& b : module.named_buffers(true))
    (b.value().is_floating_point() ? floats : ints).push_back(b.value());
  torch::NoGradGuard no_grad;
  if (!floats.empty()) {
    std::vector<torch::Tensor> flat;
    for (const auto& t : floats) flat.push_back(t.flatten());
    torch::Tensor packed = torch::cat(flat);
    comm.allreduce_average(packed);
    int64_t offset = 0;
    for (auto& t : floats) {
      t.copy_(packed.narrow(0, offset, t.numel()).view_as(t));
      offset += t.numel();
    }
  }
  if (!ints.empty()) {
    std::vector<torch::Tensor> flat;
    for (const auto& t : ints) flat.push_back(t.flatten());
    torch::Tensor counts = torch::cat(flat);
    comm.broadcast(counts, 0);
    int64_t offset = 0;
    for (auto& t : ints) {
      t.copy_(counts.narrow(0, offset, t.numel()).view_as(t));
      offset += t.numel();
    }
  }
}

at::Tensor gather_rank_buffers(const torch::nn::Module& module, const comm::MpiComm& mpi) {
  std::vector<torch::Tensor> flat;
  for (const auto& b : module.named_buffers(true))
    flat.push_back(b.value().flatten().to(torch::kCPU, torch::kFloat64));
  const torch::Tensor mine = torch::cat(flat).contiguous();
  const int count = static_cast<int>(mine.numel());
  torch::Tensor all = torch::empty({mpi.size(), count}, torch::kFloat64);
  PETS_MPI_CHECK(MPI_Gather(mine.data_ptr(), count, MPI_DOUBLE, all.data_ptr(), count, MPI_DOUBLE,
                            0, mpi.get()));
  return all;
}

void scatter_rank_buffers(torch::nn::Module& module, const at::Tensor& all, int rank) {
  PETS_CHECK(all.dim() == 2 && rank >= 0 && rank < all.size(0), "rank_buffers has the wrong shape");
  const torch::Tensor mine = all[rank];
  int64_t offset = 0;
  torch::NoGradGuard no_grad;
  for (auto& b : module.named_buffers(true)) {
    torch::Tensor t = b.value();
    PETS_CHECK(offset + t.numel() <= mine.numel(),
               "rank_buffers does not match the model's buffers");
    t.copy_(mine.narrow(0, offset, t.numel()).view_as(t));
    offset += t.numel();
  }
  PETS_CHECK(offset == mine.numel(), "rank_buffers does not match the model's buffers");
}

}  // namespace pets::train
