#pragma once
/// \file
/// One error idiom for the whole project: library code throws pets::Error (or pets::UsageError
/// for bad input), stamped with file:line and the MPI rank; programs catch once in main.
///
/// Every check macro is here: PETS_CHECK, PETS_MPI_CHECK, PETS_H5_CHECK, PETS_TJ_CHECK,
/// PETS_NCCL_CHECK, PETS_CUDA_CHECK. Each turns a failed call into a pets::Error carrying the
/// library's own message. The helper a macro calls is declared here and defined in the area that
/// links its library, so this header needs none of them: MPI in util (error.cpp), HDF5 in
/// data (h5.cpp), TurboJPEG in data (checks.cpp), NCCL and CUDA in comm (nccl_comm.cpp, built only
/// with PETS_HAVE_NCCL). A macro is usable where its library's header is included.

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
/// "<call> failed: <MPI_Error_string of code>" (util/error.cpp).
[[noreturn]] void throw_mpi_error(int code, const char* call, const char* file, int line);

}  // namespace pets

namespace pets::data {

/// "<call> failed: <the HDF5 error stack>", the stack then cleared (data/h5.cpp).
[[noreturn]] void throw_h5_error(const char* call, const char* file, int line);
/// "<call> failed: <tjGetErrorStr2(handle)>"; `handle` is the call's tjhandle (data/checks.cpp).
[[noreturn]] void throw_tj_error(void* handle, const char* call, const char* file, int line);

/// Returns `value` when the HDF5 call succeeded (non-negative id or status), throws otherwise.
template <typename T>
T h5_check(T value, const char* call, const char* file, int line) {
  if (value < 0) throw_h5_error(call, file, line);
  return value;
}

}  // namespace pets::data

namespace pets::comm {

/// "<call> failed: <NCCL's error string>; <ncclGetLastError> (NCCL x.y.z)". `result` is the
/// ncclResult_t, `nccl_comm` the ncclComm_t or null (comm/nccl_comm.cpp, PETS_HAVE_NCCL only).
[[noreturn]] void throw_nccl_error(int result, const char* call, void* nccl_comm, const char* file,
                                   int line);
/// "<call> failed: <cudaGetErrorName>: <cudaGetErrorString>" of the cudaError_t `error`
/// (comm/nccl_comm.cpp, PETS_HAVE_NCCL only).
[[noreturn]] void throw_cuda_error(int error, const char* call, const char* file, int line);

}  // namespace pets::comm

#define PETS_ERROR(msg) ::pets::throw_error((msg), __FILE__, __LINE__)

#define PETS_CHECK(cond, msg)     \
  do {                            \
    if (!(cond)) PETS_ERROR(msg); \
  } while (0)

#define PETS_MPI_CHECK(call)                                                                 \
  do {                                                                                       \
    int pets_mpi_rc_ = (call);                                                               \
    if (pets_mpi_rc_ != 0) ::pets::throw_mpi_error(pets_mpi_rc_, #call, __FILE__, __LINE__); \
  } while (0)

/// Evaluates an HDF5 call that returns an hid_t/herr_t/htri_t/ssize_t; yields its value.
#define PETS_H5_CHECK(call) ::pets::data::h5_check((call), #call, __FILE__, __LINE__)

/// Any non-zero TurboJPEG return, warnings included, throws. Calls where a TJERR_WARNING is
/// acceptable check tjGetErrorCode themselves instead.
#define PETS_TJ_CHECK(handle, call)                                                     \
  do {                                                                                  \
    if ((call) != 0) ::pets::data::throw_tj_error((handle), #call, __FILE__, __LINE__); \
  } while (0)

/// Turns a failed NCCL call (without a communicator to abort) into a pets::Error.
#define PETS_NCCL_CHECK(call)                                                                   \
  do {                                                                                          \
    const ncclResult_t pets_nccl_rc_ = (call);                                                  \
    if (pets_nccl_rc_ != ncclSuccess)                                                           \
      ::pets::comm::throw_nccl_error(static_cast<int>(pets_nccl_rc_), #call, nullptr, __FILE__, \
                                     __LINE__);                                                 \
  } while (0)

/// Turns a failed CUDA runtime call into a pets::Error.
#define PETS_CUDA_CHECK(call)                                                                     \
  do {                                                                                            \
    const cudaError_t pets_cuda_rc_ = (call);                                                     \
    if (pets_cuda_rc_ != cudaSuccess)                                                             \
      ::pets::comm::throw_cuda_error(static_cast<int>(pets_cuda_rc_), #call, __FILE__, __LINE__); \
  } while (0)
