// pets_preprocess: decodes an image folder once into one HDF5 store, on all MPI ranks.
#include <mpi.h>

#include <boost/program_options.hpp>
#include <cstdlib>
#include <iostream>
#include <string>

#include "pets/comm/program.hpp"
#include "pets/data/preprocess.hpp"
#include "pets/util/app.hpp"
#include "pets/util/error.hpp"
#include "pets/util/number_text.hpp"

namespace po = boost::program_options;

namespace {

constexpr const char* kLayoutHelp = R"(Layouts (--layout):
  names    DIR/LABEL_NUMBER.jpg: the label is ^(.*)_\d+\.EXT$ of the file name (the
           Oxford-IIIT Pet folder); sub-folders are not searched
  folders  DIR/CLASS/...: one class per sub-folder, named as the folder, its images found at any
           depth below it
  split    DIR/train/CLASS/... and DIR/val/CLASS/... (or valid/, validation/, test/): the
           folders' split is kept, --seed and --train-fraction are not used
  auto     split when DIR holds train/ and an evaluation folder, folders when it holds folders
           and no image file, names when it holds image files and no folder (or folders with
           fewer images below them); refused when unclear, naming the --layout to give
Images are the files ending in .jpg .jpeg .png .gif .webp .bmp .ppm .pgm .tif .tiff in any
letter case, decoded by content (JPEG, PNG, GIF, WebP, BMP, PGM/PPM; TIFF is not decoded and is
skipped); unreadable ones are skipped and named. Hidden entries (a leading '.') and
other files are counted in the summary line, not read. Symbolic links are followed, each folder
read once. The --seed and --train-fraction split is a seeded permutation of the files (of each
class's files with --split-mode stratified), the same for any number of ranks. The summary line
names the layout read:
  $ mpirun -np 2 pets_preprocess --images work/images --out pets.h5
  pets_preprocess: pets.h5: layout names (auto); 740 stored, 0 skipped; 592 train, 148 eval, 37 labels
  $ mpirun -np 2 pets_preprocess --images photos --out photos.h5
  pets_preprocess: photos.h5: layout folders (auto); 24 stored, 0 skipped; 3 not read (2 hidden,
  1 without an image extension); 19 train, 5 eval, 3 labels
  $ mpirun -np 2 pets_preprocess --images photos-split --out split.h5 --layout split
  pets_preprocess: split.h5: layout split; 22 stored, 0 skipped; 18 train, 4 eval, 3 labels
A --list file is a CSV: a header naming the columns path and label, and optionally split, then
one line per image (quoted fields with "" for a quote, LF or CRLF, UTF-8). Its paths are
relative to its folder, or absolute; its labels are the classes; a split column (train or eval
on every line) is kept as given. A listed file that is missing or unreadable is skipped and
named; a line that cannot be read is refused with its number. The summary line says "layout list".
)";

int preprocess_main(int argc, char** argv) {
  int rank = 0;
  PETS_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
  // The defaults are PreprocessOptions' member initialisers; doubles shown as a user types them.
  const pets::data::PreprocessOptions defaults;
  pets::data::PreprocessOptions o;
  // Unsigned numbers are read as text: Boost would turn "-1" into 2^64-1.
  std::string seed, max_pixels, max_memory, layout, split_mode;
  po::options_description desc(
      "mpirun -np P pets_preprocess (--images DIR | --list FILE.csv) --out FILE.h5 [options]");
  desc.add_options()("help,h", "show this help")("images", po::value<std::string>(&o.images_dir),
                                                 "folder of images, laid out as --layout says")(
      "list", po::value<std::string>(&o.list_file),
      "CSV of the images instead: a header 'path,label' (and optionally ',split' with train or "
      "eval), then a line per image; paths relative to the file's folder or absolute")(
      "layout", po::value<std::string>(&layout)->default_value("auto"),
      "auto, names, folders or split (below)")("out", po::value<std::string>(&o.out)->required(),
                                               "output HDF5 file")(
      "seed", po::value<std::string>(&seed)->default_value(std::to_string(defaults.seed)),
      "split seed (0 .. 2^64-1); not used by --layout split")(
      "train-fraction",
      po::value<double>(&o.train_fraction)
          ->default_value(defaults.train_fraction, pets::format_number(defaults.train_fraction)),
      "fraction of the files for training, between 0 and 1; not used by --layout split")(
      "split-mode", po::value<std::string>(&split_mode)->default_value("random"),
      "random (one seeded permutation of all the files, as the tutorial) or stratified (the "
      "same fraction of every class; one image at least on each side of a class of two or "
      "more); refused with --layout split")(
      "max-side", po::value<int>(&o.max_side)->default_value(defaults.max_side),
      "downscale longer sides above this (0: keep; else at least 8)")(
      "max-pixels",
      po::value<std::string>(&max_pixels)->default_value(std::to_string(defaults.max_pixels)),
      "skip images with more pixels (decompression bombs)")(
      "max-memory",
      po::value<std::string>(&max_memory)
          ->default_value(std::to_string(defaults.max_memory >> 20) + "M"),
      "decoded pixels a rank holds at once (bytes, or with K, M, G): images are decoded and "
      "written in rounds of this size")(
      "overwrite", po::bool_switch(&o.overwrite),
      "replace an existing --out file (the new store gets a new store_id: runs trained on the "
      "old one cannot resume on it)");
  po::variables_map vm;
  try {
    po::store(
        po::command_line_parser(argc, argv).options(desc).style(pets::command_line_style()).run(),
        vm);
    if (vm.count("help")) {
      if (rank == 0) std::cout << desc << "\n" << kLayoutHelp;
      return 0;
    }
    po::notify(vm);
  } catch (const po::error& e) {
    // Same argv on every rank: every rank throws, as run_mpi_program requires.
    throw pets::UsageError(std::string("pets_preprocess: ") + pets::program_options_message(e));
  }
  if (layout == pets::data::layout_name(pets::data::Layout::kList))
    throw pets::UsageError("pets_preprocess: --layout list: give --list FILE.csv instead");
  o.layout = pets::data::parse_layout(layout);
  o.split_mode = pets::data::parse_split_mode(split_mode);
  o.split_mode_given = !vm["split-mode"].defaulted();
  o.seed = pets::unsigned_option(seed, "pets_preprocess: --seed");
  o.max_pixels = pets::unsigned_option(max_pixels, "pets_preprocess: --max-pixels");
  o.max_memory = pets::data::parse_byte_size(max_memory, "--max-memory");
  const pets::data::PreprocessSummary s = pets::data::run_preprocess(o, MPI_COMM_WORLD);
  if (rank != 0) return 0;
  // Whole lines, stdout flushed first: both streams often go to one log.
  for (const std::string& path : s.removed_temps)
    std::cerr << ("pets_preprocess: removed " + path + " (its writer is gone)\n") << std::flush;
  for (const std::string& what : s.kept_temps)
    std::cerr << ("pets_preprocess: notice: kept " + what + "\n") << std::flush;
  std::cout << "pets_preprocess: " << o.out << ": " << s.line() << std::endl;
  for (const std::string& w : s.class_warnings)
    std::cerr << ("warning: " + o.out + ": " + w + "\n") << std::flush;
  if (const char* v = std::getenv("PETS_REPORT_MEMORY"); v != nullptr && std::string(v) == "1") {
    std::string line = "pets_preprocess: " + std::to_string(s.rounds) +
                       " rounds; peak resident memory per rank (MiB):";
    for (const std::uint64_t b : s.peak_resident)
      line += " " + std::to_string((b + (1 << 19)) >> 20);
    std::cerr << line + "\n" << std::flush;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return pets::run_mpi_program(argc, argv, preprocess_main); }
