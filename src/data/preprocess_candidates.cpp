#include "pets/data/preprocess_candidates.hpp"

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <utility>

#include "pets/comm/program.hpp"
#include "pets/data/labels.hpp"
#include "pets/util/error.hpp"
#include "pets/util/number_text.hpp"

namespace fs = std::filesystem;

namespace pets::data {

std::vector<NameReason> classify_folder(const std::string& dir) {
  std::vector<NameReason> out;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    std::error_code ec;
    std::string reason;
    if (e.is_directory(ec)) {
      reason = "directory (sub-folders are not searched)";
    } else if (!has_jpg_extension(name)) {
      reason = "not a .jpg name";
    } else if (!label_from_filename(name)) {
      reason = "name does not match ^(.*)_\\d+\\.jpg$";
    }
    out.emplace_back(name, reason);
  }
  std::sort(out.begin(), out.end());
  return out;
}

namespace {

/// What makes `o` unusable (a bad value, a missing --images folder, an --out that must not be
/// written), or "".
std::string check_options(const PreprocessOptions& o) {
  std::error_code ec;
  if (o.images_dir.empty() || o.out.empty()) return "--images and --out are required";
  if (!(o.train_fraction > 0.0 && o.train_fraction < 1.0))
    return "--train-fraction must be between 0 and 1 (exclusive): both splits need images, got " +
           format_number(o.train_fraction);
  if (o.max_side < 0 || (o.max_side > 0 && o.max_side < kMinMaxSide))
    return "--max-side must be 0 (keep the size) or at least " + std::to_string(kMinMaxSide) +
           ", got " + std::to_string(o.max_side);
  if (o.max_memory == 0) return "--max-memory must be positive";
  if (!fs::is_directory(o.images_dir, ec)) return "--images " + o.images_dir + " is not a folder";
  const fs::path parent = fs::absolute(fs::path(o.out), ec).parent_path();
  if (!fs::is_directory(parent, ec)) return "--out: folder " + parent.string() + " does not exist";
  if (fs::is_directory(o.out, ec)) return "--out " + o.out + " is a folder";
  if (access(parent.c_str(), W_OK) != 0)
    return "--out: folder " + parent.string() + " is not writable";
  // The store is written beside --out and renamed over it: over a link it would replace the
  // link, not the file it names.
  const fs::file_status there = fs::symlink_status(o.out, ec);
  if (fs::is_symlink(there)) return "--out " + o.out + " is a symbolic link; name the file itself";
  if (fs::exists(there) && !fs::is_regular_file(there))
    return "--out " + o.out + " exists and is not a regular file";
  if (fs::exists(there) && !o.overwrite)
    return "--out " + o.out +
           " exists; replace it with --overwrite (the new store gets a new store_id, so runs "
           "trained on this one cannot resume on it), or choose another --out";
  return "";
}

}  // namespace

Listing list_candidates(const PreprocessOptions& o, MPI_Comm comm) {
  const std::string packed = pets::decide_on_rank_0(
      [&] {
        const std::string problem = check_options(o);
        if (!problem.empty()) throw UsageError("pets_preprocess: " + problem);
        std::vector<NameReason> entries;
        try {
          entries = classify_folder(o.images_dir);
        } catch (const std::exception& e) {
          throw UsageError(std::string("pets_preprocess: cannot list ") + o.images_dir + ": " +
                           e.what());
        }
        std::string text;
        for (const auto& e : entries) text += e.first + '\0' + e.second + '\0';
        return text;
      },
      comm);
  Listing listing;
  CandidateInfo& info = listing.info;
  std::vector<std::string> labels;
  for (std::size_t at = 0; at < packed.size();) {
    const std::size_t name_end = packed.find('\0', at),
                      reason_end = packed.find('\0', name_end + 1);
    std::string name = packed.substr(at, name_end - at);
    if (reason_end == name_end + 1) {
      labels.push_back(*label_from_filename(name));
      info.names.push_back(std::move(name));
    } else {
      listing.skips.emplace_back(std::move(name),
                                 packed.substr(name_end + 1, reason_end - name_end - 1));
    }
    at = reason_end + 1;
  }
  info.label_table = sorted_labels(labels);
  info.label.reserve(labels.size());
  for (const auto& l : labels) info.label.push_back(label_id(info.label_table, l));
  info.height.assign(info.names.size(), 0);
  info.width.assign(info.names.size(), 0);
  for (const auto& c : info.names) listing.name_length = std::max(listing.name_length, c.size());
  return listing;
}

}  // namespace pets::data
