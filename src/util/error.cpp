#include "pets/util/error.hpp"

#include <mpi.h>

namespace pets {

int current_rank() {
  int initialized = 0;
  int finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (!initialized || finalized) return -1;
  int rank = -1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return rank;
}

std::string stamp(const std::string& message, const char* file, int line) {
  std::string where = std::string(file) + ":" + std::to_string(line);
  const int rank = current_rank();
  if (rank >= 0) where += ", rank " + std::to_string(rank);
  return message + " (" + where + ")";
}

void throw_error(const std::string& message, const char* file, int line) {
  throw Error(stamp(message, file, line));
}

void throw_mpi_error(int code, const char* call, const char* file, int line) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  if (MPI_Error_string(code, text, &length) != MPI_SUCCESS) length = 0;
  throw Error(stamp(std::string(call) + " failed: " + std::string(text, length), file, line));
}

}  // namespace pets
