#include "pets/data/preprocess_candidates.hpp"

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <utility>

#include "pets/comm/program.hpp"
#include "pets/data/labels.hpp"
#include "pets/data/list_file.hpp"
#include "pets/util/error.hpp"
#include "pets/util/number_text.hpp"

namespace fs = std::filesystem;

namespace pets::data {

namespace {

/// What makes `o` unusable (a bad value, a missing --images folder, an --out that must not be
/// written), or "".
std::string check_options(const PreprocessOptions& o) {
  std::error_code ec;
  if (o.out.empty()) return "--out is required";
  if (o.images_dir.empty() == o.list_file.empty())
    return o.images_dir.empty() ? "give --images DIR (a folder of images) or --list FILE.csv"
                                : "give --images or --list, not both";
  if (!o.list_file.empty() && o.layout != Layout::kAuto)
    return std::string("--layout ") + layout_name(o.layout) +
           " is for --images: a --list names each image's class itself";
  if (!(o.train_fraction > 0.0 && o.train_fraction < 1.0))
    return "--train-fraction must be between 0 and 1 (exclusive): both splits need images, got " +
           format_number(o.train_fraction);
  if (o.max_side < 0 || (o.max_side > 0 && o.max_side < kMinMaxSide))
    return "--max-side must be 0 (keep the size) or at least " + std::to_string(kMinMaxSide) +
           ", got " + std::to_string(o.max_side);
  if (o.max_memory == 0) return "--max-memory must be positive";
  if (!o.list_file.empty()) {
    if (fs::is_directory(o.list_file, ec)) return "--list " + o.list_file + " is a folder";
    if (!fs::is_regular_file(o.list_file, ec)) return "--list " + o.list_file + " is not a file";
  } else if (!fs::is_directory(o.images_dir, ec)) {
    return "--images " + o.images_dir + " is not a folder";
  }
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

namespace {

/// The fields of a packed text, each ended by '\0', read in order.
class Fields {
 public:
  explicit Fields(const std::string& text) : text_(text) {}
  bool done() const { return at_ >= text_.size(); }
  std::string next() {
    const std::size_t end = text_.find('\0', at_);
    std::string field = text_.substr(at_, end - at_);
    at_ = end + 1;
    return field;
  }

 private:
  const std::string& text_;
  std::size_t at_ = 0;
};

void put(std::string& text, const std::string& field) {
  text += field;
  text += '\0';
}

}  // namespace

Listing list_candidates(const PreprocessOptions& o, MPI_Comm comm) {
  // Packed: layout, chosen, hidden, not_images, then "c" path label split per candidate and
  // "s" path reason per skipped entry.
  const std::string packed = pets::decide_on_rank_0(
      [&] {
        const std::string problem = check_options(o);
        if (!problem.empty()) throw UsageError("pets_preprocess: " + problem);
        TreeListing tree;
        try {
          tree = o.list_file.empty() ? list_tree(o.images_dir, o.layout) : list_csv(o.list_file);
        } catch (const UsageError&) {
          throw;
        } catch (const std::exception& e) {
          throw UsageError(std::string("pets_preprocess: cannot list ") + o.source() + ": " +
                           e.what());
        }
        std::string text;
        put(text, layout_name(tree.layout));
        put(text, tree.chosen ? "1" : "0");
        put(text, std::to_string(tree.hidden));
        put(text, std::to_string(tree.not_images));
        for (const TreeCandidate& c : tree.candidates) {
          put(text, "c");
          put(text, c.path);
          put(text, c.label);
          put(text, std::string(1, c.split == 0 ? '-' : c.split));
        }
        for (const NameReason& s : tree.skips) {
          put(text, "s");
          put(text, s.first);
          put(text, s.second);
        }
        return text;
      },
      comm);
  Listing listing;
  CandidateInfo& info = listing.info;
  std::vector<std::string> labels;
  std::vector<char> splits;
  Fields f(packed);
  listing.layout = parse_layout(f.next());
  listing.chosen = f.next() == "1";
  listing.hidden = std::stoll(f.next());
  listing.not_images = std::stoll(f.next());
  while (!f.done()) {
    const std::string kind = f.next();
    std::string name = f.next();
    if (kind == "c") {
      labels.push_back(f.next());
      splits.push_back(f.next()[0]);
      info.names.push_back(std::move(name));
    } else {
      listing.skips.emplace_back(std::move(name), f.next());
    }
  }
  if (std::any_of(splits.begin(), splits.end(), [](char s) { return s != '-'; }))
    for (const char s : splits) listing.given_train.push_back(s == 't' ? 1 : 0);
  info.label_table = sorted_labels(labels);
  info.label.reserve(labels.size());
  for (const auto& l : labels) info.label.push_back(label_id(info.label_table, l));
  info.height.assign(info.names.size(), 0);
  info.width.assign(info.names.size(), 0);
  for (const auto& c : info.names) listing.name_length = std::max(listing.name_length, c.size());
  return listing;
}

}  // namespace pets::data
