#pragma once
/// \file
/// The NCCL backend: an RAII NCCL communicator bootstrapped over MPI, and (with a CUDA build of
/// LibTorch, PETS_TORCH_CUDA) the Communicator for CUDA tensors. Everything here exists only when
/// the build found CUDA and NCCL (PETS_HAVE_NCCL); include it under `#ifdef PETS_HAVE_NCCL`.

#if defined(PETS_HAVE_NCCL)

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <cstddef>
#include <memory>
#include <string>

#include "pets/comm/communicator.hpp"

namespace pets::comm {

class MpiComm;

/// The NCCL library's runtime version, e.g. "2.28.9" (for error messages).
std::string nccl_version_string();

/// Throws pets::Error: "<call> failed: <NCCL's error string>; <ncclGetLastError> (NCCL x.y.z)".
/// `comm` may be null (calls without a communicator).
[[noreturn]] void throw_nccl_error(ncclResult_t result, const char* call, ncclComm_t comm,
                                   const char* file, int line);
/// Throws pets::Error with the CUDA runtime's name and description of `error`.
[[noreturn]] void throw_cuda_error(cudaError_t error, const char* call, const char* file, int line);

/// Rank `root` of `mpi` creates a unique id (ncclGetUniqueId) and MPI_Bcast gives every rank
/// the same 128 bytes. Collective over `mpi`; needs no GPU.
ncclUniqueId broadcast_nccl_unique_id(const MpiComm& mpi, int root = 0);

/// An NCCL communicator over the ranks of an MpiComm, one CUDA device per rank. Move-only.
/// Any failed NCCL call aborts the communicator (ncclCommAbort, which never waits on peers)
/// before throwing. The destructor destroys it normally, or aborts it when an error was seen or
/// an exception is unwinding, so a dead peer can never make the destructor hang.
class NcclComm {
 public:
  /// Collective over `mpi`. Selects `device` on this thread (cudaSetDevice) and agrees over MPI
  /// that every rank could; then rank 0 makes the unique id, MPI broadcasts it, and every rank
  /// calls ncclCommInitRank. If any rank cannot select its device, every rank throws.
  NcclComm(const MpiComm& mpi, int device);
  ~NcclComm();
  NcclComm(const NcclComm&) = delete;
  NcclComm& operator=(const NcclComm&) = delete;
  NcclComm(NcclComm&& other) noexcept;
  NcclComm& operator=(NcclComm&& other) noexcept;

  ncclComm_t get() const { return comm_; }
  int rank() const { return rank_; }
  int size() const { return size_; }
  /// The CUDA device ordinal this rank's communicator uses.
  int device() const { return device_; }

  /// ncclAllReduce enqueued on `stream`; `send` may equal `recv` (in place).
  void all_reduce(const void* send, void* recv, std::size_t count, ncclDataType_t type,
                  ncclRedOp_t op, cudaStream_t stream);
  /// ncclBroadcast enqueued on `stream`; `send` is read on `root` only.
  void broadcast(const void* send, void* recv, std::size_t count, ncclDataType_t type, int root,
                 cudaStream_t stream);
  /// Throws (after aborting) if NCCL reported an asynchronous error, e.g. a peer that died.
  void check_async_error();
  /// Aborts the communicator: cancels in-flight work and frees it without waiting. Idempotent.
  void abort() noexcept;

 private:
  [[noreturn]] void fail(ncclResult_t result, const char* call, const char* file, int line);
  void release() noexcept;

  ncclComm_t comm_ = nullptr;
  int rank_ = 0;
  int size_ = 0;
  int device_ = -1;
  bool failed_ = false;
  int uncaught_at_start_ = 0;
};

#if defined(PETS_TORCH_CUDA)
/// The Communicator for CUDA tensors on `device`: collectives on the tensor's current CUDA
/// stream; barrier and counters go through `mpi` (host values), which must outlive it.
std::unique_ptr<Communicator> make_nccl_communicator(const MpiComm& mpi, int device);
#endif

}  // namespace pets::comm

/// Turns a failed NCCL call (without a communicator to abort) into a pets::Error.
#define PETS_NCCL_CHECK(call)                                                            \
  do {                                                                                   \
    const ncclResult_t pets_nccl_rc_ = (call);                                           \
    if (pets_nccl_rc_ != ncclSuccess)                                                    \
      ::pets::comm::throw_nccl_error(pets_nccl_rc_, #call, nullptr, __FILE__, __LINE__); \
  } while (0)

/// Turns a failed CUDA runtime call into a pets::Error.
#define PETS_CUDA_CHECK(call)                                                   \
  do {                                                                          \
    const cudaError_t pets_cuda_rc_ = (call);                                   \
    if (pets_cuda_rc_ != cudaSuccess)                                           \
      ::pets::comm::throw_cuda_error(pets_cuda_rc_, #call, __FILE__, __LINE__); \
  } while (0)

#endif  // PETS_HAVE_NCCL
