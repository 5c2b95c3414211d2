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

#include <boost/program_options.hpp>
#include <cstdio>
#include <iostream>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "loader_measure.hpp"
#include "pets/train/options/options.hpp"
#include "pets/util/app.hpp"
#include "pets/util/error.hpp"
#include "pets/util/memory.hpp"

namespace po = boost::program_options;

namespace {

[[noreturn]] void usage(const std::string& message) {
  throw pets::UsageError("loader_bench: " + message);
}

/// `value` of the 0|1 option `name`.
bool zero_or_one(const std::string& name, const std::string& value) {
  if (value != "0" && value != "1") usage("--" + name + " must be 0 or 1, got '" + value + "'");
  return value == "1";
}

int loader_bench_main(int argc, char** argv) {
  pets::data::LoaderOptions lo;
  lo.world = 2;
  lo.prefetch = 3;
  std::string workers_list = "1,2,4", output = "pixels", split = "train", malloc_choice = "retain";
  std::string check_first_text = "0", verify_ahead_text = lo.verify_ahead ? "1" : "0";
  std::string wait_for_check_text = "0";
  int epochs = 1;
  int batch = pets::train::TrainOptions{}.batch_size;  // pets_train's --batch-size
  po::options_description desc("loader_bench --data FILE [options]");
  desc.add_options()("help,h", "show this help")(
      "data", po::value<std::string>(&lo.path)->required(), "the store")(
      "workers", po::value<std::string>(&workers_list)->default_value(workers_list),
      "worker-thread counts, one measurement each")(
      "world", po::value<int>(&lo.world)->default_value(lo.world), "ranks sharing the split")(
      "rank", po::value<int>(&lo.rank)->default_value(lo.rank), "the rank measured")(
      "epochs", po::value<int>(&epochs)->default_value(epochs), "epochs per measurement")(
      "batch", po::value<int>(&batch)->default_value(batch), "images per batch")(
      "image-size", po::value<int>(&lo.image_size)->default_value(lo.image_size), "image side")(
      "output", po::value<std::string>(&output)->default_value(output), "pixels | crops | both")(
      "split", po::value<std::string>(&split)->default_value(split), "train | eval")(
      "check-first", po::value<std::string>(&check_first_text)->default_value(check_first_text),
      "1: read every image once before each measurement")(
      "verify-ahead", po::value<std::string>(&verify_ahead_text)->default_value(verify_ahead_text),
      "the loader's background check of the chunks (0 | 1)")(
      "wait-for-check",
      po::value<std::string>(&wait_for_check_text)->default_value(wait_for_check_text),
      "1: the background check ends before the clocks start")(
      "malloc", po::value<std::string>(&malloc_choice)->default_value(malloc_choice),
      "retain (pets_train's allocator settings) | default (glibc's)");
  po::variables_map vm;
  if (!pets::parse_command_line(argc, argv, desc, vm, "loader_bench")) return 0;  // --help
  for (const auto& [name, value] : std::vector<std::pair<const char*, int>>{
           {"--world", lo.world}, {"--rank", lo.rank}, {"--epochs", epochs}})
    if (value < 0) usage(std::string(name) + " must not be negative, got " + std::to_string(value));
  for (const auto& [name, value] : std::vector<std::pair<const char*, int>>{
           {"--batch", batch}, {"--image-size", lo.image_size}})
    if (value < 1) usage(std::string(name) + " must be positive, got " + std::to_string(value));
  lo.batch_size = lo.eval_batch_size = batch;
  const std::optional<std::vector<int>> workers = pets::bench::worker_counts(workers_list, 1);
  if (!workers) usage("--workers needs worker counts of at least 1, got '" + workers_list + "'");
  std::vector<pets::data::LoaderOutput> outputs;
  if (output == "pixels" || output == "both") outputs.push_back(pets::data::LoaderOutput::kPixels);
  if (output == "crops" || output == "both") outputs.push_back(pets::data::LoaderOutput::kCrops);
  if (outputs.empty()) usage("--output must be pixels, crops or both");
  if (split != "train" && split != "eval") usage("--split must be train or eval");
  const pets::data::SplitKind kind =
      split == "train" ? pets::data::SplitKind::kTrain : pets::data::SplitKind::kEval;
  const bool check_first = zero_or_one("check-first", check_first_text);
  lo.verify_ahead = zero_or_one("verify-ahead", verify_ahead_text);
  const bool wait_for_check = zero_or_one("wait-for-check", wait_for_check_text);
  if (malloc_choice != "retain" && malloc_choice != "default")
    usage("--malloc must be retain or default");
  const bool retain = malloc_choice == "retain";
  if (retain) PETS_CHECK(pets::retain_freed_memory(), "the allocator refused to keep freed memory");
  nlohmann::json runs = nlohmann::json::array();
  for (const auto output : outputs)
    for (const int w : *workers) {
      lo.workers = w;
      lo.output = output;
      pets::bench::LoaderRun run;
      run.epochs = epochs;
      run.kind = kind;
      run.check_first = check_first;
      run.wait_for_check = wait_for_check;
      runs.push_back(pets::bench::measure_loader(lo, run));
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
                              {"batch", lo.batch_size},
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

int main(int argc, char** argv) { return pets::run_program(argc, argv, loader_bench_main); }
