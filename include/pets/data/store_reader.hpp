#pragma once
/// \file
/// The reading half of the preprocessed image store: one HDF5 file written by pets_preprocess
/// (store_writer.hpp) and read by the loader. Its layout and version are in
/// pets/data/store_schema.hpp; the HDF5 calls under both halves in pets/data/h5.hpp.

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "pets/data/h5.hpp"
#include "pets/data/image.hpp"
#include "pets/data/store_schema.hpp"

namespace pets::data {

class MappedChunks;

/// Which half of the data set.
enum class SplitKind { kTrain, kEval };

/// "train" or "eval" (the group names).
const char* split_name(SplitKind kind);

/// The per-image index of one split, read into memory when a store is opened.
struct SplitIndex {
  std::vector<std::uint64_t> offsets;
  std::vector<std::array<std::int32_t, 3>> shapes;
  std::vector<std::int32_t> labels;
  std::vector<std::string> names;
  std::uint64_t pixel_bytes = 0;
  std::int64_t size() const { return static_cast<std::int64_t>(labels.size()); }
};

/// A (name, reason) row of the skipped and warnings tables.
using NameReason = std::pair<std::string, std::string>;

/// What the reads of a Store cost so far, over all threads (the measure of how far more loader
/// threads can scale: the HDF5 library serialises every call into it).
struct ReadStats {
  std::int64_t reads = 0;            ///< read_image / read_crop calls
  std::int64_t direct_reads = 0;     ///< of which copied from the mapped file, outside the lock
  std::int64_t verified_chunks = 0;  ///< pixel chunk checks of our Fletcher32 code that passed
                                     ///< (once per chunk; twice if two threads raced on it)
  std::int64_t verified_ahead = 0;   ///< of which made by verify_ahead, before any read needed it
  std::int64_t damaged_chunks = 0;   ///< checks that found a sum wrong (each refused a read)
  std::int64_t bytes = 0;            ///< pixel bytes they read
  double lock_held_seconds = 0.0;    ///< inside the HDF5 lock (wall clock)
  double lock_cpu_seconds = 0.0;     ///< CPU time of the threads inside it
  double lock_wait_seconds = 0.0;    ///< waiting for it (wall clock)
};

/// Read-only access to a store file. Opening validates the whole schema (every dataset's
/// rank, shape and type class, the schema version, offsets inside pixels, label range) and
/// throws pets::UsageError naming the file and the problem. read_image and read_crop are
/// thread-safe: the HDF5 library is not, so all calls into it are serialised.
class Store {
 public:
  explicit Store(const std::string& path);
  ~Store();
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;

  const std::string& path() const { return path_; }
  const std::vector<std::string>& label_names() const { return label_names_; }
  const SplitIndex& split(SplitKind kind) const {
    return kind == SplitKind::kTrain ? train_ : eval_;
  }
  std::uint64_t seed() const { return seed_; }
  double train_fraction() const { return train_fraction_; }
  /// The longer side images were scaled down to when stored (pets_preprocess --max-side; 0: kept).
  int max_side() const { return max_side_; }
  const std::string& tool_version() const { return tool_version_; }
  /// The store_id attribute (store_schema.hpp); empty for a store written before it existed.
  const std::string& store_id() const { return store_id_; }
  /// The layout and split attributes (store_schema.hpp); empty for a store written before them.
  const std::string& layout() const { return layout_; }
  const std::string& split_made() const { return split_made_; }
  const std::vector<NameReason>& skipped() const { return skipped_; }
  const std::vector<NameReason>& warnings() const { return warnings_; }

  /// Reads image i of a split with one hyperslab read of its bytes.
  Image read_image(SplitKind kind, std::int64_t i) const;

  /// Reads only `box` of image i into `dst` (box.height * box.width * 3 bytes, HWC); the bytes
  /// outside the box are neither read nor copied. When the pixel chunks carry only the Fletcher32
  /// checksum (as pets_preprocess writes them), the rows are copied straight from the
  /// memory-mapped file at the chunk addresses HDF5 reported on the split's first read, outside
  /// the HDF5 lock, so threads read in parallel; the first time this process uses a chunk, its
  /// Fletcher32 sum is checked in our own code (MappedChunks), and a wrong sum is refused
  /// with the error HDF5's read gives. Any other layout, filter or chunk HDF5 did not place
  /// inside the file is read by one strided hyperslab read under the lock. Throws pets::Error
  /// when the box does not lie inside the image, pets::UsageError when the pixels are damaged.
  /// Thread-safe.
  void read_crop(SplitKind kind, std::int64_t i, const CropBox& box, std::uint8_t* dst) const;

  /// Checks, ahead of their reads, the Fletcher32 sums of the pixel chunks that images `images`
  /// of a split lie in, in that order, skipping chunks already checked; each chunk's pages are
  /// mapped in first (MADV_POPULATE_READ), so that the reads neither check nor page-fault. A read
  /// that comes first checks its chunk itself, as without this (a race only checks a chunk
  /// twice). A chunk whose sum is wrong stays unchecked: its read refuses it as read_crop says.
  /// Returns early once `stop` is set. Returns the chunks it checked (0 when the split is not
  /// read directly). Thread-safe; meant for a background thread (data::Loader runs one).
  std::int64_t verify_ahead(SplitKind kind, const std::vector<std::int64_t>& images,
                            const std::atomic<bool>& stop) const;

  /// The reads so far (thread-safe).
  ReadStats read_stats() const;

 private:
  std::string path_;
  H5Id file_;
  H5Id train_pixels_;
  H5Id eval_pixels_;
  std::vector<std::string> label_names_;
  SplitIndex train_;
  SplitIndex eval_;
  std::uint64_t seed_ = 0;
  double train_fraction_ = 0.0;
  int max_side_ = 0;
  std::string tool_version_;
  std::string store_id_;
  std::string layout_;
  std::string split_made_;
  std::vector<NameReason> skipped_;
  std::vector<NameReason> warnings_;
  /// Where each pixel chunk of a split lies in the file, for reads outside the HDF5 lock
  /// (mapped_chunks.hpp); made on a split's first read, nullptr when it cannot be read so.
  const MappedChunks* direct_reads(SplitKind kind) const;
  mutable std::once_flag direct_once_[2];
  mutable std::unique_ptr<MappedChunks> direct_[2];
  mutable std::atomic<std::int64_t> reads_{0};
  mutable std::atomic<std::int64_t> direct_reads_{0};
  mutable std::atomic<std::int64_t> verified_chunks_{0};
  mutable std::atomic<std::int64_t> verified_ahead_{0};
  mutable std::atomic<std::int64_t> damaged_chunks_{0};
  mutable std::atomic<std::int64_t> read_bytes_{0};
  mutable std::atomic<std::int64_t> lock_held_ns_{0};
  mutable std::atomic<std::int64_t> lock_wait_ns_{0};
  mutable std::atomic<std::int64_t> lock_cpu_ns_{0};
};

}  // namespace pets::data
