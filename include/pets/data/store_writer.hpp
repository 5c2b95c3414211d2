#pragma once
/// \file
/// The writing half of the preprocessed image store (the reading half: store_reader.hpp; the
/// layout: store_schema.hpp): one file written collectively through MPI-IO, its pixels appended
/// a round at a time, then each split's per-image rows, the root attributes and the two tables.
/// data::run_preprocess (preprocess.hpp) drives it.

#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "pets/data/h5.hpp"
#include "pets/data/store_reader.hpp"

namespace pets::data {

/// A new store identity (store::kStoreId): 128 bits from std::random_device, 32 hex digits.
std::string new_store_id();

/// The root attributes of a store but schema_version, which is always store::kVersion. The
/// same on every rank.
struct StoreAttributes {
  std::vector<std::string> label_names;
  std::uint64_t seed = 0;
  double train_fraction = 0.0;
  std::int32_t max_side = 0;
  std::string layout;  ///< the image folder's layout (layout_name)
  std::string split;   ///< how the split was made: "random", "stratified" or "given"
  std::string tool_version;
  std::string store_id;
};

/// This rank's share of one split's per-image rows: rows [first, first + labels.size()) of
/// `count`.
struct SplitRows {
  std::uint64_t count = 0;  ///< images in the split (the same on every rank)
  std::uint64_t first = 0;  ///< this rank's first row
  std::vector<std::uint64_t> offsets;
  std::vector<std::int32_t> shapes;  ///< (height, width, 3) per row
  std::vector<std::int32_t> labels;
  std::vector<std::string> names;
  std::size_t name_length = 1;  ///< bytes of the names' fixed-length strings (every rank's)
};

/// Writes one store file. Every call is collective over the communicator it was made with, in
/// the same order on every rank.
class StoreWriter {
 public:
  /// Creates (or truncates) `path` in the store's format (store::set_store_format), with both
  /// split groups and their empty pixels datasets.
  StoreWriter(const std::string& path, MPI_Comm comm);
  StoreWriter(const StoreWriter&) = delete;
  StoreWriter& operator=(const StoreWriter&) = delete;

  /// Grows the pixels of `kind` by `round_bytes` (the same on every rank) and writes this rank's
  /// `bytes` bytes from `data` at `offset` from the start of the round.
  void append_pixels(SplitKind kind, std::uint64_t round_bytes, std::uint64_t offset,
                     const std::uint8_t* data, std::size_t bytes);

  /// Writes the offsets, shapes, labels and names of `kind`'s images (each rank its share), then
  /// closes the split's group.
  void write_split_rows(SplitKind kind, const SplitRows& rows);

  /// Writes the root attributes.
  void write_attributes(const StoreAttributes& attributes);

  /// Writes the (name, reason) tables of skipped files and of decoder warnings: rank 0's rows
  /// (the other ranks pass the same rows, which they do not write).
  void write_tables(const std::vector<NameReason>& skipped,
                    const std::vector<NameReason>& warnings);

  /// Closes the file; throws pets::Error when HDF5 cannot finish it.
  void close();

 private:
  struct Split {
    H5Id group;
    H5Id pixels;
    std::uint64_t written = 0;
  };
  void write_table(const char* name, const std::vector<NameReason>& rows);

  int rank_ = 0;
  H5Id file_;
  H5Id dxpl_;
  Split splits_[2];
};

}  // namespace pets::data
