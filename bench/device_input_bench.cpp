/// \file
/// device_input_bench: the loader-side cost of the two input paths, per image and per CPU core,
/// and the stored image size the GPU path needs. Not a test: nothing is asserted. One JSON report
/// on stdout, a table on stderr. Everything on the CPU runs on one thread (LibTorch's intra-op
/// threads set to 1), so images_per_s of a CPU item is per core. Sections:
///   device_input   at the stored size (--side, default 512, the store's cap today), one thread:
///                  cpu_path          data::transform_train (box, crop + antialiased resize to 224,
///                                    normalise): the CPU loader's per-image work after the read;
///                  device_path_host  the box and copy_crop into a reused staging buffer: all the
///                                    CPU does per image when a GPU resizes and normalises;
///                  device_path_stage stage_crops per batch (a fresh buffer per batch), per image;
///                  read_proxy        a memcpy of the whole stored image, a floor for the store's
///                                    read from the page cache (both paths pay it; not measured
///                                    through HDF5 here);
///                  device_tensor_cpu DeviceInput on the CPU device (the GPU's share, run on a CPU
///                                    core, for reference);
///                  gpu               only with a CUDA device: the GPU half's images/s, the host
///                                    time of one submit(), stage() into pinned memory.
///   resize         the device path's resize + normalise of one batch on the CPU device (one
///                  thread) or, with --resize-device cuda, on the GPU (bf16 output, images at
///                  --side): the plain path, one LibTorch interpolate per crop
///                  (resize_normalize_per_crop), against the batched one (resize_normalize;
///                  --resize-tiles adds other tile sizes), per batch size
///                  (--resize-batches, default 64,128), timed in alternation for --resize-rounds
///                  rounds so that a shared machine's load falls on all alike; the load average
///                  before and after; the ATen operators one batch calls (top-level, all, names).
///                  --resize-only runs this section alone.
///   stored_size    per candidate longer side L: the crop-size distribution of RandomResizedCrop on
///                  4:3, 3:2 and 1:1 images (share of crops upscaled to 224, shorter side),
///                  bytes stored and uploaded, the per-image costs above at L, and the change of
///                  the 224 output against cropping from a 1536 x 1152 original (mean and 99.9th
///                  percentile |diff| in grey levels over all output values).

#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "train/input/aten_op_counter.hpp"
#include "pets/data/augment.hpp"
#include "pets/data/image.hpp"
#include "pets/data/rng.hpp"
#include "pets/testdata/synth.hpp"
#include "pets/train/input/batch_resize.hpp"
#include "pets/train/input/device_input.hpp"

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;
using pets::data::CropBox;
using pets::data::Image;

