// Threads per rank: the cores of the affinity mask, shared when unbound ranks see every core,
// and a request above the cores capped with a warning.
#include <gtest/gtest.h>

#include "pets/util/threads.hpp"

namespace {

using pets::choose_threads;

TEST(Threads, AutomaticTakesTheAffinityMask) {
  // Bound ranks (2 of 8 cores each): their mask.
  EXPECT_EQ(choose_threads(0, 2, 8, 4).threads, 2);
  // One rank on the node: every core it may use.
  EXPECT_EQ(choose_threads(0, 8, 8, 1).threads, 8);
  // Unbound ranks all see every core: they share them.
  EXPECT_EQ(choose_threads(0, 8, 8, 2).threads, 4);
  EXPECT_EQ(choose_threads(0, 2, 2, 3).threads, 1);
  EXPECT_TRUE(choose_threads(0, 8, 8, 2).warning.empty());
}

TEST(Threads, ARequestWithinTheCoresIsKept) {
  const pets::ThreadChoice c = choose_threads(3, 4, 8, 1);
  EXPECT_EQ(c.threads, 3);
  EXPECT_TRUE(c.warning.empty());
  EXPECT_EQ(choose_threads(4, 4, 8, 1).threads, 4);
}

TEST(Threads, ARequestAboveTheCoresIsCappedWithAWarning) {
  const pets::ThreadChoice c = choose_threads(1000, 2, 16, 2);
  EXPECT_EQ(c.threads, 2);
  EXPECT_EQ(c.warning, "--threads 1000 is more than the 2 cores this rank may use; using 2");
  EXPECT_EQ(choose_threads(2, 1, 16, 1).warning,
            "--threads 2 is more than the 1 core this rank may use; using 1");
}

TEST(Threads, LoaderWorkersOneOnTheCpuTheSpareCoresOnAGpu) {
  // The model on the CPU: one worker, however many cores (the step's threads take them).
  for (const int cores : {1, 2, 16, 128}) EXPECT_EQ(pets::loader_workers(false, cores), 1);
  // On a GPU: every core but the rank's own thread's, at least one, at most kMaxLoaderWorkers.
  EXPECT_EQ(pets::loader_workers(true, 0), 1);
  EXPECT_EQ(pets::loader_workers(true, 1), 1);
  EXPECT_EQ(pets::loader_workers(true, 2), 1);
  EXPECT_EQ(pets::loader_workers(true, 3), 2);
  EXPECT_EQ(pets::loader_workers(true, 4), 3);
  EXPECT_EQ(pets::loader_workers(true, 5), 4);
  EXPECT_EQ(pets::kMaxLoaderWorkers, 4);
  EXPECT_EQ(pets::loader_workers(true, 16), pets::kMaxLoaderWorkers);
  EXPECT_EQ(pets::loader_workers(true, 192), pets::kMaxLoaderWorkers);
}

TEST(Threads, ThisProcessHasAtLeastOneCore) {
  EXPECT_GE(pets::affinity_cpu_count(), 1);
  EXPECT_GE(pets::online_cpu_count(), pets::affinity_cpu_count());
  EXPECT_LE(choose_threads(1 << 20, 1).threads, pets::affinity_cpu_count());
}

}  // namespace
