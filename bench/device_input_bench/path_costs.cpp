/// \file
/// device_input_bench's device_input section: the loader-side cost per image of the CPU path and
/// of the device path at one stored size, one thread, and the GPU half's with a CUDA device.

#include <torch/cuda.h>
#include <torch/torch.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "harness.hpp"
#include "pets/data/augment.hpp"
#include "pets/data/rng.hpp"
#include "pets/train/input/device_input.hpp"

namespace pets::device_input_bench {

using pets::data::CropBox;
using pets::data::Image;

namespace {

/// On a CUDA device: the GPU half alone (batches of staged crops, each uploaded, resized and
/// normalised on the input stream), the host time of submit() (what the training thread spends
/// per batch), and stage() with pinned buffers from LibTorch's caching host allocator.
json gpu_costs(const std::vector<Image>& images, const Config& c) {
  const int n = static_cast<int>(images.size());
  pets::train::DeviceInput input(torch::Device(torch::kCUDA), c.size);
  std::vector<pets::train::CropSource> sources;
  for (int i = 0; i < n; ++i) {
    pets::data::Rng rng(pets::data::mix_seed({3, static_cast<std::uint64_t>(i)}));
    sources.push_back(
        {&images[i], pets::data::random_resized_crop_box(images[i].height, images[i].width, rng)});
  }
  const pets::train::HostCrops staged = input.stage(sources);
  json out;
  out["stage_pinned"] = time_per_item([&] { (void)input.stage(sources); }, n, c);
  constexpr int kBatches = 20;
  double submit_seconds = 0;
  out["gpu_pipeline"] = time_per_item(
      [&] {
        submit_seconds = 0;
        for (int b = 0; b < kBatches; ++b) {
          const auto t0 = Clock::now();
          pets::train::PendingImages p = input.submit(staged);
          submit_seconds += seconds_since(t0);
          (void)p.get();
        }
        torch::cuda::synchronize();
      },
      n * kBatches, c);
  out["submit_host_us_per_batch"] = submit_seconds * 1e6 / kBatches;
  return out;
}

}  // namespace

/// Per-image costs of both paths on `images`, one thread.
json path_costs(const std::vector<Image>& images, const Config& c) {
  const int n = static_cast<int>(images.size());
  const int size = c.size;
  std::uint64_t pass_no = 0;
  auto boxes_for_pass = [&](std::uint64_t p) {
    std::vector<CropBox> boxes;
    for (int i = 0; i < n; ++i) {
      pets::data::Rng rng(pets::data::mix_seed({p, static_cast<std::uint64_t>(i)}));
      boxes.push_back(pets::data::random_resized_crop_box(images[i].height, images[i].width, rng));
    }
    return boxes;
  };
  json out;
  {
    std::vector<float> buf(3 * static_cast<std::size_t>(size) * size);
    out["cpu_path"] = time_per_item(
        [&] {
          ++pass_no;
          for (int i = 0; i < n; ++i) {
            pets::data::Rng rng(pets::data::mix_seed({pass_no, static_cast<std::uint64_t>(i)}));
            pets::data::transform_train(images[i], rng, size, buf.data());
          }
        },
        n, c);
  }
  {
    std::size_t most = 0;
    for (const Image& img : images) most = std::max(most, img.pixels.size());
    std::vector<std::uint8_t> staging(most * images.size());
    out["device_path_host"] = time_per_item(
        [&] {
          ++pass_no;
          std::size_t offset = 0;
          for (int i = 0; i < n; ++i) {
            pets::data::Rng rng(pets::data::mix_seed({pass_no, static_cast<std::uint64_t>(i)}));
            const CropBox box =
                pets::data::random_resized_crop_box(images[i].height, images[i].width, rng);
            pets::train::copy_crop(images[i], box, staging.data() + offset);
            offset += static_cast<std::size_t>(pets::train::crop_bytes(box));
          }
        },
        n, c);
  }
  {
    pets::train::DeviceInput input(torch::kCPU, size);
    std::vector<pets::train::CropSource> sources(images.size());
    out["device_path_stage"] = time_per_item(
        [&] {
          const std::vector<CropBox> boxes = boxes_for_pass(++pass_no);
          for (int i = 0; i < n; ++i) sources[i] = {&images[i], boxes[i]};
          const pets::train::HostCrops staged = input.stage(sources);
          if (staged.size() != n) std::abort();
        },
        n, c);
    const pets::train::HostCrops staged = [&] {
      const std::vector<CropBox> boxes = boxes_for_pass(++pass_no);
      for (int i = 0; i < n; ++i) sources[i] = {&images[i], boxes[i]};
      return input.stage(sources);
    }();
    out["device_tensor_cpu"] = time_per_item([&] { (void)input(staged); }, n, c);
    out["mean_crop_bytes"] = static_cast<double>(pets::train::slot_end(staged.slots.back())) / n;
  }
  {
    std::size_t most = 0, total = 0;
    for (const Image& img : images) {
      most = std::max(most, img.pixels.size());
      total += img.pixels.size();
    }
    std::vector<std::uint8_t> dst(most);
    out["read_proxy"] = time_per_item(
        [&] {
          for (const Image& img : images) {
            std::memcpy(dst.data(), img.pixels.data(), img.pixels.size());
            // Keeps the copy from being optimised away.
            if (dst[img.pixels.size() / 2] != img.pixels[img.pixels.size() / 2]) std::abort();
          }
        },
        n, c);
    out["mean_stored_bytes"] = static_cast<double>(total) / n;
  }
  return out;
}

json device_input_section(const Config& c) {
  json out = path_costs(stored_images(c.side, c.images), c);
  std::fprintf(stderr, "device_input at stored side %d (us/image best, img/s per core):\n", c.side);
  for (const char* k :
       {"cpu_path", "device_path_host", "device_path_stage", "read_proxy", "device_tensor_cpu"})
    std::fprintf(stderr, "  %-18s %9.1f us  %9.0f img/s\n", k, out[k]["us_best"].get<double>(),
                 out[k]["images_per_s"].get<double>());

  if (torch::cuda::is_available()) {
    const json gpu = gpu_costs(stored_images(c.side, c.images), c);
    out["gpu"] = gpu;
    std::fprintf(stderr,
                 "  %-18s %9.1f us  %9.0f img/s (GPU, batches of %d; submit %.0f us/batch)\n",
                 "gpu_pipeline", gpu["gpu_pipeline"]["us_best"].get<double>(),
                 gpu["gpu_pipeline"]["images_per_s"].get<double>(), c.images,
                 gpu["submit_host_us_per_batch"].get<double>());
  } else {
    out["gpu"] = nullptr;  // no CUDA device here
  }

  return out;
}

}  // namespace pets::device_input_bench