namespace {

struct Config {
  int side = 512;            // stored longer side of the device_input section
  int size = 224;            // output side
  int images = 64;           // distinct stored images per measurement (one batch)
  double min_seconds = 1.0;  // per timed measurement
  int min_passes = 3;
  int boxes = 20000;        // Monte Carlo boxes per stored size
  int fidelity_boxes = 48;  // crops compared against the original per stored size
  std::vector<int> sides = {512, 448, 384, 320, 288, 256};
  std::vector<int> resize_batches = {64, 128};
  std::vector<int> resize_tiles;  // beyond pets::train::kResizeTile
  int resize_rounds = 3;
  bool resize_only = false;
  std::string resize_device = "cpu";  // where the resize section runs (cpu or cuda)
};

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

/// Runs `pass` (which handles `items` images) until min_seconds and min_passes are reached.
/// Returns microseconds per item: the fastest pass (the ceiling; a shared machine only slows
/// passes down) and the median.
template <class F>
json time_per_item(F&& pass, int items, const Config& c) {
  pass();  // warm-up
  std::vector<double> us;
  const auto start = Clock::now();
  while (static_cast<int>(us.size()) < c.min_passes || seconds_since(start) < c.min_seconds) {
    const auto t0 = Clock::now();
    pass();
    us.push_back(seconds_since(t0) * 1e6 / items);
  }
  std::sort(us.begin(), us.end());
  const double best = us.front();
  return json{{"us_best", best},
              {"us_median", us[us.size() / 2]},
              {"images_per_s", 1e6 / best},
              {"passes", us.size()}};
}

/// A pets-like stored image set at longer side `side`: landscape 4:3 and 3:2, portrait 3:4.
std::vector<Image> stored_images(int side, int n) {
  const double aspects[] = {0.75, 2.0 / 3.0, 4.0 / 3.0, 0.75};
  std::vector<Image> out;
  for (int i = 0; i < n; ++i) {
    const double a = aspects[i % 4];  // height / width
    const int h = a <= 1 ? static_cast<int>(std::lround(side * a)) : side;
    const int w = a <= 1 ? side : static_cast<int>(std::lround(side / a));
    out.push_back(pets::testdata::render_synthetic_image(i % 37, 11, i, h, w));
  }
  return out;
}

/// Multi-octave value noise with amplitude proportional to the feature size: a 1/f amplitude
/// spectrum, the usual model of natural photographs' statistics.
Image natural_noise(int height, int width, std::uint64_t seed) {
  std::vector<float> acc(static_cast<std::size_t>(height) * width * 3, 0.0f);
  pets::data::Rng rng(seed);
  float total = 0;
  for (int cell = 2; cell <= 512; cell *= 2) {
    const int gh = height / cell + 2, gw = width / cell + 2;
    std::vector<float> grid(static_cast<std::size_t>(gh) * gw * 3);
    for (auto& g : grid) g = static_cast<float>(rng.uniform(-1, 1));
    const float amp = static_cast<float>(cell);
    total += amp;
    for (int y = 0; y < height; ++y) {
      const float fy = static_cast<float>(y) / cell;
      const int y0 = static_cast<int>(fy);
      const float ty = fy - y0;
      for (int x = 0; x < width; ++x) {
        const float fx = static_cast<float>(x) / cell;
        const int x0 = static_cast<int>(fx);
        const float tx = fx - x0;
        for (int ch = 0; ch < 3; ++ch) {
          auto g = [&](int yy, int xx) {
            return grid[(static_cast<std::size_t>(yy) * gw + xx) * 3 + ch];
          };
          const float v = (1 - ty) * ((1 - tx) * g(y0, x0) + tx * g(y0, x0 + 1)) +
                          ty * ((1 - tx) * g(y0 + 1, x0) + tx * g(y0 + 1, x0 + 1));
          acc[(static_cast<std::size_t>(y) * width + x) * 3 + ch] += amp * v;
        }
      }
    }
  }
  Image img;
  img.height = height;
  img.width = width;
  img.pixels.resize(acc.size());
  for (std::size_t i = 0; i < acc.size(); ++i)
    img.pixels[i] = static_cast<std::uint8_t>(
        std::clamp(std::lround(128.0f + 200.0f * acc[i] / total), 0L, 255L));
  return img;
}

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

/// The first figure of /proc/loadavg (-1 where there is none).
double load_average() {
  std::ifstream f("/proc/loadavg");
  double load = -1;
  f >> load;
  return load;
}

/// The resize section (see the file's header).
json resize_costs(const Config& c) {
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
  return out;
}

/// Where RandomResizedCrop's boxes fall on a height x width stored image.
json crop_distribution(int height, int width, const Config& c) {
  pets::data::Rng rng(pets::data::mix_seed(
      {static_cast<std::uint64_t>(height), static_cast<std::uint64_t>(width), 99}));
  std::vector<int> shorter;
  std::int64_t upscaled_any = 0, upscaled_both = 0;
  double bytes = 0;
  for (int i = 0; i < c.boxes; ++i) {
    const CropBox b = pets::data::random_resized_crop_box(height, width, rng);
    shorter.push_back(std::min(b.height, b.width));
    upscaled_any += std::min(b.height, b.width) < c.size;
    upscaled_both += std::max(b.height, b.width) < c.size;
    bytes += 3.0 * b.height * b.width;
  }
  std::sort(shorter.begin(), shorter.end());
  auto pct = [&](double p) { return shorter[static_cast<std::size_t>(p * (shorter.size() - 1))]; };
  return json{{"upscaled_share", static_cast<double>(upscaled_any) / c.boxes},
              {"upscaled_both_sides_share", static_cast<double>(upscaled_both) / c.boxes},
              {"shorter_side_min", shorter.front()},
              {"shorter_side_p05", pct(0.05)},
              {"shorter_side_p50", pct(0.5)},
              {"mean_crop_bytes", bytes / c.boxes}};
}

/// The 224 output from an image stored at `side` against the one from the original: the box is
/// drawn on the stored image, snapped to a grid that maps exactly onto original pixels, and both
/// crops are resized with the CPU path's filter. |diff| in grey levels over every output value.
json fidelity(const Image& original, int side, const Config& c) {
  const int oh = original.height, ow = original.width;  // 1152 x 1536
  const int sh = oh * side / ow, sw = side;
  const Image stored = (sw == ow) ? original : pets::data::resize_image(original, sh, sw);
  // stored pixel k covers original pixels [k * ow / sw, (k + 1) * ow / sw): exact at multiples
  // of q = sw / gcd(ow, sw).
  int g = ow, r = sw;
  while (r) std::swap(g, r), r %= g;
  const int q = sw / g, p = ow / g;
  pets::data::Rng rng(pets::data::mix_seed({static_cast<std::uint64_t>(side), 5}));
  std::vector<float> a(3 * static_cast<std::size_t>(c.size) * c.size), b(a.size());
  std::vector<double> diffs;
  diffs.reserve(a.size() * c.fidelity_boxes);
  for (int k = 0; k < c.fidelity_boxes; ++k) {
    CropBox box = pets::data::random_resized_crop_box(sh, sw, rng);
    auto snap = [q](int v) { return v / q * q; };
    box.top = snap(box.top);
    box.left = snap(box.left);
    box.height = std::max(q, snap(box.height));
    box.width = std::max(q, snap(box.width));
    const CropBox obox{box.top / q * p, box.left / q * p, box.height / q * p, box.width / q * p};
    pets::data::resize_crop_bilinear(stored.pixels.data(), sh, sw, box, c.size, c.size, a.data());
    pets::data::resize_crop_bilinear(original.pixels.data(), oh, ow, obox, c.size, c.size,
                                     b.data());
    for (std::size_t i = 0; i < a.size(); ++i) diffs.push_back(std::fabs(a[i] - b[i]));
  }
  double sum = 0;
  for (double d : diffs) sum += d;
  std::sort(diffs.begin(), diffs.end());
  return json{{"mean_abs_grey", sum / diffs.size()},
              {"p999_abs_grey", diffs[static_cast<std::size_t>(0.999 * (diffs.size() - 1))]}};
}

std::vector<int> int_list(const std::string& s) {
  std::vector<int> out;
  for (std::size_t pos = 0; pos < s.size();) {
    const std::size_t end = std::min(s.find(',', pos), s.size());
    out.push_back(std::stoi(s.substr(pos, end - pos)));
    pos = end + 1;
  }
  return out;
}

void usage() {
  std::fprintf(stderr,
               "usage: device_input_bench [--side N] [--images N] [--min-seconds S] "
               "[--sides a,b,...] [--quick] [--resize-only] [--resize-batches a,b,...] "
               "[--resize-tiles a,b,...] [--resize-rounds N] [--resize-device cpu|cuda]\n");
}

}  // namespace

