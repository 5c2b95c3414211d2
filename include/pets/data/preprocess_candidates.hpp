#pragma once
/// \file
/// pets_preprocess's candidates: the image files of --images that it decodes, listed once on
/// rank 0 and shared with every rank, and what every rank learns about each of them as the run
/// goes on (its label, its split, its decoded size). run_preprocess (preprocess.hpp) uses them.

#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "pets/data/preprocess.hpp"

namespace pets::data {

/// What every rank knows about every candidate once its round is done.
struct CandidateInfo {
  std::vector<std::string> names;        ///< sorted file names
  std::vector<std::string> label_table;  ///< the distinct labels of all names, sorted
  std::vector<std::int32_t> label;       ///< index into label_table of each name
  std::vector<char> train;  ///< the split, decided on the candidate list before decoding
  std::vector<std::int32_t> height, width;  ///< of the stored image; 0 when skipped
  std::uint64_t bytes(std::size_t i) const {
    return static_cast<std::uint64_t>(height[i]) * static_cast<std::uint64_t>(width[i]) * 3;
  }
  bool stored(std::size_t i) const { return height[i] > 0; }
};

/// The candidate files and what the listing skipped, the same on every rank.
struct Listing {
  CandidateInfo info;              ///< names and labels set; no split and no sizes yet
  std::vector<NameReason> skips;   ///< entries that are not candidates, with the reason
  std::size_t name_length = 1;     ///< the longest candidate name
  Layout layout = Layout::kNames;  ///< the layout read
  bool chosen = false;             ///< by --layout auto
  /// Per candidate, 1 for training and 0 for evaluation, as the split layout's folders or a
  /// list's split column give it; empty: the seeded split decides.
  std::vector<char> given_train;
  std::int64_t hidden = 0, not_images = 0;  ///< entries only counted (TreeListing)
};

/// Checks the options and lists the folder on rank 0 (list_tree: one view of the file system for
/// all) and shares the verdict, so that a problem is a pets::UsageError on every rank, and the
/// listing, as one packed text (a few '\0'-ended fields per entry): a few bytes per file on every
/// rank. Collective over `comm`.
Listing list_candidates(const PreprocessOptions& options, MPI_Comm comm);

}  // namespace pets::data
