#include <gtest/gtest.h>

#include "pets/comm/mpi_comm.hpp"
#include "pets/comm/program.hpp"
#include "pets/util/error.hpp"

namespace {

int world_rank() {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return rank;
}
int world_size() {
  int size = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  return size;
}

TEST(DecideOnRank0, EveryRankGetsRankZerosAnswerOrItsUsageError) {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  int calls = 0;
  EXPECT_EQ(pets::decide_on_rank_0([&] {
              ++calls;
              return std::string("rank ") + std::to_string(rank);
            }),
            "rank 0");
  EXPECT_EQ(calls, rank == 0 ? 1 : 0);  // the others only hear the answer
  try {
    pets::decide_on_rank_0([&]() -> std::string { throw pets::UsageError("--out: locked"); });
    FAIL() << "no usage error on rank " << rank;
  } catch (const pets::UsageError& e) {
    EXPECT_STREQ(e.what(), "--out: locked");
  }
}

TEST(DecideOnRank0, DecidesOnRankZeroOfTheCommunicatorItIsGiven) {
  // The world split in reverse order: each rank's answer comes from the last world rank.
  const int rank = world_rank(), size = world_size();
  MPI_Comm reversed = MPI_COMM_NULL;
  ASSERT_EQ(MPI_Comm_split(MPI_COMM_WORLD, 0, size - 1 - rank, &reversed), MPI_SUCCESS);
  EXPECT_EQ(pets::decide_on_rank_0([&] { return "world rank " + std::to_string(rank); }, reversed),
            "world rank " + std::to_string(size - 1));
  try {
    pets::decide_on_rank_0(
        [&]() -> std::string {
          throw pets::UsageError("--images: from world rank " + std::to_string(rank));
        },
        reversed);
    ADD_FAILURE() << "no usage error on rank " << rank;
  } catch (const pets::UsageError& e) {
    EXPECT_EQ(std::string(e.what()), "--images: from world rank " + std::to_string(size - 1));
  }
  MPI_Comm_free(&reversed);
}

TEST(MpiComm, IsAPrivateDuplicateOfTheWorld) {
  pets::comm::MpiComm comm;
  EXPECT_EQ(comm.rank(), world_rank());
  EXPECT_EQ(comm.size(), world_size());
  int result = MPI_UNEQUAL;
  MPI_Comm_compare(comm.get(), MPI_COMM_WORLD, &result);
  EXPECT_EQ(result, MPI_CONGRUENT);  // same group, different context: messages never mix
  MPI_Errhandler handler;
  MPI_Comm_get_errhandler(comm.get(), &handler);
  EXPECT_EQ(handler, MPI_ERRORS_RETURN);
  MPI_Errhandler_free(&handler);
}

TEST(MpiComm, NodeLocalRanksOnOneMachine) {
  pets::comm::MpiComm comm;
  // ctest runs every rank on this one machine, so the node-local group is the whole world.
  EXPECT_EQ(comm.local_size(), comm.size());
  EXPECT_EQ(comm.local_rank(), comm.rank());
  int local_size = 0;
  MPI_Comm_size(comm.local(), &local_size);
  EXPECT_EQ(local_size, comm.local_size());
}

TEST(CountHosts, AsManyAsNodeLocalGroups) {
  pets::comm::MpiComm comm;
  // One host per node-local group: under ctest every rank runs on this machine, so 1 (on the
  // multinode cluster, its hosts).
  int leaders = comm.local_rank() == 0 ? 1 : 0;
  MPI_Allreduce(MPI_IN_PLACE, &leaders, 1, MPI_INT, MPI_SUM, comm.get());
  EXPECT_EQ(pets::comm::count_hosts(comm.get()), leaders);
}

TEST(MpiComm, MoveTransfersOwnership) {
  pets::comm::MpiComm a;
  const MPI_Comm handle = a.get();
  pets::comm::MpiComm b(std::move(a));
  EXPECT_EQ(b.get(), handle);
  EXPECT_EQ(a.get(), MPI_COMM_NULL);  // NOLINT(bugprone-use-after-move): documented state
  pets::comm::MpiComm c;
  c = std::move(b);
  EXPECT_EQ(c.get(), handle);
  EXPECT_EQ(c.rank(), world_rank());
}

TEST(MpiEnvironment, ReusesAnExistingInitialisation) {
  int argc = 0;
  char** argv = nullptr;
  pets::comm::MpiEnvironment environment(argc, argv);
  EXPECT_FALSE(environment.owns_mpi());  // the test main initialised MPI
  EXPECT_GE(environment.thread_level(), MPI_THREAD_FUNNELED);
}

}  // namespace
