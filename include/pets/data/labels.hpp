#pragma once
/// \file
/// File names to labels, as the Python pipeline does: the label is group 1 of
/// `^(.*)_\d+\.jpg$` on the base name, where the extension is any of the image extensions
/// (.jpg .jpeg .png .gif .webp .bmp .ppm .pgm .tif .tiff: torchvision's ImageFolder's and GIF) in
/// any letter case.

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace pets::data {

/// The image extensions (without the dot, lower case): torchvision's ImageFolder's and GIF.
inline constexpr std::array<std::string_view, 10> kImageExtensions = {
    "jpg", "jpeg", "png", "gif", "webp", "bmp", "ppm", "pgm", "tif", "tiff"};

/// The pattern a names-layout file name must match, as the messages show it:
/// "^(.*)_\d+\.(jpg|jpeg|...)$ (any letter case)".
std::string name_pattern();

/// True when the name ends in one of those image extensions in any letter case (".JPG", ".Jpeg");
/// the decoder reads the content, whatever the extension says.
bool has_image_extension(std::string_view name);

/// The label of a base file name, or nothing when it does not match name_pattern().
/// "great_pyrenees_12.jpg" -> "great_pyrenees"; "a_1_2.jpg" -> "a_1" (greedy group);
/// "Persian_3.JPG" -> "Persian".
std::optional<std::string> label_from_filename(std::string_view base_name);

/// The distinct labels in byte order (Python's `sorted` on these ASCII names); a label's id is
/// its index here.
std::vector<std::string> sorted_labels(const std::vector<std::string>& labels);

/// Index of `label` in `sorted` (a sorted_labels result); throws when absent.
std::int32_t label_id(const std::vector<std::string>& sorted, const std::string& label);

/// Which images go to training and which to evaluation.
struct Split {
  std::vector<std::int64_t> train;  ///< indices into the usable images, ascending
  std::vector<std::int64_t> eval;   ///< the rest, ascending; disjoint from train
};

/// Seeded split of n usable images: a permutation of 0..n-1, the first floor(n * train_fraction)
/// entries are train, the rest eval. Depends only on (n, seed, train_fraction). Each part is
/// returned sorted so that storage order follows the (sorted) file names.
Split split_indices(std::int64_t n, std::uint64_t seed, double train_fraction);

/// How the seeded split cuts the files (--split-mode).
///   random      one permutation of all the files, the first floor(n * fraction) to training (the
///               tutorial's split)
///   stratified  the same cut within every class, each with a permutation of its own: a class of
///               two images or more keeps at least one on each side, one of a single image goes to
///               training
enum class SplitMode { kRandom, kStratified };

/// "random" or "stratified".
const char* split_mode_name(SplitMode mode);

/// The mode of that name; throws pets::UsageError naming --split-mode for anything else.
SplitMode parse_split_mode(const std::string& text);

/// Seeded stratified split of the images whose class ids are `labels` (index i is image i):
/// within each class c of n_c images, a permutation of them seeded by (seed, c) sends the first
/// k_c = floor(n_c * train_fraction), held in [1, n_c - 1] when n_c >= 2 (n_c when n_c == 1), to
/// training. Depends only on (labels, seed, train_fraction); each part is sorted.
Split stratified_split_indices(const std::vector<std::int32_t>& labels, std::uint64_t seed,
                               double train_fraction);

/// The classes of `label_names` with no image in a split, one warning per split that misses
/// some ("2 classes have no evaluation image: Bengal, pug (...)"); empty when every class is in
/// both. The split is a seeded permutation of the files, not stratified by class (as the
/// tutorial's), so a small class can end up entirely on one side; each warning ends with
/// `why` in brackets.
inline constexpr const char* kSeededSplitNote =
    "the split is a seeded permutation of the files, not stratified by class";
/// Why a stratified split can leave a class on one side.
inline constexpr const char* kStratifiedSplitNote =
    "the split is stratified by class over the files before decoding: a class of one file goes "
    "to training, and a skipped file can leave its class on one side";
/// Why a split kept as the images came (the split layout's folders, a list's split column) can.
inline constexpr const char* kGivenSplitNote = "the split is kept as given";

/// How a store's split was made, as its `split` attribute records it: "random" or "stratified"
/// (split_mode_name), or "given" (kept from the split layout's folders or a list's split column).
inline constexpr const char* kGivenSplit = "given";

/// The note for class_coverage_warnings of a store whose `split` attribute is `split` (""
/// for stores written before the attribute: their split was random or given, and the random
/// one's note is used).
const char* split_note(const std::string& split);
std::vector<std::string> class_coverage_warnings(const std::vector<std::string>& label_names,
                                                 const std::vector<std::int32_t>& train_labels,
                                                 const std::vector<std::int32_t>& eval_labels,
                                                 const std::string& why = kSeededSplitNote);

}  // namespace pets::data
