#include "pets/comm/mpi_comm.hpp"

#include <climits>
#include <set>
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

std::string broadcast_string(std::string text, MPI_Comm comm, int root) {
  long long n = static_cast<long long>(text.size());
  PETS_MPI_CHECK(MPI_Bcast(&n, 1, MPI_LONG_LONG, root, comm));
  PETS_CHECK(n >= 0 && n <= INT_MAX, "broadcast_string: " + std::to_string(n) + " bytes");
  text.resize(static_cast<std::size_t>(n));
  if (n > 0) PETS_MPI_CHECK(MPI_Bcast(text.data(), static_cast<int>(n), MPI_CHAR, root, comm));
  return text;
}

std::vector<std::string> allgather_strings(const std::vector<std::string>& mine, MPI_Comm comm) {
  std::string packed;
  for (const auto& s : mine) {
    packed += s;
    packed.push_back('\0');
  }
  int size = 0;
  PETS_MPI_CHECK(MPI_Comm_size(comm, &size));
  PETS_CHECK(packed.size() <= INT_MAX,
             "allgather_strings: " + std::to_string(packed.size()) + " bytes on one rank");
  int n = static_cast<int>(packed.size());
  std::vector<int> counts(static_cast<std::size_t>(size)), displs(static_cast<std::size_t>(size));
  PETS_MPI_CHECK(MPI_Allgather(&n, 1, MPI_INT, counts.data(), 1, MPI_INT, comm));
  long long total = 0;
  for (int r = 0; r < size; ++r) {
    displs[static_cast<std::size_t>(r)] = static_cast<int>(total);
    total += counts[static_cast<std::size_t>(r)];
    PETS_CHECK(total <= INT_MAX, "allgather_strings: over 2 GiB in all");
  }
  std::string all(static_cast<std::size_t>(total), '\0');
  PETS_MPI_CHECK(MPI_Allgatherv(packed.data(), n, MPI_CHAR, all.data(), counts.data(),
                                displs.data(), MPI_CHAR, comm));
  std::vector<std::string> out;
  std::size_t start = 0;
  for (std::size_t i = 0; i < all.size(); ++i)
    if (all[i] == '\0') {
      out.push_back(all.substr(start, i - start));
      start = i + 1;
    }
  return out;
}

int count_hosts(MPI_Comm comm) {
  char name[MPI_MAX_PROCESSOR_NAME] = {};
  int length = 0;
  PETS_MPI_CHECK(MPI_Get_processor_name(name, &length));
  const std::vector<std::string> names = allgather_strings({std::string(name, length)}, comm);
  return static_cast<int>(std::set<std::string>(names.begin(), names.end()).size());
}

void MpiComm::release() noexcept {
  // After MPI_Finalize (a static MpiComm, or unwinding past main's environment) freeing is illegal.
  if (mpi_finalized()) return;
  if (local_ != MPI_COMM_NULL) MPI_Comm_free(&local_);
  if (comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
}

}  // namespace pets::comm
