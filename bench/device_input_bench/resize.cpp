/// \file
/// device_input_bench's resize section: the device path's resize + normalise of one batch, one
/// LibTorch interpolate per crop against the batched resize (and other tile sizes), per batch
/// size, timed in alternating rounds, with the ATen operators one batch calls.

#include <torch/cuda.h>
#include <torch/torch.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "harness.hpp"
#include "pets/data/augment.hpp"
#include "pets/data/rng.hpp"
#include "pets/train/input/batch_resize.hpp"
#include "pets/train/input/device_input.hpp"
#include "train/input/aten_op_counter.hpp"

namespace pets::device_input_bench {

using pets::data::Image;

namespace {

/// The first figure of /proc/loadavg (-1 where there is none).
double load_average() {
  std::ifstream f("/proc/loadavg");
  double load = -1;
  f >> load;
  return load;
}

}  // namespace

json resize_section(const Config& c) {
  const torch::Device device(c.resize_device);
  const pets::train::InputNormalization norm = pets::train::input_normalization(device);
  const auto dtype = torch::kBFloat16;
  // Device work is asynchronous: each timed call waits for its kernels.
  const auto finish = [&] {
    if (device.is_cuda()) torch::cuda::synchronize();
  };
  json out = json::array();
  for (const int batch : c.resize_batches) {
    const std::vector<Image> images = stored_images(c.side, batch);
    std::vector<pets::train::CropSource> sources;
    for (int i = 0; i < batch; ++i) {
      pets::data::Rng rng(pets::data::mix_seed({11, static_cast<std::uint64_t>(i)}));
      sources.push_back({&images[i], pets::data::random_resized_crop_box(images[i].height,
                                                                         images[i].width, rng)});
    }
    const pets::train::HostCrops staged = pets::train::stage_crops(sources, false);
    const at::Tensor bytes = staged.bytes.to(device);
    std::vector<std::pair<std::string, std::function<at::Tensor()>>> variants;
    variants.emplace_back("per_crop", [&] {
      return pets::train::resize_normalize_per_crop(bytes, staged.slots, c.size, norm.scale,
                                                    norm.shift, dtype);
    });
    std::vector<int> tiles = {pets::train::kResizeTile};
    for (int t : c.resize_tiles)
      if (t != pets::train::kResizeTile) tiles.push_back(t);
    for (const int tile : tiles)
      variants.emplace_back(
          tile == pets::train::kResizeTile ? "batched" : "batched_tile_" + std::to_string(tile),
          [&, tile] {
            return pets::train::resize_normalize(bytes, staged.slots, c.size, norm.scale,
                                                 norm.shift, dtype, tile);
          });
    json row;
    row["batch"] = batch;
    row["device"] = c.resize_device;
    row["mean_crop_bytes"] =
        static_cast<double>(pets::train::slot_end(staged.slots.back())) / batch;
    row["load_before"] = load_average();
    const at::Tensor reference = variants.front().second().to(torch::kFloat32);
    for (auto& [name, run] : variants) {
      const pets::testing::AtenOpCounter counter;
      const at::Tensor images_out = run();
      row[name]["aten_ops_top"] = counter.ops().top;
      row[name]["aten_ops_all"] = counter.ops().all;
      row[name]["aten_top_names"] = counter.ops().top_names;
      row[name]["aten_top_seconds"] = counter.ops().top_seconds;
      row[name]["max_abs_diff_vs_per_crop"] =
          (images_out.to(torch::kFloat32) - reference).abs().max().item<double>();
    }
    for (int round = 0; round < c.resize_rounds; ++round)
      for (auto& [name, run] : variants) {
        const json t = time_per_item(
            [&] {
              (void)run();
              finish();
            },
            batch, c);
        row[name]["rounds"].push_back(t);
      }
    row["load_after"] = load_average();
    for (auto& [name, run] : variants) {
      (void)run;
      std::vector<double> best, median;
      for (const json& t : row[name]["rounds"]) {
        best.push_back(t["us_best"].get<double>());
        median.push_back(t["us_median"].get<double>());
      }
      std::sort(best.begin(), best.end());
      std::sort(median.begin(), median.end());
      row[name]["us_best"] = best.front();
      row[name]["us_median_of_rounds"] = median[median.size() / 2];
    }
    out.push_back(row);
  }
  std::fprintf(stderr,
               "resize + normalise on the %s device, bf16 (us/image best, median of "
               "rounds; ATen calls per batch):\n",
               c.resize_device.c_str());
  for (const json& row : out)
    for (const auto& [name, v] : row.items())
      if (v.is_object())
        std::fprintf(stderr, "  batch %3d %-16s %9.1f us %9.1f us  %4lld calls (%lld nested)\n",
                     row["batch"].get<int>(), name.c_str(), v["us_best"].get<double>(),
                     v["us_median_of_rounds"].get<double>(), v["aten_ops_top"].get<long long>(),
                     v["aten_ops_all"].get<long long>());
  return out;
}

}  // namespace pets::device_input_bench
