#include "data_test_util.hpp"

#include <unistd.h>

#include <atomic>
#include <filesystem>

#include "pets/data/preprocess.hpp"
#include "pets/data/synth.hpp"

namespace fs = std::filesystem;

namespace pets::data::testing {

ScratchDir::ScratchDir(const std::string& tag) {
  static std::atomic<int> counter{0};
  path_ = std::string(PETS_BINARY_DIR) + "/tests/data/scratch/" + tag + "_" +
          std::to_string(getpid()) + "_" + std::to_string(counter++);
  fs::remove_all(path_);
  fs::create_directories(path_);
}

ScratchDir::~ScratchDir() {
  std::error_code ec;
  fs::remove_all(path_, ec);
}

void make_store(const std::string& images_dir, const std::string& out, int classes, int per_class,
                MPI_Comm comm, int max_side) {
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  if (rank == 0) {
    SynthOptions so;
    so.out_dir = images_dir;
    so.classes = classes;
    so.per_class = per_class;
    so.seed = 7;
    write_synthetic_dataset(so);
  }
  MPI_Barrier(comm);
  PreprocessOptions po;
  po.images_dir = images_dir;
  po.out = out;
  po.max_side = max_side;
  run_preprocess(po, comm);
}

}  // namespace pets::data::testing
