#include "data_test_util.hpp"

#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <stdexcept>

#include "pets/data/preprocess.hpp"
#include "pets/testdata/encode.hpp"
#include "pets/testdata/synth.hpp"

namespace fs = std::filesystem;

namespace pets::data::testing {

using namespace pets::testdata;

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

namespace {

struct Segment {
  std::uint8_t marker;
  std::size_t begin;  ///< at the 0xFF of the marker
  std::size_t end;    ///< past the segment, and for a scan past its entropy-coded data
};

/// The marker segments of a JPEG from SOI to EOI (the encoder writes no fill bytes and no
/// restart markers, so a scan's data ends at the first 0xFF not followed by a stuffed 0x00).
std::vector<Segment> jpeg_segments(const std::vector<std::uint8_t>& j) {
  std::vector<Segment> out;
  std::size_t pos = 2;
  while (pos + 1 < j.size()) {
    if (j[pos] != 0xFF) throw std::runtime_error("jpeg_segments: lost the marker chain");
    const std::uint8_t marker = j[pos + 1];
    if (marker == 0xD9) {
      out.push_back({marker, pos, pos + 2});
      return out;
    }
    std::size_t end = pos + 2 + (static_cast<std::size_t>(j[pos + 2]) << 8 | j[pos + 3]);
    if (marker == 0xDA)
      while (end + 1 < j.size() && !(j[end] == 0xFF && j[end + 1] != 0x00)) ++end;
    out.push_back({marker, pos, end});
    pos = end;
  }
  throw std::runtime_error("jpeg_segments: no end-of-image marker");
}

}  // namespace

std::vector<std::uint8_t> jpeg_claiming_size(int width, int height) {
  std::vector<std::uint8_t> jpeg = encode_jpeg(render_synthetic_image(3, 11, 1, 16, 16));
  for (const Segment& s : jpeg_segments(jpeg)) {
    if (s.marker != 0xC0) continue;
    jpeg[s.begin + 5] = static_cast<std::uint8_t>(height >> 8);
    jpeg[s.begin + 6] = static_cast<std::uint8_t>(height & 0xFF);
    jpeg[s.begin + 7] = static_cast<std::uint8_t>(width >> 8);
    jpeg[s.begin + 8] = static_cast<std::uint8_t>(width & 0xFF);
    return jpeg;
  }
  throw std::runtime_error("jpeg_claiming_size: no SOF0 segment");
}

std::vector<std::uint8_t> jpeg_with_scans(int scans) {
  JpegOptions o;
  o.progressive = true;
  std::vector<std::uint8_t> jpeg = encode_jpeg(render_synthetic_image(5, 11, 1, 32, 32), o);
  const std::vector<Segment> segs = jpeg_segments(jpeg);
  const Segment* last = nullptr;
  for (const Segment& s : segs)
    if (s.marker == 0xDA) last = &s;
  if (last == nullptr) throw std::runtime_error("jpeg_with_scans: no scan");
  const std::vector<std::uint8_t> scan(jpeg.begin() + static_cast<std::ptrdiff_t>(last->begin),
                                       jpeg.begin() + static_cast<std::ptrdiff_t>(last->end));
  const std::size_t eoi = segs.back().begin;
  std::vector<std::uint8_t> out(jpeg.begin(), jpeg.begin() + static_cast<std::ptrdiff_t>(eoi));
  for (int n = count_jpeg_scans(jpeg); n < scans; ++n)
    out.insert(out.end(), scan.begin(), scan.end());
  out.insert(out.end(), jpeg.begin() + static_cast<std::ptrdiff_t>(eoi), jpeg.end());
  return out;
}

int count_jpeg_scans(const std::vector<std::uint8_t>& jpeg) {
  int n = 0;
  for (const Segment& s : jpeg_segments(jpeg)) n += s.marker == 0xDA;
  return n;
}

}  // namespace pets::data::testing
