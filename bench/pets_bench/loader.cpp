/// \file
/// pets_bench section 4: pets::data::Loader alone, rank 0 of --loader-world, over whole epochs
/// (loader_measure.hpp): the CPU path, the device path's staging and its resident store, each
/// with its worker sweep, and the cores one GPU's step rate needs on each path.

#include "pets/data/loader.hpp"

#include <torch/cuda.h>

#include <algorithm>
#include <chrono>
#include <vector>

#include "harness.hpp"
#include "loader_measure.hpp"
#include "pets/train/input/input_pipeline.hpp"
#include "pets/train/input/resident_images.hpp"
#include "pets/util/error.hpp"
#include "pets/util/memory.hpp"

namespace pets::bench {

json loader(const Config& c, const std::string& store) {
  // What pets_train sets before its loader (a no-op when section 3 set it already).
  PETS_CHECK(pets::retain_freed_memory(), "the allocator refused to keep freed memory");
  pets::data::LoaderOptions lo;
  lo.path = store;
  lo.rank = 0;
  lo.world = c.loader_world;
  lo.batch_size = c.smoke ? 2 : c.train_batch;
  lo.eval_batch_size = c.eval_batch;
  lo.image_size = c.image_size;
  lo.workers = c.loader_workers;
  lo.prefetch = 3;
  // As pets_train runs it, which makes its loader before the model: the loader's background
  // check of the chunks ends during that start-up, so here before the clocks start (each
  // measurement reports the check's own time: check_seconds, check_cpu_seconds).
  // The worker sweeps digest no bytes (digest_bytes): on a machine of few cores the measuring
  // thread's reading of every byte would take the cores the workers scale onto. Their images,
  // order, boxes and labels are still digested.
  const auto measure = [&c](const pets::data::LoaderOptions& options, bool digest_bytes = true) {
    LoaderRun run;
    run.epochs = c.loader_epochs;
    run.wait_for_check = true;
    run.digest_bytes = digest_bytes;
    return measure_loader(options, run);
  };
  // The CPU path (float pixels), --loader-workers threads.
  json out = measure(lo);
  out["what"] = "HDF5 read + RandomResizedCrop + resize + normalise (train split)";
  out["rank"] = 0;
  out["world"] = c.loader_world;
  out["batch"] = lo.batch_size;
  out["image_size"] = c.image_size;
  out["epochs"] = c.loader_epochs;
  // Scaling with threads (--loader-sweep). Wall-clock figures need as many idle cores; the CPU
  // clock's images_per_cpu_s and the lock's share do not.
  json sweep = json::array();
  for (const int workers : c.loader_sweep) {
    lo.workers = workers;
    sweep.push_back(measure(lo, /*digest_bytes=*/false));
  }
  out["workers_sweep"] = sweep;
  // The GPU path's host side: the loader only reads each crop box into a staging buffer
  // (page-locked when CUDA is available), as pets_train --input device sets it up.
  const c10::Device device =
      torch::cuda::is_available() ? c10::Device(c10::kCUDA, 0) : c10::Device(c10::kCPU);
  lo.workers = c.loader_workers;
  pets::train::configure_loader(lo, true, /*pinned=*/device.is_cuda());
  json staging = measure(lo);
  staging["what"] = "read of each RandomResizedCrop box into a staging buffer (uint8 crops)";
  staging["pinned"] = device.is_cuda();
  // Its scaling with threads, in this run (--loader-sweep: the workers a GPU's rank can be
  // given).
  json staging_sweep = json::array();
  for (const int workers : c.loader_sweep) {
    lo.workers = workers;
    staging_sweep.push_back(measure(lo, /*digest_bytes=*/false));
  }
  staging["workers_sweep"] = staging_sweep;
  // When the sweep has 1 and 2 workers: the wall-clock ratio of 2 workers to 1 over all their
  // epochs (the chunks are checked before the clocks start, so no epoch is the one that checks
  // them), in rounds of one measurement of each, alternating, so that a burst of other work on
  // the machine moves one round's ratio and not the figure: the median of the rounds.
  const auto swept = [&c](int workers) {
    return std::find(c.loader_sweep.begin(), c.loader_sweep.end(), workers) != c.loader_sweep.end();
  };
  if (swept(1) && swept(2)) {
    constexpr int kRounds = 5;
    std::vector<double> ratios;
    for (int round = 0; round < kRounds; ++round) {
      lo.workers = 1;
      const double one = measure(lo, /*digest_bytes=*/false)["images_per_s"].get<double>();
      lo.workers = 2;
      const double two = measure(lo, /*digest_bytes=*/false)["images_per_s"].get<double>();
      ratios.push_back(two / one);
    }
    staging["two_workers_speedups"] = ratios;
    std::sort(ratios.begin(), ratios.end());
    staging["two_workers_speedup"] = ratios[kRounds / 2];
  }
  out["staging"] = staging;
  // The GPU path with the store held on the device (--resident): the images are read once into
  // the device's memory (timed here: `load`), then the loader only draws each image's box. The
  // loader's background check is off: the load has read and checked every chunk already.
  {
    const double cpu0 = process_cpu_seconds();
    const auto t0 = std::chrono::steady_clock::now();
    const pets::data::Store store(lo.path);
    const pets::train::ResidentImages held(store, device, c.loader_workers);
    const double load_s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const double load_cpu = process_cpu_seconds() - cpu0;
    lo.workers = c.loader_workers;
    lo.output = pets::data::LoaderOutput::kBoxes;
    lo.verify_ahead = false;
    json resident = measure(lo);
    resident["what"] = "each RandomResizedCrop box alone, the images held on the device";
    resident["load"] = {{"device", device.str()},
                        {"bytes", held.size_bytes()},
                        {"seconds", load_s},
                        {"cpu_seconds", load_cpu},
                        {"gb_per_s", static_cast<double>(held.size_bytes()) / 1e9 / load_s}};
    // The host's CPU per image of the two device paths, measured back to back here: over the
    // epochs after the first when there are several (the staging path's first epoch also
    // faults in its first staging buffers), else the one epoch; the loader's threads alone (not
    // the measuring thread).
    const auto loader_us = [](const json& m) {
      return (m["steady"].is_null() ? m["first_epoch"] : m["steady"])["loader_cpu_us_per_image"]
          .get<double>();
    };
    resident["loader_cpu_us_per_image_vs_staging"] = {{"resident", loader_us(resident)},
                                                      {"staging", loader_us(staging)}};
    out["resident"] = resident;
  }
  // CPU cores one GPU needs at a given step rate: rate / images_per_cpu_s, for the published
  // A100/V100 mixed-precision ResNet-50 training rate of about 2,500 images/s.
  const double gpu_rate = 2500.0;
  out["cores_for_2500_img_s"] = {
      {"cpu_path", gpu_rate / out["images_per_cpu_s"].get<double>()},
      {"device_path_staging", gpu_rate / staging["images_per_cpu_s"].get<double>()},
      {"device_path_resident", gpu_rate / out["resident"]["images_per_cpu_s"].get<double>()}};
  return out;
}

}  // namespace pets::bench
