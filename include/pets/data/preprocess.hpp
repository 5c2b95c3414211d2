#pragma once
/// \file
/// pets_preprocess as a library call: every rank decodes a contiguous block of the sorted
/// candidate files, the ranks agree on sizes with MPI (MPI_Exscan of byte counts gives each
/// rank its offsets) and write one HDF5 store collectively through the MPI-IO driver. The file
/// is written under a temporary name and renamed only when complete.

#include <mpi.h>

#include <cstdint>
#include <string>
#include <vector>

#include "pets/data/h5store.hpp"

namespace pets::data {

/// The pets_preprocess command line.
struct PreprocessOptions {
  std::string images_dir;
  std::string out;
  std::uint64_t seed = 42;
  double train_fraction = 0.8;
  int max_side = 512;                     ///< 0 keeps decoded sizes
  std::uint64_t max_pixels = 100'000'000; ///< decompression-bomb limit, from the header
};

/// What a run did (identical on every rank).
struct PreprocessSummary {
  std::int64_t stored = 0;
  std::int64_t train = 0;
  std::int64_t eval = 0;
  std::int64_t labels = 0;
  std::vector<NameReason> skipped;
  std::vector<NameReason> warnings;
  /// "N stored, M skipped: name (reason), ...; T train, E eval, L labels; K with warnings: ...".
  std::string line() const;
};

/// Runs the whole preprocessing on `comm` (collective). Bad options, a missing folder, an
/// unusable output path or no usable image throw pets::UsageError on every rank; no file is
/// ever left at options.out unless the run succeeded.
PreprocessSummary run_preprocess(const PreprocessOptions& options, MPI_Comm comm);

/// The sorted entries of a folder with a skip reason for those that are not candidates
/// ("directory", "not a .jpg name", "name does not match ...") and "" for candidates.
std::vector<NameReason> classify_folder(const std::string& dir);

}  // namespace pets::data
