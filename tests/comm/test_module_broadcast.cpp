#include <gtest/gtest.h>
#include <torch/torch.h>

#include <vector>

#include "pets/comm/communicator.hpp"
#include "pets/comm/mpi_comm.hpp"
#include "pets/util/error.hpp"

namespace {

std::vector<std::uint64_t> gather(const pets::comm::MpiComm& comm, std::uint64_t value) {
  std::vector<std::uint64_t> all(static_cast<std::size_t>(comm.size()));
  MPI_Allgather(&value, 1, MPI_UINT64_T, all.data(), 1, MPI_UINT64_T, comm.get());
  return all;
}

torch::nn::Sequential make_net(int rank, int hidden = 4) {
  torch::manual_seed(100 + rank);
  torch::nn::Sequential net(torch::nn::Linear(8, hidden), torch::nn::BatchNorm1d(hidden),
                            torch::nn::Linear(hidden, 3));
  net->train();
  // Running statistics differ per rank, as after training steps on different batches.
  net->forward(torch::randn({16, 8}));
  return net;
}

TEST(BroadcastModule, MakesEveryRankIdenticalToTheRoot) {
  pets::comm::MpiComm mpi;
  pets::comm::MpiCommunicator comm(mpi);
  for (int root = 0; root < mpi.size(); ++root) {
    torch::nn::Sequential net = make_net(mpi.rank());
    const auto before = gather(mpi, pets::comm::module_digest(*net));
    ASSERT_NE(before[0], before[1])
        << "the ranks must start different for the test to mean anything";

    pets::comm::broadcast_module(comm, *net, root);
    const auto after = gather(mpi, pets::comm::module_digest(*net));
    for (const std::uint64_t d : after) EXPECT_EQ(d, before[static_cast<std::size_t>(root)]);

    // Buffers travel too (running mean, running var, num_batches_tracked).
    auto* bn = net[1]->as<torch::nn::BatchNorm1d>();
    torch::Tensor mean = bn->running_mean.clone();
    torch::Tensor mean_root = mean.clone();
    MPI_Bcast(mean_root.data_ptr(), static_cast<int>(mean_root.numel()), MPI_FLOAT, root,
              mpi.get());
    EXPECT_TRUE(torch::equal(mean, mean_root));
    // Parameters stay trainable leaves.
    for (const auto& p : net->parameters()) EXPECT_TRUE(p.requires_grad());
  }
}

TEST(BroadcastModule, DifferentLayoutsThrowOnEveryRank) {
  pets::comm::MpiComm mpi;
  pets::comm::MpiCommunicator comm(mpi);
  torch::nn::Sequential net = make_net(mpi.rank(), mpi.rank() == 1 ? 5 : 4);
  EXPECT_THROW(pets::comm::broadcast_module(comm, *net, 0), pets::Error);
}

TEST(ModuleDigest, SeesValuesAndLayout) {
  torch::nn::Sequential a = make_net(0);
  torch::nn::Sequential b = make_net(0);
  EXPECT_EQ(pets::comm::module_digest(*a), pets::comm::module_digest(*b));
  {
    torch::NoGradGuard no_grad;
    b->parameters()[0].view(-1)[0] += 1e-3;
  }
  EXPECT_NE(pets::comm::module_digest(*a), pets::comm::module_digest(*b));
}

}  // namespace
