#pragma once
/// \file
/// pets_preprocess as a library call. The sorted candidate files are decoded in rounds: each
/// round takes the next window of candidates, every rank decodes a contiguous share of it, the
/// ranks agree on what each share produced (one MPI_Allgatherv of the decoded sizes) and append
/// the round's pixels to the store with one collective write per split. A rank therefore holds
/// at most one round of decoded pixels, whatever the size of the set, and the store's layout
/// (candidate order) does not depend on the number of ranks or on the round size. The file is
/// written under a temporary name and renamed only when complete.

#include <mpi.h>

#include <cstdint>
#include <string>
#include <vector>

#include "pets/data/labels.hpp"
#include "pets/data/layout.hpp"
#include "pets/data/store_reader.hpp"

namespace pets::data {

/// The smallest --max-side other than 0 (keep): smaller images hold a few colours, not a pet.
inline constexpr int kMinMaxSide = 8;

/// The pets_preprocess command line.
struct PreprocessOptions {
  std::string images_dir;  ///< the image folder (--images), or
  std::string list_file;   ///< the CSV list of images and labels (--list, list_file.hpp)
  std::string out;
  Layout layout = Layout::kAuto;  ///< how images_dir is laid out (layout.hpp)
  std::uint64_t seed = 42;      ///< of the split, except in the split layout (which keeps its own)
  double train_fraction = 0.8;  ///< in (0, 1): both splits must be able to hold images
  /// How the seeded split cuts the files (labels.hpp); the split layout keeps its own.
  SplitMode split_mode = SplitMode::kRandom;
  bool split_mode_given = false;           ///< --split-mode was on the command line
  int max_side = 512;                      ///< 0 keeps decoded sizes; else at least kMinMaxSide
  std::uint64_t max_pixels = 100'000'000;  ///< decompression-bomb limit, from the header
  /// Decoded pixels one rank holds at once (one round): a round takes max_memory divided by the
  /// largest decoded size an image can have (3 * min(max_side^2, max_pixels)) images per rank,
  /// at least one.
  std::uint64_t max_memory = std::uint64_t{1} << 30;
  bool overwrite = false;  ///< replace an existing --out (refused otherwise)

  /// What the images come from, as messages name it: the folder or the list file.
  const std::string& source() const { return list_file.empty() ? images_dir : list_file; }
  /// The folder the candidates' paths are relative to: the image folder, or the list's folder.
  std::string image_root() const;
};

/// What a run did (identical on every rank).
struct PreprocessSummary {
  std::string layout;  ///< the layout read, "folders (auto)" when --layout auto chose it
  std::string split;   ///< how the split was made (the store's `split` attribute)
  std::int64_t stored = 0;
  std::int64_t train = 0;
  std::int64_t eval = 0;
  std::int64_t labels = 0;
  std::int64_t rounds = 0;  ///< decode-and-write rounds
  std::vector<NameReason> skipped;
  std::vector<NameReason> warnings;
  std::int64_t hidden = 0;      ///< hidden files and folders, counted only
  std::int64_t not_images = 0;  ///< files without an image extension, counted only
  /// Classes that ended with no training or no evaluation image (class_coverage_warnings).
  std::vector<std::string> class_warnings;
  /// Temporary files of earlier runs removed at the start (rank 0, --out's folder): those of
  /// this host whose writer no longer runs (pets::remove_stale_temp_files); `kept_temps` the
  /// others it found, each with the reason (another host's, or of the older name without one).
  std::vector<std::string> removed_temps;
  std::vector<std::string> kept_temps;
  /// Each rank's peak resident memory (VmHWM) at the end of the run, in bytes (0: unknown).
  std::vector<std::uint64_t> peak_resident;
  /// "layout names; N stored, M skipped: name (reason), ...; H not read (...); T train, E eval,
  /// L labels; K decoded with warnings: ...", the "not read" and warning parts only when there
  /// are some; "E eval (stratified)" for a stratified split.
  std::string line() const;
};

/// Runs the whole preprocessing on `comm` (collective). Bad options, a missing folder, an
/// unusable output path, no usable image or a split left empty throw pets::UsageError on every
/// rank; no file is ever left at options.out unless the run succeeded. The file is written as
/// `<out>.tmp.<host>.<pid>` (rank 0's; pets::atomic_temp_path) and renamed at the end.
PreprocessSummary run_preprocess(const PreprocessOptions& options, MPI_Comm comm);

/// The kind of a skip reason, without its details: the text before the first ": " or " ("
/// ("truncated JPEG: premature end" -> "truncated JPEG").
std::string reason_kind(const std::string& reason);

/// "4 entries skipped (2 directory, 1 truncated JPEG, 1 empty file)": the skipped entries
/// counted by reason_kind, most frequent first (ties in byte order).
std::string skip_reasons_text(const std::vector<NameReason>& skipped);

/// "3 not read (2 hidden, 1 without an image extension)", or "" when both counts are 0.
std::string not_read_text(std::int64_t hidden, std::int64_t not_images);

/// A byte count as a user types it: digits with an optional K, M or G suffix (powers of 1024),
/// e.g. "1G", "512M", "65536". Throws pets::UsageError naming `option` for anything else, for
/// 0 and for values that overflow.
std::uint64_t parse_byte_size(const std::string& text, const std::string& option);

/// This process's peak resident memory (VmHWM of /proc/self/status) in bytes; 0 when unknown.
std::uint64_t peak_resident_bytes();

}  // namespace pets::data
