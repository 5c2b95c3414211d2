#pragma once
/// \file
/// One error idiom for the whole project: library code throws pets::Error (or pets::UsageError
/// for bad input), stamped with file:line and the MPI rank; programs catch once in main.

#include <stdexcept>
#include <string>

namespace pets {

/// A failure with a message that already names where it happened and on which rank.
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

/// Bad input from the user (options, files, configuration): programs exit with status 2.
class UsageError : public Error {
 public:
  explicit UsageError(const std::string& what) : Error(what) {}
};

/// The world rank of this process, or -1 before MPI_Init / without MPI.
int current_rank();

/// "message (file:line, rank N)".
std::string stamp(const std::string& message, const char* file, int line);

[[noreturn]] void throw_error(const std::string& message, const char* file, int line);
[[noreturn]] void throw_mpi_error(int code, const char* call, const char* file, int line);

}  // namespace pets

#define PETS_ERROR(msg) ::pets::throw_error((msg), __FILE__, __LINE__)

#define PETS_CHECK(cond, msg)    \
  do {                           \
    if (!(cond)) PETS_ERROR(msg); \
  } while (0)

#define PETS_MPI_CHECK(call)                                                       \
  do {                                                                             \
    int pets_mpi_rc_ = (call);                                                     \
    if (pets_mpi_rc_ != 0) ::pets::throw_mpi_error(pets_mpi_rc_, #call, __FILE__, __LINE__); \
  } while (0)
