#pragma once
/// \file
/// The store reader's fast path (store_reader.hpp): pixel chunks copied straight from the
/// memory-mapped file, outside the HDF5 lock, each chunk's Fletcher32 sum checked by our own code
/// the first time this process uses it. Only for a dataset whose chunks HDF5 stores as the data
/// followed by its sum (the Fletcher32 filter alone); every other read goes through HDF5.

#include <hdf5.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace pets::data {

/// HDF5's Fletcher32 checksum of `bytes` bytes (H5_checksum_fletcher32: big-endian 16-bit words,
/// an odd last byte as the high half of a word, both sums folded to 16 bits every 360 words and
/// at the end; sum2 in the high half), as its Fletcher32 filter appends to each chunk.
std::uint32_t fletcher32(const std::uint8_t* data, std::size_t bytes);

/// Whether a chunk as HDF5's Fletcher32 filter stores it (`data_bytes` bytes of data, then the
/// sum as a little-endian uint32) carries the right sum: the sum itself or, as HDF5 accepts for
/// files of its versions before 1.6.3, the sum with the two bytes of each 16-bit half swapped.
bool fletcher32_matches(const std::uint8_t* chunk, std::size_t data_bytes);

/// What HDF5 1.10 says when a chunk's Fletcher32 sum is wrong (H5Zfletcher32.c), so that the
/// mapped reads refuse a damaged chunk in the same words as the reads through HDF5.
inline constexpr const char* kFletcher32Error = "data error detected by Fletcher32 checksum";

/// The file mapped read-only and the file address of every chunk of one one-byte-element,
/// one-dimensional dataset (chunk k holds dataset bytes [k * chunk, (k + 1) * chunk), followed in
/// the file by its 4-byte Fletcher32 sum). A chunk HDF5 placed nowhere inside the file, or did
/// not store as that filter alone writes it, is left to HDF5's reads, which report any fault.
/// Thread-safe after open.
class MappedChunks {
 public:
  enum class Copied { kDone, kNotPlaced, kDamaged };

  /// Maps `file` (HDF5's own descriptor of the sec2 driver: the very file it validated) for
  /// `dataset`, whose first `bytes` bytes are read; nullptr when the dataset is not stored so
  /// (other layout, element size or filters, another file driver) or mapping fails. Counts the
  /// chunks it verifies and the damaged ones it finds in `verified` and `damaged`, which must
  /// outlive it. Calls HDF5: the caller holds h5::library_mutex.
  static std::unique_ptr<MappedChunks> open(hid_t file, hid_t dataset, std::uint64_t bytes,
                                            std::atomic<std::int64_t>& verified,
                                            std::atomic<std::int64_t>& damaged);
  ~MappedChunks();
  MappedChunks(const MappedChunks&) = delete;
  MappedChunks& operator=(const MappedChunks&) = delete;

  /// Copies `count` blocks of `block` bytes, `stride` apart from dataset byte `start`, checking
  /// each chunk's sum on its first use; on kNotPlaced or kDamaged dst is partly written.
  Copied copy(std::uint64_t start, std::uint64_t stride, std::uint64_t count, std::uint64_t block,
              std::uint8_t* dst) const;

  /// Checks the sums of the chunks that dataset bytes [begin, begin + bytes) lie in and that no
  /// one checked yet, in order, mapping each one's pages in first (MADV_POPULATE_READ); returns
  /// as soon as `stop` is set. Returns the chunks whose check this call was first to count.
  std::int64_t verify(std::uint64_t begin, std::uint64_t bytes,
                      const std::atomic<bool>& stop) const;

 private:
  MappedChunks() = default;
  static constexpr std::uint64_t kNoChunk = ~std::uint64_t{0};

  /// Whether chunk k's sum was checked and found right.
  bool is_checked(std::uint64_t k) const;
  /// Checks chunk k's sum now and remembers a right one; false when it is wrong. Threads that
  /// check the same chunk at once count it once: `first` (when given) says whether this one did.
  bool check(std::uint64_t k, bool* first = nullptr) const;
  /// Whether chunk k's sum is right, checking it on its first use in this process.
  bool checked(std::uint64_t k) const;

  const std::uint8_t* map_ = nullptr;
  std::size_t map_bytes_ = 0;
  std::uint64_t chunk_ = 0;
  std::vector<std::uint64_t> address_;
  /// One bit per chunk: its sum was checked and is right. Two threads may check the same chunk
  /// at once: both find the same answer.
  std::unique_ptr<std::atomic<std::uint64_t>[]> verified_bits_;
  std::atomic<std::int64_t>* verified_ = nullptr;
  std::atomic<std::int64_t>* damaged_ = nullptr;
};

}  // namespace pets::data
