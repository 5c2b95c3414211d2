// NcclComm (pets/comm/nccl_comm.hpp); CMake compiles this file only where NCCL is found.
#include "pets/comm/nccl_comm.hpp"

#include <exception>
#include <utility>

#include "pets/comm/mpi_comm.hpp"
#include "pets/util/error.hpp"

namespace pets::comm {

/// Inside NcclComm: abort the communicator, then throw.
#define PETS_NCCL_COMM_CHECK(call)                                       \
  do {                                                                   \
    const ncclResult_t pets_nccl_rc_ = (call);                           \
    if (pets_nccl_rc_ != ncclSuccess && pets_nccl_rc_ != ncclInProgress) \
      fail(pets_nccl_rc_, #call, __FILE__, __LINE__);                    \
  } while (0)

std::string nccl_version_string() {
  int code = 0;
  if (ncclGetVersion(&code) != ncclSuccess) return "unknown";
  // NCCL_VERSION(X,Y,Z) is X*10000+Y*100+Z since 2.9 (X*1000+Y*100+Z before).
  const int major = code >= 10000 ? code / 10000 : code / 1000;
  const int minor = code >= 10000 ? (code / 100) % 100 : (code / 100) % 10;
  const int patch = code % 100;
  return std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(patch);
}

void throw_nccl_error(int result, const char* call, void* nccl_comm, const char* file, int line) {
  std::string message =
      std::string(call) + " failed: " + ncclGetErrorString(static_cast<ncclResult_t>(result));
  const char* last = ncclGetLastError(static_cast<ncclComm_t>(nccl_comm));
  if (last != nullptr && *last != '\0') message += "; " + std::string(last);
  message += " (NCCL " + nccl_version_string() + ")";
  throw Error(stamp(message, file, line));
}

void throw_cuda_error(int error, const char* call, const char* file, int line) {
  const auto code = static_cast<cudaError_t>(error);
  throw Error(stamp(
      std::string(call) + " failed: " + cudaGetErrorName(code) + ": " + cudaGetErrorString(code),
      file, line));
}

ncclUniqueId broadcast_nccl_unique_id(const MpiComm& mpi, int root) {
  PETS_CHECK(root >= 0 && root < mpi.size(), "NCCL bootstrap root " + std::to_string(root) +
                                                 " outside 0.." + std::to_string(mpi.size() - 1));
  ncclUniqueId id{};
  // Only the root may fail here; tell the others before they wait for bytes that never come.
  int root_failed = 0;
  std::string root_error;
  if (mpi.rank() == root) {
    try {
      PETS_NCCL_CHECK(ncclGetUniqueId(&id));
    } catch (const Error& e) {
      root_failed = 1;
      root_error = e.what();
    }
  }
  PETS_MPI_CHECK(MPI_Bcast(&root_failed, 1, MPI_INT, root, mpi.get()));
  if (root_failed) {
    if (mpi.rank() == root) throw Error(root_error);
    PETS_ERROR("NCCL bootstrap: rank " + std::to_string(root) + " could not create the unique id");
  }
  static_assert(sizeof(id.internal) == NCCL_UNIQUE_ID_BYTES);
  PETS_MPI_CHECK(MPI_Bcast(id.internal, NCCL_UNIQUE_ID_BYTES, MPI_BYTE, root, mpi.get()));
  return id;
}

NcclComm::NcclComm(const MpiComm& mpi, int device)
    : rank_(mpi.rank()),
      size_(mpi.size()),
      device_(device),
      uncaught_at_start_(std::uncaught_exceptions()) {
  // Device selection fails locally (no GPU, bad ordinal); agree on it first, because a rank that
  // threw here would leave the others blocked in ncclCommInitRank forever.
  std::string local_error;
  try {
    int count = 0;
    PETS_CUDA_CHECK(cudaGetDeviceCount(&count));
    PETS_CHECK(device >= 0 && device < count, "CUDA device " + std::to_string(device) +
                                                  " requested, " + std::to_string(count) +
                                                  " visible");
    PETS_CUDA_CHECK(cudaSetDevice(device));
  } catch (const Error& e) {
    local_error = e.what();
  }
  int failed_here = local_error.empty() ? 0 : 1;
  int failed_ranks = 0;
  PETS_MPI_CHECK(MPI_Allreduce(&failed_here, &failed_ranks, 1, MPI_INT, MPI_SUM, mpi.get()));
  if (failed_ranks > 0) {
    if (failed_here) throw Error(local_error);
    PETS_ERROR("NCCL communicator not created: " + std::to_string(failed_ranks) +
               " other rank(s) could not select their CUDA device");
  }

  const ncclUniqueId id = broadcast_nccl_unique_id(mpi, 0);
  PETS_NCCL_COMM_CHECK(ncclCommInitRank(&comm_, size_, id, rank_));
}

NcclComm::~NcclComm() { release(); }

NcclComm::NcclComm(NcclComm&& other) noexcept
    : comm_(std::exchange(other.comm_, nullptr)),
      rank_(other.rank_),
      size_(other.size_),
      device_(other.device_),
      failed_(other.failed_),
      uncaught_at_start_(other.uncaught_at_start_) {}

NcclComm& NcclComm::operator=(NcclComm&& other) noexcept {
  if (this != &other) {
    release();
    comm_ = std::exchange(other.comm_, nullptr);
    rank_ = other.rank_;
    size_ = other.size_;
    device_ = other.device_;
    failed_ = other.failed_;
    uncaught_at_start_ = other.uncaught_at_start_;
  }
  return *this;
}

void NcclComm::release() noexcept {
  if (comm_ == nullptr) return;
  // ncclCommDestroy may wait for peers to finish; during unwinding or after a failure a peer may
  // be gone, so abort instead (c10d's NCCLComm makes the same choice).
  if (failed_ || std::uncaught_exceptions() > uncaught_at_start_) {
    abort();
  } else if (ncclCommDestroy(comm_) != ncclSuccess) {
    ncclCommAbort(comm_);
  }
  comm_ = nullptr;
}

void NcclComm::abort() noexcept {
  if (comm_ == nullptr) return;
  ncclCommAbort(comm_);
  comm_ = nullptr;
  failed_ = true;
}

void NcclComm::fail(ncclResult_t result, const char* call, const char* file, int line) {
  failed_ = true;
  // Read the message before the abort frees the communicator it belongs to.
  std::string last = comm_ != nullptr ? ncclGetLastError(comm_) : ncclGetLastError(nullptr);
  abort();
  std::string message = std::string(call) + " failed: " + ncclGetErrorString(result);
  if (!last.empty()) message += "; " + last;
  message += " (NCCL " + nccl_version_string() + "; communicator aborted)";
  throw Error(stamp(message, file, line));
}

void NcclComm::all_reduce(const void* send, void* recv, std::size_t count, ncclDataType_t type,
                          ncclRedOp_t op, cudaStream_t stream) {
  PETS_CHECK(comm_ != nullptr, "ncclAllReduce on an aborted or moved-from NcclComm");
  PETS_NCCL_COMM_CHECK(ncclAllReduce(send, recv, count, type, op, comm_, stream));
}

void NcclComm::broadcast(const void* send, void* recv, std::size_t count, ncclDataType_t type,
                         int root, cudaStream_t stream) {
  PETS_CHECK(comm_ != nullptr, "ncclBroadcast on an aborted or moved-from NcclComm");
  PETS_NCCL_COMM_CHECK(ncclBroadcast(send, recv, count, type, root, comm_, stream));
}

void NcclComm::check_async_error() {
  if (comm_ == nullptr) return;
  ncclResult_t async = ncclSuccess;
  PETS_NCCL_COMM_CHECK(ncclCommGetAsyncError(comm_, &async));
  PETS_NCCL_COMM_CHECK(async);
}

}  // namespace pets::comm
