#include <gtest/gtest.h>
#include <mpi.h>

#include "pets/util/error.hpp"

TEST(ErrorMpi, StampsOwnRank) {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  try {
    PETS_ERROR("x");
  } catch (const pets::Error& e) {
    EXPECT_NE(std::string(e.what()).find("rank " + std::to_string(rank)), std::string::npos);
  }
}

TEST(ErrorMpi, MpiCheckCarriesLibraryMessage) {
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  int value = 0;
  // A negative count is an MPI error that every implementation reports.
  try {
    PETS_MPI_CHECK(MPI_Bcast(&value, -1, MPI_INT, 0, MPI_COMM_WORLD));
    FAIL() << "no throw";
  } catch (const pets::Error& e) {
    EXPECT_NE(std::string(e.what()).find("MPI_Bcast"), std::string::npos) << e.what();
  }
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
}
