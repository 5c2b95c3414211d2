#pragma once
/// \file
/// The ways an image folder can be laid out for pets_preprocess, and the listing of one: which
/// files are decoded (with their class and, for the split layout, their split), which entries are
/// skipped and named, and which are only counted (hidden entries and files without an image
/// extension).
///   names    DIR/LABEL_NUMBER.jpg, the label `^(.*)_\d+\.EXT$` of the name (Oxford-IIIT Pet)
///   folders  DIR/CLASS/..., images at any depth below a class folder (torchvision's ImageFolder)
///   split    DIR/train/CLASS/... and DIR/val/CLASS/... (or valid, validation, test)
/// Symbolic links are followed, each folder read once (a link to a folder already read is
/// skipped), so a link loop ends.

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "pets/data/store_reader.hpp"

namespace pets::data {

/// kList is no folder layout: the images a --list file names (list_file.hpp).
enum class Layout { kAuto, kNames, kFolders, kSplit, kList };

/// "auto", "names", "folders", "split" or "list".
const char* layout_name(Layout layout);

/// The layout of that name ("list" too); throws pets::UsageError naming --layout for anything
/// else.
Layout parse_layout(const std::string& text);

/// The names the split layout's evaluation folder may have, in the order they are looked for.
inline constexpr std::array<std::string_view, 4> kEvalFolders = {"val", "valid", "validation",
                                                                 "test"};

/// A file to decode.
struct TreeCandidate {
  std::string path;   ///< relative to the listed folder, '/'-separated
  std::string label;  ///< its class: the label of its name (names) or its class folder's name
  char split = 0;     ///< 't' or 'e' where the split layout or a list gives it; 0: the seeded split
};

/// What list_tree found.
struct TreeListing {
  Layout layout = Layout::kNames;         ///< the layout read (never kAuto)
  bool chosen = false;                    ///< chosen by kAuto
  std::vector<TreeCandidate> candidates;  ///< in store order: by path, folders' entries sorted
  std::vector<NameReason> skips;          ///< skipped entries named with the reason
  std::int64_t hidden = 0;                ///< hidden files and folders (a leading '.'), not read
  std::int64_t not_images = 0;            ///< files without an image extension, not read
};

/// Lists `dir` as `layout` (kAuto: chooses one from what is there). Throws pets::UsageError for a
/// tree kAuto cannot read unambiguously (image files beside class folders, two evaluation
/// folders, an empty class folder), naming the paths and the --layout to give; for a folder that
/// cannot be read, a split layout without train/ or an evaluation folder, a class in the
/// evaluation folder only, and a class folder name that is not UTF-8.
TreeListing list_tree(const std::string& dir, Layout layout);

/// True when `text` is valid UTF-8 (no overlong forms, surrogates or code points past U+10FFFF).
bool is_utf8(std::string_view text);

}  // namespace pets::data
