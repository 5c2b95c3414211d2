// pets_preprocess: decodes an image folder once into one HDF5 store, on all MPI ranks.
#include <mpi.h>

#include <boost/program_options.hpp>
#include <iostream>

#include "pets/comm/program.hpp"
#include "pets/data/preprocess.hpp"
#include "pets/util/app.hpp"
#include "pets/util/error.hpp"
#include "pets/util/number_text.hpp"

namespace po = boost::program_options;

namespace {

int preprocess_main(int argc, char** argv) {
  int rank = 0;
  PETS_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
  // The defaults are PreprocessOptions' member initialisers; doubles shown as a user types them.
  const pets::data::PreprocessOptions defaults;
  pets::data::PreprocessOptions o;
  po::options_description desc("mpirun -np P pets_preprocess --images DIR --out FILE.h5 [options]");
  desc.add_options()("help,h", "show this help")(
      "images", po::value<std::string>(&o.images_dir)->required(), "folder of <breed>_<n>.jpg")(
      "out", po::value<std::string>(&o.out)->required(), "output HDF5 file")(
      "seed", po::value<std::uint64_t>(&o.seed)->default_value(defaults.seed), "split seed")(
      "train-fraction",
      po::value<double>(&o.train_fraction)
          ->default_value(defaults.train_fraction, pets::format_number(defaults.train_fraction)),
      "fraction of images for training")(
      "max-side", po::value<int>(&o.max_side)->default_value(defaults.max_side),
      "downscale longer sides above this (0: keep)")(
      "max-pixels", po::value<std::uint64_t>(&o.max_pixels)->default_value(defaults.max_pixels),
      "skip images with more pixels (decompression bombs)");
  po::variables_map vm;
  try {
    po::store(po::parse_command_line(argc, argv, desc), vm);
    if (vm.count("help")) {
      if (rank == 0) std::cout << desc << "\n";
      return 0;
    }
    po::notify(vm);
  } catch (const po::error& e) {
    // Same argv on every rank: every rank throws, as run_mpi_program requires.
    throw pets::UsageError(std::string("pets_preprocess: ") + pets::program_options_message(e));
  }
  const pets::data::PreprocessSummary s = pets::data::run_preprocess(o, MPI_COMM_WORLD);
  if (rank == 0) std::cout << "pets_preprocess: " << o.out << ": " << s.line() << "\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return pets::run_mpi_program(argc, argv, preprocess_main); }
