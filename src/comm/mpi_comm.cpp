#include "pets/comm/mpi_comm.hpp"

#include <utility>

#include "pets/util/error.hpp"

namespace pets::comm {

namespace {

bool mpi_finalized() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  return finalized != 0;
}

}  // namespace

MpiEnvironment::MpiEnvironment(int& argc, char**& argv) {
  int initialized = 0;
  PETS_MPI_CHECK(MPI_Initialized(&initialized));
  if (initialized) {
    PETS_MPI_CHECK(MPI_Query_thread(&thread_level_));
  } else {
    // MPI_Init_thread's errors are fatal by default; there is no handler to set before it.
    PETS_MPI_CHECK(MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &thread_level_));
    owns_ = true;
  }
  if (thread_level_ < MPI_THREAD_FUNNELED) {
    // The thread levels are ordered (MPI 3.1, 12.4.3), so "<" is the check the standard means.
    const int provided = thread_level_;
    finalize();
    PETS_ERROR("MPI provides thread level " + std::to_string(provided) +
               ", below MPI_THREAD_FUNNELED; the data loader threads need FUNNELED");
  }
}

MpiEnvironment::~MpiEnvironment() { finalize(); }

void MpiEnvironment::finalize() {
  if (owns_ && !mpi_finalized()) MPI_Finalize();
  owns_ = false;
}

MpiComm::MpiComm(MPI_Comm parent) {
  PETS_MPI_CHECK(MPI_Comm_dup(parent, &comm_));
  try {
    PETS_MPI_CHECK(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN));
    PETS_MPI_CHECK(MPI_Comm_rank(comm_, &rank_));
    PETS_MPI_CHECK(MPI_Comm_size(comm_, &size_));
    PETS_MPI_CHECK(MPI_Comm_split_type(comm_, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &local_));
    PETS_MPI_CHECK(MPI_Comm_rank(local_, &local_rank_));
    PETS_MPI_CHECK(MPI_Comm_size(local_, &local_size_));
  } catch (...) {
    release();
    throw;
  }
}

MpiComm::~MpiComm() { release(); }

MpiComm::MpiComm(MpiComm&& other) noexcept
    : comm_(std::exchange(other.comm_, MPI_COMM_NULL)),
      local_(std::exchange(other.local_, MPI_COMM_NULL)),
      rank_(other.rank_),
      size_(other.size_),
      local_rank_(other.local_rank_),
      local_size_(other.local_size_) {}

MpiComm& MpiComm::operator=(MpiComm&& other) noexcept {
  if (this != &other) {
    release();
    comm_ = std::exchange(other.comm_, MPI_COMM_NULL);
    local_ = std::exchange(other.local_, MPI_COMM_NULL);
    rank_ = other.rank_;
    size_ = other.size_;
    local_rank_ = other.local_rank_;
    local_size_ = other.local_size_;
  }
  return *this;
}

void MpiComm::release() noexcept {
  // After MPI_Finalize (a static MpiComm, or unwinding past main's environment) freeing is illegal.
  if (mpi_finalized()) return;
  if (local_ != MPI_COMM_NULL) MPI_Comm_free(&local_);
  if (comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
}

}  // namespace pets::comm
