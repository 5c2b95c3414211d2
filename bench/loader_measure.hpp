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
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "pets/data/loader.hpp"
#include "pets/util/app.hpp"
#include "pets/util/digest.hpp"

namespace pets::bench {

/// The worker counts of a list option ("1,2,4": pets_bench --loader-sweep, loader_bench
/// --workers), or nullopt when an item is no integer or under `least`, or the list is empty.
inline std::optional<std::vector<int>> worker_counts(const std::string& list, int least) {
  std::vector<int> counts;
  std::stringstream in(list);
  for (std::string item; std::getline(in, item, ',');) {
    const std::optional<std::uint64_t> n = unsigned_number(item);
    if (!n || *n < static_cast<std::uint64_t>(least) || *n > 1u << 20) return std::nullopt;
    counts.push_back(static_cast<int>(*n));
  }
  if (counts.empty()) return std::nullopt;
  return counts;
}

inline double clock_seconds(clockid_t clock) {
  timespec t{};
  clock_gettime(clock, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

inline double process_cpu_seconds() { return clock_seconds(CLOCK_PROCESS_CPUTIME_ID); }

inline double thread_cpu_seconds() { return clock_seconds(CLOCK_THREAD_CPUTIME_ID); }

/// How measure_loader runs the loader.
struct LoaderRun {
  int epochs = 1;
  data::SplitKind kind = data::SplitKind::kTrain;
  /// Every image of the split read once before the clocks start.
  bool check_first = false;
  /// The loader's background check of the chunks ends before the clocks start.
  bool wait_for_check = false;
  /// The digest covers the batches' bytes (pixels or crops) too, not only their images, order,
  /// boxes and labels. Reading every byte costs the measuring thread about a core's share on a
  /// small machine, which a scaling figure must not pay.
  bool digest_bytes = true;
};

/// Runs `run.epochs` epochs of `run.kind` from `options` and reports:
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
///   verified_chunks       pixel chunks whose Fletcher32 sum was checked during the measurement
///                         (each is checked once per process, on its first use or ahead of it);
///                         with `check_first`, every image of the split is read once before the
///                         clocks start, so these are 0 and the figures are a long run's, after
///                         its first pass over the store;
///   verified_ahead        of which by the loader's background check (LoaderOptions::verify_ahead),
///                         whose CPU time counts in the epochs it overlaps;
///   epochs                the same figures per epoch; first_epoch and steady (the epochs after
///                         the first, together): what a run's first epoch costs (the chunks'
///                         checks and the mapping's page faults) and what every later one does;
///   consumer_cpu_us_per_image  the measuring thread's CPU per image (it waits and digests the
///                         batches: not the loader's work, but inside the process's CPU figures);
///                         loader_cpu_us_per_image (per epoch, steady): the process's CPU less
///                         the measuring thread's, i.e. the loader's workers and background check;
///   digest                XXH3-64 of every batch's pixels (or crops; without `digest_bytes`,
///                         or with LoaderOutput::kBoxes, its boxes instead), labels and indices.
/// With `wait_for_check`, the loader's background check of the chunks ends before the clocks start
/// (a run whose start-up outlasts it, as pets_train's model set-up does): check_seconds and
/// check_cpu_seconds are its wall and CPU time from the loader's construction.
inline nlohmann::json measure_loader(const data::LoaderOptions& options, const LoaderRun& run) {
  const int epochs = run.epochs;
  const data::SplitKind kind = run.kind;
  const double check_cpu0 = process_cpu_seconds();
  const auto check_t0 = std::chrono::steady_clock::now();
  data::Loader loader(options);
  double check_s = 0, check_cpu = 0;
  if (run.wait_for_check) {
    loader.finish_verifying();
    check_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - check_t0).count();
    check_cpu = process_cpu_seconds() - check_cpu0;
  }
  if (run.check_first)
    for (std::int64_t i = 0; i < loader.store().split(kind).size(); ++i)
      loader.store().read_image(kind, i);
  const data::ReadStats before = loader.store().read_stats();
  std::int64_t images = 0;
  Digest digest;
  nlohmann::json per_epoch = nlohmann::json::array();
  const double cpu0 = process_cpu_seconds(), consumer0 = thread_cpu_seconds();
  const auto t0 = std::chrono::steady_clock::now();
  for (int epoch = 0; epoch < epochs; ++epoch) {
    const double epoch_cpu0 = process_cpu_seconds(), epoch_consumer0 = thread_cpu_seconds();
    const auto epoch_t0 = std::chrono::steady_clock::now();
    const data::ReadStats epoch_before = loader.store().read_stats();
    std::int64_t epoch_images = 0;
    loader.start_epoch(kind, epoch);
    while (auto b = loader.next()) {
      epoch_images += b->n;
      if (run.digest_bytes) {
        digest.add(b->pixels.data(), b->pixels.size() * sizeof(float));
        if (b->crops.data != nullptr)
          digest.add(b->crops.data, static_cast<std::size_t>(b->crop_bytes));
      }
      // The boxes, where no bytes are digested (as LoaderOutput::kBoxes delivers none).
      if (!run.digest_bytes || (b->pixels.empty() && b->crops.data == nullptr))
        digest.add(b->boxes.data(), b->boxes.size() * sizeof(data::CropBox));
      digest.add(b->labels.data(), b->labels.size() * sizeof(std::int64_t));
      digest.add(b->indices.data(), b->indices.size() * sizeof(std::int64_t));
    }
    images += epoch_images;
    const double secs =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - epoch_t0).count();
    const double cpu = process_cpu_seconds() - epoch_cpu0;
    const double loader_cpu = cpu - (thread_cpu_seconds() - epoch_consumer0);
    const data::ReadStats epoch_after = loader.store().read_stats();
    const auto n = static_cast<double>(epoch_images > 0 ? epoch_images : 1);
    per_epoch.push_back(
        {{"epoch", epoch},
         {"images", epoch_images},
         {"seconds", secs},
         {"cpu_seconds", cpu},
         {"images_per_s", epoch_images / secs},
         {"cpu_us_per_image", 1e6 * cpu / n},
         {"loader_cpu_seconds", loader_cpu},
         {"loader_cpu_us_per_image", 1e6 * loader_cpu / n},
         {"verified_chunks", epoch_after.verified_chunks - epoch_before.verified_chunks},
         {"verified_ahead", epoch_after.verified_ahead - epoch_before.verified_ahead}});
  }
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const double cpu = process_cpu_seconds() - cpu0;
  const double consumer_cpu = thread_cpu_seconds() - consumer0;
  const data::ReadStats after = loader.store().read_stats();
  const double held = after.lock_held_seconds - before.lock_held_seconds;
  const double held_cpu = after.lock_cpu_seconds - before.lock_cpu_seconds;
  const double share = cpu > 0 ? held_cpu / cpu : 0.0;
  const auto n = static_cast<double>(images > 0 ? images : 1);
  nlohmann::json steady;
  if (epochs > 1) {
    std::int64_t steady_images = 0;
    double steady_s = 0, steady_cpu = 0, steady_loader_cpu = 0;
    for (std::size_t e = 1; e < per_epoch.size(); ++e) {
      steady_images += per_epoch[e]["images"].get<std::int64_t>();
      steady_s += per_epoch[e]["seconds"].get<double>();
      steady_cpu += per_epoch[e]["cpu_seconds"].get<double>();
      steady_loader_cpu += per_epoch[e]["loader_cpu_seconds"].get<double>();
    }
    const auto sn = static_cast<double>(steady_images > 0 ? steady_images : 1);
    steady = {{"epochs", epochs - 1},
              {"images", steady_images},
              {"images_per_s", steady_images / steady_s},
              {"cpu_us_per_image", 1e6 * steady_cpu / sn},
              {"loader_cpu_us_per_image", 1e6 * steady_loader_cpu / sn}};
  }
  return {{"workers", options.workers},
          {"output", options.output == data::LoaderOutput::kCrops   ? "crops"
                     : options.output == data::LoaderOutput::kBoxes ? "boxes"
                                                                    : "pixels"},
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
          {"verified_ahead", after.verified_ahead - before.verified_ahead},
          {"epochs", per_epoch},
          {"first_epoch", per_epoch.empty() ? nlohmann::json() : per_epoch[0]},
          {"steady", steady},
          {"consumer_cpu_us_per_image", 1e6 * consumer_cpu / n},
          {"check_first", run.check_first},
          {"wait_for_check", run.wait_for_check},
          {"digest_bytes", run.digest_bytes},
          {"check_seconds", check_s},
          {"check_cpu_seconds", check_cpu},
          {"read_bytes_per_image", static_cast<double>(after.bytes - before.bytes) / n},
          {"digest", digest.hex()}};
}

}  // namespace pets::bench
