#pragma once
// Helpers shared by the data tests: unique scratch folders and small synthetic stores.
#include <mpi.h>

#include <string>

namespace pets::data::testing {

/// A fresh folder under the build tree, unique per process and call; removed by the destructor.
class ScratchDir {
 public:
  explicit ScratchDir(const std::string& tag);
  ~ScratchDir();
  const std::string& path() const { return path_; }
  std::string operator/(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

/// Writes a synthetic folder (no quirks) and preprocesses it on `comm` into `out`.
void make_store(const std::string& images_dir, const std::string& out, int classes, int per_class,
                MPI_Comm comm, int max_side = 128);

}  // namespace pets::data::testing
