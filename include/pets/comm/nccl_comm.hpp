#pragma once
/// \file
/// The NCCL backend: an RAII NCCL communicator bootstrapped over MPI, and (with a CUDA build of
/// LibTorch) the Communicator for CUDA tensors. Everything here exists only in builds that found
/// CUDA and NCCL: CMake compiles the sources that include it only there (the trainer reaches it
/// through the backend's CUDA half, pets/train/device/cuda_parts.hpp).

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <cstddef>
#include <memory>
#include <string>

#include "pets/comm/communicator.hpp"
#include "pets/util/error.hpp"  // PETS_NCCL_CHECK, PETS_CUDA_CHECK and their helpers

namespace pets::comm {

class MpiComm;

/// The NCCL library's runtime version, e.g. "2.28.9" (for error messages).
std::string nccl_version_string();

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

/// The Communicator for CUDA tensors on `device`: collectives on the tensor's current CUDA
/// stream; barrier and counters go through `mpi` (host values), which must outlive it. Defined
/// where LibTorch is a CUDA build too (nccl_communicator.cpp).
std::unique_ptr<Communicator> make_nccl_communicator(const MpiComm& mpi, int device);

}  // namespace pets::comm
