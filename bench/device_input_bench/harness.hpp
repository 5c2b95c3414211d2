#pragma once
/// \file
/// device_input_bench's shared harness: the settings of a run (Config), the timing loop, the
/// stored images every section measures on, and the sections, one per file (path_costs.cpp,
/// resize.cpp, stored_size.cpp), which main.cpp runs into one report.

#include <algorithm>
#include <chrono>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "pets/data/image.hpp"

namespace pets::device_input_bench {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

/// One run's settings (main.cpp's options).
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

inline double seconds_since(Clock::time_point t0) {
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
std::vector<pets::data::Image> stored_images(int side, int n);

/// Per-image costs of both paths on `images`, one thread (path_costs.cpp).
json path_costs(const std::vector<pets::data::Image>& images, const Config& c);

/// The device_input section: path_costs at the stored side --side and, with a CUDA device, the
/// GPU half's costs; its lines of the table on stderr (path_costs.cpp).
json device_input_section(const Config& c);

/// The resize section, one row per batch size; its lines of the table on stderr (resize.cpp).
json resize_section(const Config& c);

/// The stored_size section, one row per side of --sides; its lines of the table on stderr
/// (stored_size.cpp).
json stored_size_section(const Config& c);

}  // namespace pets::device_input_bench
