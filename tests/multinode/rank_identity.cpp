// rank_identity: where each rank of an MPI world lives, through pets' own communicators.
// Rank 0 prints one line per rank, in rank order:
//   rank R of W on HOST: local rank L of S, host ranks A,B,...
// (the world ranks in R's node-local communicator), then "allreduce: SUM" (the sum of rank + 1
// over the world, gathered across hosts). Exit 1 on any MPI failure.
#include <unistd.h>

#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "pets/comm/mpi_comm.hpp"
#include "pets/util/error.hpp"

namespace {

constexpr int kHostChars = 64;

int run(int argc, char** argv) {
  pets::comm::MpiEnvironment env(argc, argv);
  const pets::comm::MpiComm mpi;

  char host[kHostChars] = {};
  PETS_CHECK(gethostname(host, kHostChars - 1) == 0, "gethostname failed");

  // The world ranks that share this node, as MPI_Comm_split_type grouped them.
  std::vector<int> local_ranks(static_cast<std::size_t>(mpi.local_size()));
  const int me = mpi.rank();
  PETS_MPI_CHECK(MPI_Allgather(&me, 1, MPI_INT, local_ranks.data(), 1, MPI_INT, mpi.local()));
  std::string peers;
  for (const int r : local_ranks) peers += (peers.empty() ? "" : ",") + std::to_string(r);

  char line[256];
  std::snprintf(line, sizeof line, "rank %d of %d on %s: local rank %d of %d, host ranks %s",
                mpi.rank(), mpi.size(), host, mpi.local_rank(), mpi.local_size(), peers.c_str());
  std::vector<char> all(mpi.rank() == 0 ? sizeof line * static_cast<std::size_t>(mpi.size()) : 0);
  PETS_MPI_CHECK(
      MPI_Gather(line, sizeof line, MPI_CHAR, all.data(), sizeof line, MPI_CHAR, 0, mpi.get()));

  const int mine = mpi.rank() + 1;
  int sum = 0;
  PETS_MPI_CHECK(MPI_Allreduce(&mine, &sum, 1, MPI_INT, MPI_SUM, mpi.get()));
  if (mpi.rank() == 0) {
    for (int r = 0; r < mpi.size(); ++r) std::printf("%s\n", &all[r * sizeof line]);
    std::printf("allreduce: %d\n", sum);
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rank_identity: %s\n", e.what());
    return 1;
  }
}
