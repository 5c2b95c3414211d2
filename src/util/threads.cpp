#include "pets/util/threads.hpp"

#include <sched.h>
#include <unistd.h>

#include <algorithm>

#include "pets/util/number_text.hpp"

namespace pets {

int affinity_cpu_count() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) != 0) return 1;
  return std::max(1, CPU_COUNT(&set));
}

int online_cpu_count() {
  const long online = ::sysconf(_SC_NPROCESSORS_ONLN);
  return online > 0 ? static_cast<int>(online) : 1;
}

ThreadChoice choose_threads(int requested, int cores, int online, int local_ranks) {
  cores = std::max(1, cores);
  ThreadChoice choice;
  if (requested <= 0) {
    choice.threads = local_ranks > 1 && cores >= online ? std::max(1, cores / local_ranks) : cores;
  } else if (requested > cores) {
    choice.threads = cores;
    choice.warning = "--threads " + std::to_string(requested) + " is more than the " +
                     count_text(cores, "core") + " this rank may use; using " +
                     std::to_string(cores);
  } else {
    choice.threads = requested;
  }
  return choice;
}

ThreadChoice choose_threads(int requested, int local_ranks) {
  return choose_threads(requested, affinity_cpu_count(), online_cpu_count(), local_ranks);
}

int loader_workers(bool model_on_gpu, int cores) {
  if (!model_on_gpu) return 1;
  return std::clamp(cores - 1, 1, kMaxLoaderWorkers);
}

}  // namespace pets
