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
///
/// Each section is one file of this folder on the harness of harness.hpp.

#include <torch/torch.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include "harness.hpp"

namespace pets::device_input_bench {
namespace {

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

int bench_main(int argc, char** argv) {
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
  report["resize"] = resize_section(c);
  if (c.resize_only) {
    std::cout << report.dump(2) << "\n";
    return 0;
  }
  report["device_input"] = device_input_section(c);
  report["stored_size"] = stored_size_section(c);
  std::cout << report.dump(2) << "\n";
  return 0;
}

}  // namespace
}  // namespace pets::device_input_bench

int main(int argc, char** argv) { return pets::device_input_bench::bench_main(argc, argv); }
