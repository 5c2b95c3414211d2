#pragma once
/// \file
/// How many CPU threads a rank runs: the cores it may use (its affinity mask), shared with the
/// other ranks of its node when they were not bound, and a requested count capped to those cores.

#include <string>

namespace pets {

/// The number of CPUs in this process's affinity mask (at least 1).
int affinity_cpu_count();

/// The number of CPUs online on this machine (at least 1).
int online_cpu_count();

/// A thread count and, when the request was changed, why.
struct ThreadChoice {
  int threads = 1;
  std::string warning;  ///< empty unless `requested` was capped
};

/// Threads per rank for `requested` threads (0: automatic) with `cores` CPUs in the rank's
/// affinity mask, `online` CPUs on the machine and `local_ranks` ranks on this node.
/// Automatic: the cores of the mask; ranks that were not bound (mpirun --oversubscribe, or
/// --bind-to none) all see every core, so they share them instead, since oversubscribed OpenMP
/// threads run several times slower. A request above `cores` is capped to `cores`, with a
/// warning naming both (more threads than cores only wait for each other).
ThreadChoice choose_threads(int requested, int cores, int online, int local_ranks);

/// choose_threads with this process's affinity mask and the machine's online CPUs.
ThreadChoice choose_threads(int requested, int local_ranks);

}  // namespace pets
