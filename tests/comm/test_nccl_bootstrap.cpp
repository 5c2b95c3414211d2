// The NCCL backend's bootstrap under MPI. ncclGetUniqueId needs no GPU (it only opens a socket
// for the bootstrap root), so the id exchange is tested everywhere; communicator creation and
// collectives need one GPU per rank and run only where there are enough.
#include <gtest/gtest.h>

#include <cctype>
#include <cstring>
#include <vector>

#include "pets/comm/communicator.hpp"
#include "pets/comm/mpi_comm.hpp"
#include "pets/comm/nccl_comm.hpp"
#include "pets/util/error.hpp"

namespace {

using pets::comm::MpiComm;

/// Every rank's copy of the id, as gathered bytes.
std::vector<std::vector<char>> gather_ids(const MpiComm& mpi, const ncclUniqueId& id) {
  std::vector<char> all(static_cast<std::size_t>(mpi.size()) * NCCL_UNIQUE_ID_BYTES);
  MPI_Allgather(id.internal, NCCL_UNIQUE_ID_BYTES, MPI_BYTE, all.data(), NCCL_UNIQUE_ID_BYTES,
                MPI_BYTE, mpi.get());
  std::vector<std::vector<char>> ids;
  for (int r = 0; r < mpi.size(); ++r)
    ids.emplace_back(all.begin() + r * NCCL_UNIQUE_ID_BYTES,
                     all.begin() + (r + 1) * NCCL_UNIQUE_ID_BYTES);
  return ids;
}

int visible_gpus() {
  int count = 0;
  return cudaGetDeviceCount(&count) == cudaSuccess ? count : 0;
}

/// Whether every rank of `mpi` has a GPU of its own (collective).
bool every_rank_has_a_gpu(const MpiComm& mpi) {
  int enough_here = visible_gpus() > mpi.local_rank() ? 1 : 0;
  int enough = 0;
  MPI_Allreduce(&enough_here, &enough, 1, MPI_INT, MPI_MIN, mpi.get());
  return enough == 1;
}

TEST(NcclBootstrap, UniqueIdFromRootIsIdenticalOnEveryRank) {
  MpiComm mpi;
  const ncclUniqueId id = pets::comm::broadcast_nccl_unique_id(mpi, 0);
  const auto ids = gather_ids(mpi, id);
  ASSERT_EQ(ids.size(), static_cast<std::size_t>(mpi.size()));
  for (const auto& other : ids) EXPECT_EQ(other, ids[0]);
  EXPECT_NE(ids[0], std::vector<char>(NCCL_UNIQUE_ID_BYTES, 0)) << "the id is all zeros";

  // A second bootstrap gets a fresh id (a new root socket), so the bytes are really rank 0's.
  const ncclUniqueId next = pets::comm::broadcast_nccl_unique_id(mpi, 0);
  EXPECT_NE(std::memcmp(id.internal, next.internal, NCCL_UNIQUE_ID_BYTES), 0);
  for (const auto& other : gather_ids(mpi, next))
    EXPECT_EQ(0, std::memcmp(other.data(), next.internal, NCCL_UNIQUE_ID_BYTES));
}

TEST(NcclBootstrap, UniqueIdFromAnotherRoot) {
  MpiComm mpi;
  const int root = mpi.size() - 1;
  const ncclUniqueId id = pets::comm::broadcast_nccl_unique_id(mpi, root);
  const auto ids = gather_ids(mpi, id);
  for (const auto& other : ids) EXPECT_EQ(other, ids[static_cast<std::size_t>(root)]);
  EXPECT_THROW(pets::comm::broadcast_nccl_unique_id(mpi, mpi.size()), pets::Error);
}

TEST(NcclBootstrap, VersionStringMatchesTheHeader) {
  EXPECT_EQ(pets::comm::nccl_version_string(), std::to_string(NCCL_MAJOR) + "." +
                                                   std::to_string(NCCL_MINOR) + "." +
                                                   std::to_string(NCCL_PATCH));
}

TEST(NcclBootstrap, ErrorsCarryNcclsMessageAndVersion) {
  try {
    PETS_NCCL_CHECK(ncclInvalidArgument);
    FAIL() << "no throw";
  } catch (const pets::Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("ncclInvalidArgument failed: "), std::string::npos) << what;
    EXPECT_NE(what.find(ncclGetErrorString(ncclInvalidArgument)), std::string::npos) << what;
    EXPECT_NE(what.find("NCCL " + pets::comm::nccl_version_string()), std::string::npos) << what;
    EXPECT_NE(what.find("test_nccl_bootstrap.cpp"), std::string::npos) << what;
  }
}

