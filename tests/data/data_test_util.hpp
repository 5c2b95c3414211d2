#pragma once
// Helpers shared by the data tests: unique scratch folders and small synthetic stores.
#include <mpi.h>

#include <cstdint>
#include <string>
#include <vector>

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

/// A small baseline JPEG whose frame header (SOF0) claims `width` x `height`: a decoder that
/// trusted it would allocate width * height * 3 bytes.
std::vector<std::uint8_t> jpeg_claiming_size(int width, int height);

/// A progressive JPEG of `scans` scans or more: the encoder's own file with its last scan
/// repeated (libjpeg warns about the progression and decodes it; only a scan limit stops it).
std::vector<std::uint8_t> jpeg_with_scans(int scans);

/// The number of start-of-scan segments in a JPEG.
int count_jpeg_scans(const std::vector<std::uint8_t>& jpeg);

}  // namespace pets::data::testing