int main(int argc, char** argv) {
  Config c;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        usage();
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--side") {
      c.side = std::stoi(next());
    } else if (a == "--images") {
      c.images = std::stoi(next());
    } else if (a == "--min-seconds") {
      c.min_seconds = std::stod(next());
    } else if (a == "--sides") {
      c.sides = int_list(next());
    } else if (a == "--resize-batches") {
      c.resize_batches = int_list(next());
    } else if (a == "--resize-tiles") {
      c.resize_tiles = int_list(next());
    } else if (a == "--resize-rounds") {
      c.resize_rounds = std::stoi(next());
    } else if (a == "--resize-device") {
      c.resize_device = next();
      if (c.resize_device != "cpu" && c.resize_device != "cuda") {
        usage();
        return 2;
      }
    } else if (a == "--resize-only") {
      c.resize_only = true;
    } else if (a == "--quick") {
      c.images = 16;
      c.min_seconds = 0.2;
      c.boxes = 2000;
      c.fidelity_boxes = 4;
      c.sides = {512, 256};
      c.resize_batches = {16};
      c.resize_rounds = 1;
    } else {
      usage();
      return 2;
    }
  }
  // Per-core figures: one intra-op thread for the tensor code as well.
  at::set_num_threads(1);
  torch::NoGradGuard no_grad;

  json report;
  report["config"] = {{"side", c.side},     {"size", c.size},
                      {"images", c.images}, {"min_seconds", c.min_seconds},
                      {"torch_threads", 1}, {"libtorch", TORCH_VERSION}};
  {
    const json resize = resize_costs(c);
    report["resize"] = resize;
    std::fprintf(stderr,
                 "resize + normalise on the %s device, bf16 (us/image best, median of "
                 "rounds; ATen calls per batch):\n",
                 c.resize_device.c_str());
    for (const json& row : resize)
      for (const auto& [name, v] : row.items())
        if (v.is_object())
          std::fprintf(stderr, "  batch %3d %-16s %9.1f us %9.1f us  %4lld calls (%lld nested)\n",
                       row["batch"].get<int>(), name.c_str(), v["us_best"].get<double>(),
                       v["us_median_of_rounds"].get<double>(), v["aten_ops_top"].get<long long>(),
                       v["aten_ops_all"].get<long long>());
    if (c.resize_only) {
      std::cout << report.dump(2) << "\n";
      return 0;
    }
  }
  const json main_costs = path_costs(stored_images(c.side, c.images), c);
  report["device_input"] = main_costs;
  std::fprintf(stderr, "device_input at stored side %d (us/image best, img/s per core):\n", c.side);
  for (const char* k :
       {"cpu_path", "device_path_host", "device_path_stage", "read_proxy", "device_tensor_cpu"})
    std::fprintf(stderr, "  %-18s %9.1f us  %9.0f img/s\n", k,
                 main_costs[k]["us_best"].get<double>(),
                 main_costs[k]["images_per_s"].get<double>());

  if (torch::cuda::is_available()) {
    const json gpu = gpu_costs(stored_images(c.side, c.images), c);
    report["device_input"]["gpu"] = gpu;
    std::fprintf(stderr,
                 "  %-18s %9.1f us  %9.0f img/s (GPU, batches of %d; submit %.0f us/batch)\n",
                 "gpu_pipeline", gpu["gpu_pipeline"]["us_best"].get<double>(),
                 gpu["gpu_pipeline"]["images_per_s"].get<double>(), c.images,
                 gpu["submit_host_us_per_batch"].get<double>());
  } else {
    report["device_input"]["gpu"] = nullptr;  // no CUDA device here
  }

  const Image pets_like = pets::testdata::render_synthetic_image(5, 11, 0, 1152, 1536);
  const Image natural = natural_noise(1152, 1536, 17);
  json sizes = json::array();
  std::fprintf(
      stderr,
      "stored_size (crops upscaled: shorter side < %d; costs on a 4:3, 3:2, 3:4 mix; |diff| "
      "vs a 1536 x 1152 original, grey levels, pets-like / 1-over-f):\n",
      c.size);
  for (int side : c.sides) {
    json row;
    row["side"] = side;
    // The Oxford pets are mostly 4:3 (500 x 375) and 3:2 (500 x 333), either way round.
    row["crops_4x3"] = crop_distribution(side * 3 / 4, side, c);
    row["crops_3x2"] = crop_distribution(static_cast<int>(std::lround(side * 2.0 / 3.0)), side, c);
    row["crops_1x1"] = crop_distribution(side, side, c);
    const json costs = path_costs(stored_images(side, c.images), c);
    row["costs"] = costs;
    row["fidelity_pets_like"] = fidelity(pets_like, side, c);
    row["fidelity_natural"] = fidelity(natural, side, c);
    std::fprintf(
        stderr,
        "  L=%4d upscaled 4:3 %5.1f%% 3:2 %5.1f%% 1:1 %5.1f%% (min side 4:3 %3d)  stored %6.0f B  "
        "crop %6.0f B  cpu %6.1f us  host %5.1f us  read %5.1f us  |diff| %.2f/%.2f "
        "(p99.9 %.1f/%.1f)\n",
        side, 100 * row["crops_4x3"]["upscaled_share"].get<double>(),
        100 * row["crops_3x2"]["upscaled_share"].get<double>(),
        100 * row["crops_1x1"]["upscaled_share"].get<double>(),
        row["crops_4x3"]["shorter_side_min"].get<int>(), costs["mean_stored_bytes"].get<double>(),
        costs["mean_crop_bytes"].get<double>(), costs["cpu_path"]["us_best"].get<double>(),
        costs["device_path_host"]["us_best"].get<double>(),
        costs["read_proxy"]["us_best"].get<double>(),
        row["fidelity_pets_like"]["mean_abs_grey"].get<double>(),
        row["fidelity_natural"]["mean_abs_grey"].get<double>(),
        row["fidelity_pets_like"]["p999_abs_grey"].get<double>(),
        row["fidelity_natural"]["p999_abs_grey"].get<double>());
    sizes.push_back(row);
  }
  report["stored_size"] = sizes;
  std::cout << report.dump(2) << "\n";
  return 0;
}
