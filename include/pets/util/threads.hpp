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

/// The most loader worker threads loader_workers gives a rank: each builds one batch at a time
/// and holds it (page-locked on a GPU) until the step takes it. At the staging path's 38-48 us of
/// CPU per image on the 2-core test machine (bench/RESULTS.md, "The staging path's CPU per
/// image"), four would read some 80,000 crops/s: several times a GPU's step rate.
constexpr int kMaxLoaderWorkers = 4;

/// Loader worker threads for a rank that owns `cores` cores (choose_threads' count) with its
/// model on a GPU or not. On the CPU the model's own threads use every core, so the loader has
/// one worker (a second would take a core from the step). On a GPU the cores wait while the step
/// runs on the device: the loader takes all but one (the rank's own thread, which launches the
/// step and the uploads), between 1 and kMaxLoaderWorkers.
int loader_workers(bool model_on_gpu, int cores);

}  // namespace pets