TEST(NcclComm, WithoutAGpuPerRankEveryRankThrowsInsteadOfHanging) {
  MpiComm mpi;
  int enough_here = visible_gpus() > mpi.local_rank() ? 1 : 0;
  int enough = 0;
  MPI_Allreduce(&enough_here, &enough, 1, MPI_INT, MPI_MIN, mpi.get());
  if (enough) GTEST_SKIP() << "every rank has a GPU; NcclComm.CollectivesOnTheGpu covers this";
  try {
    pets::comm::NcclComm nccl(mpi, mpi.local_rank());
    FAIL() << "NcclComm created without a GPU";
  } catch (const pets::Error& e) {
    std::string what = e.what();
    if (!enough_here) {
      // This rank's own CUDA failure: "cudaGetDeviceCount(...) failed: <CUDA's reason>" or
      // "CUDA device N requested, M visible".
      for (char& c : what) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      EXPECT_NE(what.find("cuda"), std::string::npos) << e.what();
      EXPECT_NE(what.find("rank " + std::to_string(mpi.rank())), std::string::npos) << e.what();
    } else {
      EXPECT_NE(what.find("other rank"), std::string::npos) << what;
    }
  }
}

TEST(NcclComm, CollectivesOnTheGpu) {
  MpiComm mpi;
  if (!every_rank_has_a_gpu(mpi))
    GTEST_SKIP() << "needs one CUDA device per rank; " << visible_gpus() << " visible";
  pets::comm::NcclComm nccl(mpi, mpi.local_rank());
  EXPECT_EQ(nccl.rank(), mpi.rank());
  EXPECT_EQ(nccl.size(), mpi.size());

  constexpr std::size_t kCount = 1000;
  std::vector<float> host(kCount);
  for (std::size_t i = 0; i < kCount; ++i) host[i] = static_cast<float>(i) * (mpi.rank() + 1);
  float* device = nullptr;
  cudaStream_t stream = nullptr;
  PETS_CUDA_CHECK(cudaStreamCreate(&stream));
  PETS_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&device), kCount * sizeof(float)));
  PETS_CUDA_CHECK(cudaMemcpy(device, host.data(), kCount * sizeof(float), cudaMemcpyHostToDevice));
  nccl.all_reduce(device, device, kCount, ncclFloat32, ncclSum, stream);
  PETS_CUDA_CHECK(cudaStreamSynchronize(stream));
  PETS_CUDA_CHECK(cudaMemcpy(host.data(), device, kCount * sizeof(float), cudaMemcpyDeviceToHost));
  const float factor = mpi.size() * (mpi.size() + 1) / 2.0f;
  for (std::size_t i = 0; i < kCount; ++i) ASSERT_EQ(host[i], static_cast<float>(i) * factor);

  for (std::size_t i = 0; i < kCount; ++i) host[i] = static_cast<float>(mpi.rank());
  PETS_CUDA_CHECK(cudaMemcpy(device, host.data(), kCount * sizeof(float), cudaMemcpyHostToDevice));
  nccl.broadcast(device, device, kCount, ncclFloat32, mpi.size() - 1, stream);
  PETS_CUDA_CHECK(cudaStreamSynchronize(stream));
  PETS_CUDA_CHECK(cudaMemcpy(host.data(), device, kCount * sizeof(float), cudaMemcpyDeviceToHost));
  for (std::size_t i = 0; i < kCount; ++i) ASSERT_EQ(host[i], static_cast<float>(mpi.size() - 1));
  nccl.check_async_error();

  // A bad call aborts the communicator and says so; afterwards the object refuses work.
  try {
    nccl.all_reduce(device, device, kCount, ncclFloat32, static_cast<ncclRedOp_t>(-1), stream);
    FAIL() << "no throw";
  } catch (const pets::Error& e) {
    EXPECT_NE(std::string(e.what()).find("communicator aborted"), std::string::npos) << e.what();
  }
  EXPECT_EQ(nccl.get(), nullptr);
  EXPECT_THROW(nccl.all_reduce(device, device, 1, ncclFloat32, ncclSum, stream), pets::Error);
  PETS_CUDA_CHECK(cudaFree(device));
  PETS_CUDA_CHECK(cudaStreamDestroy(stream));
}

#ifdef PETS_TORCH_CUDA
// The Communicator for CUDA tensors returns once a collective is enqueued on the stream: its
// seconds are not the collectives' time.
TEST(NcclComm, CommunicatorTimesOnlyTheEnqueueing) {
  MpiComm mpi;
  if (!every_rank_has_a_gpu(mpi))
    GTEST_SKIP() << "needs one CUDA device per rank; " << visible_gpus() << " visible";
  const auto comm = pets::comm::make_nccl_communicator(mpi, mpi.local_rank());
  EXPECT_EQ(comm->backend(), "nccl");
  EXPECT_FALSE(comm->times_completion());
}
#endif

}  // namespace
