/// \file
/// loader_bench: the loader alone over a store, one rank, for each worker-thread count asked for
/// (bench/loader_measure.hpp says what is measured). Free of LibTorch, so it builds in seconds
/// and can be built from two versions of the loader and run alternately (bench/RESULTS.md).
/// JSON on stdout, a table on stderr. Not a test: nothing is asserted.
///
///   loader_bench --data FILE [--workers 1,2,4] [--world 2] [--rank 0] [--epochs 1]
///                [--batch 64] [--image-size 224] [--output pixels|crops|both] [--split train|eval]
///                [--check-first 0|1]
///
/// --check-first 1 reads every image of the split once before each measurement, so that every
/// pixel chunk's checksum is checked (Store::read_crop) before the clocks start: the figures of
/// a long run after its first pass over the store. 0 (the default) measures the first epochs of
/// a process, checks included.

#include <cstdio>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "loader_measure.hpp"
#include "pets/util/error.hpp"

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
    } else if (o == "--split") {
      if (v != "train" && v != "eval") usage("--split must be train or eval");
      kind = v == "train" ? pets::data::SplitKind::kTrain : pets::data::SplitKind::kEval;
    } else {
      usage("unknown option '" + o + "'");
    }
  }
  if (lo.path.empty()) usage("--data FILE is required");
  nlohmann::json runs = nlohmann::json::array();
  for (const auto output : outputs)
    for (const int w : workers) {
      lo.workers = w;
      lo.output = output;
      runs.push_back(pets::bench::measure_loader(lo, epochs, kind, check_first));
      const auto& r = runs.back();
      std::fprintf(stderr,
                   "%-7s workers %d: %8.1f img/s wall, %8.1f img/s per CPU-second, lock %5.1f %% "
                   "of CPU, %.0f bytes read/image, %lld chunks checked, digest %s\n",
                   r["output"].get<std::string>().c_str(), w, r["images_per_s"].get<double>(),
                   r["images_per_cpu_s"].get<double>(), 100 * r["lock_held_share"].get<double>(),
                   r["read_bytes_per_image"].get<double>(),
                   static_cast<long long>(r["verified_chunks"].get<std::int64_t>()),
                   r["digest"].get<std::string>().c_str());
    }
  std::cout << nlohmann::json{{"data", lo.path},
                              {"world", lo.world},
                              {"rank", lo.rank},
                              {"batch", lo.train_batch},
                              {"image_size", lo.image_size},
                              {"epochs", epochs},
                              {"check_first", check_first},
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
