#pragma once
/// \file
/// The embedded data set: pets-like synthetic images named like the Oxford-IIIT Pet folder,
/// with a class signal (colour, texture, shape that depend on the breed) under per-image noise,
/// plus, on request, the awkward files a real folder holds. Test data (pets_testdata): used by
/// pets_synth, the tests and the fuzz seeds, never by pets_train or pets_preprocess.

#include <cstdint>
#include <string>
#include <vector>

#include "pets/data/image.hpp"

namespace pets::testdata {

/// The 37 Oxford-IIIT Pet breeds with the data set's casing (12 capitalised cat breeds,
/// 25 lower-case dog breeds), in byte order.
const std::vector<std::string>& pet_breeds();

/// Options of write_synthetic_dataset (the `pets_synth` command line).
struct SynthOptions {
  std::string out_dir;
  int per_class = 0;
  int classes = 37;  ///< the first `classes` breeds of pet_breeds()
  std::uint64_t seed = 0;
  bool quirks = false;
};

/// A --quirks file and what pets_preprocess must do with it.
struct QuirkFile {
  std::string name;  ///< path relative to the output folder
  bool stored;       ///< decoded and stored (true) or skipped (false)
  /// A substring of the skip reason, or of the warning when stored; "" for a file that is
  /// skipped without being named (only counted: no image extension).
  std::string reason;
};

/// The --quirks files (for the given class count: breeds beyond it are not used).
std::vector<QuirkFile> quirk_files();

/// Renders image `index` of class `class_id` (deterministic in seed, class and index).
/// Height and width are drawn in [200, 500] unless given (> 0).
data::Image render_synthetic_image(int class_id, std::uint64_t seed, std::int64_t index,
                                   int height = 0, int width = 0);

/// Writes `<breed>_<n>.jpg` for n = 1..per_class for each class (alternating baseline and
/// progressive JPEG at several qualities) and the quirk files; creates out_dir. Returns the
/// number of files written. Throws pets::UsageError for bad options.
std::int64_t write_synthetic_dataset(const SynthOptions& options);

}  // namespace pets::testdata
