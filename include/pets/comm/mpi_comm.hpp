#pragma once
/// \file
/// RAII over MPI itself (init/finalize) and over the project's communicators: a private
/// duplicate of the world, so that library traffic never matches an application message, and the
/// node-local communicator that decides which GPU a rank drives; and the string collectives
/// the programs use to share rank 0's view (file lists, verdicts) with every rank.

#include <mpi.h>

#include <string>
#include <vector>

namespace pets::comm {

/// Initialises MPI with at least MPI_THREAD_FUNNELED (only the main thread calls MPI; loader
/// threads never do) and finalises it on destruction. If MPI is already initialised (a test main
/// did it), this object neither initialises nor finalises. One per process, in main.
class MpiEnvironment {
 public:
  /// Throws pets::Error when the library cannot give MPI_THREAD_FUNNELED.
  MpiEnvironment(int& argc, char**& argv);
  ~MpiEnvironment();
  MpiEnvironment(const MpiEnvironment&) = delete;
  MpiEnvironment& operator=(const MpiEnvironment&) = delete;

  /// The thread level MPI provided (MPI_THREAD_* constant).
  int thread_level() const { return thread_level_; }
  /// True if this object called MPI_Init_thread (and so will call MPI_Finalize).
  bool owns_mpi() const { return owns_; }
  /// Finalises now (idempotent); the destructor then does nothing.
  void finalize();

 private:
  bool owns_ = false;
  int thread_level_ = MPI_THREAD_SINGLE;
};

/// A private MPI_Comm_dup of a parent communicator (the world by default) with MPI_ERRORS_RETURN,
/// so every failure reaches PETS_MPI_CHECK, plus the node-local communicator from
/// MPI_Comm_split_type(MPI_COMM_TYPE_SHARED). Construction is collective over the parent.
/// Movable, not copyable; frees both communicators unless MPI is already finalised.
class MpiComm {
 public:
  explicit MpiComm(MPI_Comm parent = MPI_COMM_WORLD);
  ~MpiComm();
  MpiComm(const MpiComm&) = delete;
  MpiComm& operator=(const MpiComm&) = delete;
  MpiComm(MpiComm&& other) noexcept;
  MpiComm& operator=(MpiComm&& other) noexcept;

  /// The duplicated communicator (valid while this object lives).
  MPI_Comm get() const { return comm_; }
  /// The ranks of this communicator that share this node's memory.
  MPI_Comm local() const { return local_; }
  int rank() const { return rank_; }
  int size() const { return size_; }
  /// Rank among the ranks on this node: the basis of the CUDA device choice.
  int local_rank() const { return local_rank_; }
  int local_size() const { return local_size_; }

 private:
  void release() noexcept;

  MPI_Comm comm_ = MPI_COMM_NULL;
  MPI_Comm local_ = MPI_COMM_NULL;
  int rank_ = 0;
  int size_ = 1;
  int local_rank_ = 0;
  int local_size_ = 1;
};

/// Rank `root`'s `text` on every rank of `comm`; the other ranks' `text` is ignored. Collective.
std::string broadcast_string(std::string text, MPI_Comm comm, int root = 0);

/// Every rank's strings, concatenated in rank order, on every rank of `comm`. Collective. The
/// strings travel NUL-separated, so they must not contain NUL (file names and messages do not).
std::vector<std::string> allgather_strings(const std::vector<std::string>& mine, MPI_Comm comm);

/// The number of hosts the ranks of `comm` run on: the distinct MPI_Get_processor_name of its
/// ranks. Collective.
int count_hosts(MPI_Comm comm);

}  // namespace pets::comm
