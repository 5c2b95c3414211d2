/// \file
/// loader_bench: the loader alone over a store, one rank, for each worker-thread count asked for
/// (bench/loader_measure.hpp says what is measured). Free of LibTorch, so it builds in seconds
/// and can be built from two versions of the loader and run alternately (bench/RESULTS.md).
/// JSON on stdout, a table on stderr. Not a test: nothing is asserted.
///
///   loader_bench --data FILE [--workers 1,2,4] [--world 2] [--rank 0] [--epochs 1]
///                [--batch 64] [--image-size 224] [--output pixels|crops|both] [--split train|eval]
///                [--check-first 0|1] [--verify-ahead 0|1] [--wait-for-check 0|1]
///                [--malloc retain|default]
///
/// --check-first 1 reads every image of the split once before each measurement, so that every
/// pixel chunk's checksum is checked (Store::read_crop) before the clocks start: the figures of
/// a long run after its first pass over the store. 0 (the default) measures the first epochs of
/// a process, checks included. --verify-ahead 0 turns the loader's background check of the chunks
/// off (LoaderOptions::verify_ahead; on by default, as in pets_train); --wait-for-check 1 lets it
/// end before the clocks start (pets_train's start-up outlasts it). --malloc default keeps
/// glibc's allocator settings instead of pets::retain_freed_memory(), which pets_train sets.

#include <cstdio>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "loader_measure.hpp"
#include "pets/util/error.hpp"
#include "pets/util/memory.hpp"

namespace {

[[noreturn]] void usage(const std::string& message) { throw pets::UsageError(message); }

int to_int(const std::string& name, const std::string& v) {
  try {
    std::size_t used = 0;
    const int n = std::stoi(v, &used);
    if (used == v.size() && n >= 0) return n;
  } catch (const std::exception&) {
  }
  usage(name + " needs a non-negative integer, got '" + v + "'");
}

int run(int argc, char** argv) {
  pets::data::LoaderOptions lo;
  lo.world = 2;
  lo.prefetch = 3;
  std::vector<int> workers = {1, 2, 4};
  std::vector<pets::data::LoaderOutput> outputs = {pets::data::LoaderOutput::kPixels};
  pets::data::SplitKind kind = pets::data::SplitKind::kTrain;
  int epochs = 1;
  bool check_first = false;
  bool retain = true;
  bool wait_for_check = false;
  for (int i = 1; i < argc; ++i) {
    const std::string o = argv[i];
    if (i + 1 >= argc) usage(o + " needs a value");
    const std::string v = argv[++i];
    if (o == "--data") {
      lo.path = v;
    } else if (o == "--workers") {
      workers.clear();
      std::stringstream in(v);
      for (std::string w; std::getline(in, w, ',');) workers.push_back(to_int(o, w));
    } else if (o == "--world") {
      lo.world = to_int(o, v);
    } else if (o == "--rank") {
      lo.rank = to_int(o, v);
    } else if (o == "--epochs") {
      epochs = to_int(o, v);
    } else if (o == "--batch") {
      lo.train_batch = lo.eval_batch = to_int(o, v);
    } else if (o == "--image-size") {
      lo.image_size = to_int(o, v);
    } else if (o == "--output") {
      if (v == "pixels")
        outputs = {pets::data::LoaderOutput::kPixels};
      else if (v == "crops")
        outputs = {pets::data::LoaderOutput::kCrops};
      else if (v == "both")
        outputs = {pets::data::LoaderOutput::kPixels, pets::data::LoaderOutput::kCrops};
      else
        usage("--output must be pixels, crops or both");
    } else if (o == "--check-first") {
      if (v != "0" && v != "1") usage("--check-first must be 0 or 1");
      check_first = v == "1";
    } else if (o == "--verify-ahead") {
      if (v != "0" && v != "1") usage("--verify-ahead must be 0 or 1");
      lo.verify_ahead = v == "1";
    } else if (o == "--wait-for-check") {
      if (v != "0" && v != "1") usage("--wait-for-check must be 0 or 1");
      wait_for_check = v == "1";
    } else if (o == "--malloc") {
      if (v != "retain" && v != "default") usage("--malloc must be retain or default");
      retain = v == "retain";
    } else if (o == "--split") {
      if (v != "train" && v != "eval") usage("--split must be train or eval");
      kind = v == "train" ? pets::data::SplitKind::kTrain : pets::data::SplitKind::kEval;
    } else {
      usage("unknown option '" + o + "'");
    }
  }
  if (lo.path.empty()) usage("--data FILE is required");
  if (retain) PETS_CHECK(pets::retain_freed_memory(), "the allocator refused to keep freed memory");
  nlohmann::json runs = nlohmann::json::array();
  for (const auto output : outputs)
    for (const int w : workers) {
      lo.workers = w;
      lo.output = output;
      runs.push_back(pets::bench::measure_loader(lo, epochs, kind, check_first, wait_for_check));
      const auto& r = runs.back();
      const auto steady = r["steady"].is_null() ? r["first_epoch"] : r["steady"];
      std::fprintf(
          stderr,
          "%-7s workers %d: %8.1f img/s wall, %8.1f img/s per CPU-second, CPU per image "
          "%.1f us first epoch, %.1f us after, lock %5.1f %% of CPU, %.0f bytes "
          "read/image, %lld chunks checked (%lld ahead), digest %s\n",
          r["output"].get<std::string>().c_str(), w, r["images_per_s"].get<double>(),
          r["images_per_cpu_s"].get<double>(), r["first_epoch"]["cpu_us_per_image"].get<double>(),
          steady["cpu_us_per_image"].get<double>(), 100 * r["lock_held_share"].get<double>(),
          r["read_bytes_per_image"].get<double>(),
          static_cast<long long>(r["verified_chunks"].get<std::int64_t>()),
          static_cast<long long>(r["verified_ahead"].get<std::int64_t>()),
          r["digest"].get<std::string>().c_str());
    }
  std::cout << nlohmann::json{{"data", lo.path},
                              {"world", lo.world},
                              {"rank", lo.rank},
                              {"batch", lo.train_batch},
                              {"image_size", lo.image_size},
                              {"epochs", epochs},
                              {"check_first", check_first},
                              {"verify_ahead", lo.verify_ahead},
                              {"wait_for_check", wait_for_check},
                              {"malloc", retain ? "retain" : "default"},
                              {"runs", runs}}
                   .dump(2)
            << std::endl;
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const pets::UsageError& e) {
    std::cerr << "loader_bench: error: " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "loader_bench: error: " << e.what() << "\n";
    return 1;
  }
}
