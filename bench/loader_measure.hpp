#pragma once
/// \file
/// The loader-only measurement shared by pets_bench (section 4) and loader_bench: one rank's
/// data::Loader run over whole epochs with a given number of worker threads, timed by the wall
/// clock and by the process's CPU clock (the consumer only waits, so CPU seconds are the
/// workers'), with the store's read statistics (time inside the HDF5 lock) and a digest of every
/// batch (the same for any worker count, and across builds when the loader's results are
/// unchanged). Free of LibTorch.

#include <time.h>

#include <chrono>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "pets/data/loader.hpp"
#include "pets/util/digest.hpp"

namespace pets::bench {

inline double process_cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

/// Runs `epochs` epochs of `kind` from `options` and reports:
///   images_per_s          wall-clock throughput;
///   images_per_cpu_s      images per CPU-second: the throughput of one fully used core, robust
///                         on a shared machine (other processes slow the wall clock, not this);
///   lock_held_share       share of the workers' CPU time spent inside the HDF5 lock (reads
///                         serialise there; thread CPU clocks, so preemption on a loaded machine
///                         does not count), and max_speedup_by_lock = 1 / that share: the most
///                         worker threads can gain over one before the lock saturates (Amdahl;
///                         null when no read took the lock: the direct reads of a store whose
///                         pixel chunks carry Fletcher32 alone, as pets_preprocess writes them);
///   read_bytes_per_image  bytes the reads fetched from the store per image;
///   verified_chunks       pixel chunks whose Fletcher32 sum the direct reads checked during the
///                         measurement (each is checked once per process, on its first use);
///                         with `check_first`, every image of the split is read once before the
///                         clocks start, so these are 0 and the figures are a long run's, after
///                         its first pass over the store;
///   digest                XXH3-64 of every batch's pixels (or crops), labels and indices.
inline nlohmann::json measure_loader(const data::LoaderOptions& options, int epochs,
                                     data::SplitKind kind = data::SplitKind::kTrain,
                                     bool check_first = false) {
  data::Loader loader(options);
  if (check_first)
    for (std::int64_t i = 0; i < loader.store().split(kind).size(); ++i)
      loader.store().read_image(kind, i);
  const data::ReadStats before = loader.store().read_stats();
  std::int64_t images = 0;
  Digest digest;
  const double cpu0 = process_cpu_seconds();
  const auto t0 = std::chrono::steady_clock::now();
  for (int epoch = 0; epoch < epochs; ++epoch) {
    loader.start_epoch(kind, epoch);
    while (auto b = loader.next()) {
      images += b->n;
      digest.add(b->pixels.data(), b->pixels.size() * sizeof(float));
      if (b->crops.data != nullptr)
        digest.add(b->crops.data, static_cast<std::size_t>(b->crop_bytes));
      digest.add(b->labels.data(), b->labels.size() * sizeof(std::int64_t));
      digest.add(b->indices.data(), b->indices.size() * sizeof(std::int64_t));
    }
  }
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const double cpu = process_cpu_seconds() - cpu0;
  const data::ReadStats after = loader.store().read_stats();
  const double held = after.lock_held_seconds - before.lock_held_seconds;
  const double held_cpu = after.lock_cpu_seconds - before.lock_cpu_seconds;
  const double share = cpu > 0 ? held_cpu / cpu : 0.0;
  const auto n = static_cast<double>(images > 0 ? images : 1);
  return {{"workers", options.workers},
          {"output", options.output == data::LoaderOutput::kCrops ? "crops" : "pixels"},
          {"images", images},
          {"seconds", wall},
          {"cpu_seconds", cpu},
          {"images_per_s", images / wall},
          {"images_per_cpu_s", images / cpu},
          {"lock_held_seconds", held},
          {"lock_cpu_seconds", held_cpu},
          {"read_cpu_us_per_image", 1e6 * held_cpu / n},
          {"cpu_us_per_image", 1e6 * cpu / n},
          {"lock_wait_seconds", after.lock_wait_seconds - before.lock_wait_seconds},
          {"lock_held_share", share},
          {"max_speedup_by_lock", share > 0 ? nlohmann::json(1.0 / share) : nlohmann::json()},
          {"direct_reads", after.direct_reads - before.direct_reads},
          {"verified_chunks", after.verified_chunks - before.verified_chunks},
          {"check_first", check_first},
          {"read_bytes_per_image", static_cast<double>(after.bytes - before.bytes) / n},
          {"digest", digest.hex()}};
}

}  // namespace pets::bench
