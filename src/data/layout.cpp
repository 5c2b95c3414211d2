#include "pets/data/layout.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <optional>
#include <set>
#include <utility>

#include "pets/data/labels.hpp"
#include "pets/util/error.hpp"

namespace fs = std::filesystem;

namespace pets::data {

const char* layout_name(Layout layout) {
  switch (layout) {
    case Layout::kAuto:
      return "auto";
    case Layout::kNames:
      return "names";
    case Layout::kFolders:
      return "folders";
    case Layout::kSplit:
      return "split";
    case Layout::kList:
      return "list";
  }
  return "?";
}

Layout parse_layout(const std::string& text) {
  for (Layout l : {Layout::kAuto, Layout::kNames, Layout::kFolders, Layout::kSplit, Layout::kList})
    if (text == layout_name(l)) return l;
  throw UsageError("pets_preprocess: --layout must be auto, names, folders or split, got '" + text +
                   "'");
}

bool is_utf8(std::string_view s) {
  std::size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      ++i;
      continue;
    }
    // n continuation bytes follow the lead byte, which holds the code point's first bits.
    const std::size_t n = (c & 0xE0) == 0xC0   ? 1
                          : (c & 0xF0) == 0xE0 ? 2
                          : (c & 0xF8) == 0xF0 ? 3
                                               : 0;
    if (n == 0) return false;
    std::uint32_t cp = c & (0x3Fu >> n);
    if (i + n >= s.size()) return false;
    for (std::size_t k = 1; k <= n; ++k) {
      const auto d = static_cast<unsigned char>(s[i + k]);
      if ((d & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (d & 0x3F);
    }
    const std::uint32_t least[4] = {0, 0x80, 0x800, 0x10000};
    if (cp < least[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    i += n + 1;
  }
  return true;
}

namespace {

bool is_hidden(const std::string& name) { return !name.empty() && name[0] == '.'; }

/// One entry of a folder; `folder` follows links (a broken link or a link loop is no folder).
struct Entry {
  std::string name;
  bool folder = false;
};

/// The entries of `dir`, sorted by name (byte order); a folder that cannot be read is bad input.
std::vector<Entry> read_folder(const fs::path& dir) {
  std::vector<Entry> out;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    std::error_code ignored;
    out.push_back({it->path().filename().string(), it->is_directory(ignored)});
  }
  if (ec)
    throw UsageError("pets_preprocess: cannot read the folder " + dir.string() + ": " +
                     ec.message());
  std::sort(out.begin(), out.end(), [](const Entry& a, const Entry& b) { return a.name < b.name; });
  return out;
}

/// Up to five names, then how many more.
std::string some(const std::vector<std::string>& names, const char* suffix = "") {
  std::string s;
  for (std::size_t i = 0; i < names.size() && i < 5; ++i) s += (i ? ", " : "") + names[i] + suffix;
  if (names.size() > 5) s += ", and " + std::to_string(names.size() - 5) + " more";
  return s;
}

/// Lists one tree; each folder (identified by device and inode) is read once.
class Walker {
 public:
  Walker(std::string dir, TreeListing& out) : dir_(std::move(dir)), out_(out) { enter(""); }

  /// True the first time the folder `rel` (relative to the listed folder) is seen.
  bool enter(const std::string& rel) {
    struct stat st {};
    if (::stat(full(rel).c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) return false;
    return seen_.insert({st.st_dev, st.st_ino}).second;
  }

  std::string full(const std::string& rel) const {
    return rel.empty() ? dir_ : (fs::path(dir_) / rel).string();
  }

  std::vector<Entry> read(const std::string& rel) const { return read_folder(full(rel)); }

  /// Adds the images found at any depth below the folder `rel` (entered already) as candidates
  /// of `label`; returns how many.
  std::int64_t walk(const std::string& rel, const std::string& label, char split) {
    std::int64_t found = 0;
    for (const Entry& e : read(rel)) {
      const std::string path = rel + "/" + e.name;
      if (is_hidden(e.name)) {
        ++out_.hidden;
      } else if (e.folder) {
        if (enter(path))
          found += walk(path, label, split);
        else
          out_.skips.emplace_back(path, "folder already read (a symbolic link to it)");
      } else if (!has_image_extension(e.name)) {
        ++out_.not_images;
      } else {
        out_.candidates.push_back({path, label, split});
        ++found;
      }
    }
    return found;
  }

  /// The class folders of `rel` ("" or "train"...): every sub-folder a class; image files there
  /// skipped as outside a class. Returns the classes that hold images and, in `empty`, those
  /// that hold none (skipped, named).
  std::vector<std::string> classes(const std::string& rel, char split,
                                   std::vector<std::string>& empty) {
    std::vector<std::string> found;
    for (const Entry& e : read(rel)) {
      const std::string path = rel.empty() ? e.name : rel + "/" + e.name;
      if (is_hidden(e.name)) {
        ++out_.hidden;
      } else if (!e.folder) {
        if (has_image_extension(e.name))
          out_.skips.emplace_back(path, "image file outside the class folders");
        else
          ++out_.not_images;
      } else if (!enter(path)) {
        out_.skips.emplace_back(path, "folder already read (a symbolic link to it)");
      } else {
        if (!is_utf8(e.name))
          throw UsageError("pets_preprocess: the class folder " + full(path) +
                           " is not named in UTF-8: rename it (its name becomes the class name)");
        if (walk(path, e.name, split) > 0) {
          found.push_back(e.name);
        } else {
          empty.push_back(path + "/");
          out_.skips.emplace_back(path, "folder holds no image file (not a class)");
        }
      }
    }
    return found;
  }

 private:
  std::string dir_;
  TreeListing& out_;
  std::set<std::pair<dev_t, ino_t>> seen_;
};

void list_names(const std::string& dir, TreeListing& out) {
  for (const Entry& e : read_folder(dir)) {
    if (is_hidden(e.name)) {
      ++out.hidden;
    } else if (e.folder) {
      out.skips.emplace_back(e.name, "directory (sub-folders are not searched)");
    } else if (!has_image_extension(e.name)) {
      ++out.not_images;
    } else if (const auto label = label_from_filename(e.name)) {
      // The label becomes a class name, which the exported model's metadata holds as JSON.
      if (is_utf8(*label))
        out.candidates.push_back({e.name, *label, 0});
      else
        out.skips.emplace_back(e.name, "name is not UTF-8 (its label would be a class name)");
    } else {
      out.skips.emplace_back(e.name, "name does not match " + name_pattern());
    }
  }
}

/// The evaluation folders among `folders` (sorted names), in kEvalFolders' order.
std::vector<std::string> eval_folders(const std::vector<std::string>& folders) {
  std::vector<std::string> found;
  for (std::string_view name : kEvalFolders)
    if (std::binary_search(folders.begin(), folders.end(), std::string(name)))
      found.emplace_back(name);
  return found;
}

void list_split(const std::string& dir, const std::vector<Entry>& top,
                const std::vector<std::string>& folders, Walker& walker, TreeListing& out,
                std::vector<std::string>& empty) {
  const std::vector<std::string> evals = eval_folders(folders);
  const bool has_train = std::binary_search(folders.begin(), folders.end(), std::string("train"));
  if (!has_train || evals.empty())
    throw UsageError("pets_preprocess: --layout split: " + dir +
                     " needs a train/ folder and a val/ (or valid/, validation/, test/) folder "
                     "beside it, each with one folder per class; it has " +
                     (folders.empty() ? std::string("no folder") : some(folders, "/")));
  const std::string& eval = evals.front();
  for (const Entry& e : top) {
    if (is_hidden(e.name)) {
      ++out.hidden;
    } else if (!e.folder) {
      if (has_image_extension(e.name))
        out.skips.emplace_back(e.name, "image file outside train/ and " + eval + "/");
      else
        ++out.not_images;
    } else if (e.name != "train" && e.name != eval) {
      out.skips.emplace_back(e.name,
                             "folder not read (the split layout reads train/ and " + eval + "/)");
    }
  }
  std::vector<std::string> train_classes, eval_classes;
  for (const std::string& part : {std::string("train"), eval}) {
    if (!walker.enter(part)) {
      out.skips.emplace_back(part, "folder already read (a symbolic link to it)");
      continue;
    }
    (part == "train" ? train_classes : eval_classes) =
        walker.classes(part, part == "train" ? 't' : 'e', empty);
  }
  std::sort(train_classes.begin(), train_classes.end());
  std::vector<std::string> eval_only;
  for (const std::string& c : eval_classes)
    if (!std::binary_search(train_classes.begin(), train_classes.end(), c))
      eval_only.push_back(eval + "/" + c + "/");
  if (!eval_only.empty())
    throw UsageError("pets_preprocess: " + dir + ": " + std::to_string(eval_only.size()) +
                     (eval_only.size() == 1 ? " class is" : " classes are") +
                     " in the evaluation folder only, with no training image: " + some(eval_only) +
                     "; add their images to train/ or remove them from " + eval + "/");
}

/// kAuto's choice, or a refusal naming what is unclear and the --layout that reads it.
Layout choose(const std::string& dir, const std::vector<std::string>& images,
              const std::vector<std::string>& folders) {
  const std::vector<std::string> evals = eval_folders(folders);
  const bool has_train = std::binary_search(folders.begin(), folders.end(), std::string("train"));
  if (has_train && !evals.empty()) {
    if (evals.size() > 1)
      throw UsageError("pets_preprocess: " + dir + " holds train/ and " +
                       std::to_string(evals.size()) + " evaluation folders (" + some(evals, "/") +
                       "): give --layout split to evaluate on " + evals.front() + "/ (" +
                       some(std::vector<std::string>(evals.begin() + 1, evals.end()), "/") +
                       " then not read), or move the others away");
    if (!images.empty())
      throw UsageError("pets_preprocess: " + dir + " holds image files beside train/ and " +
                       evals.front() + "/ (" + some(images) +
                       "): move them into a class folder, or give --layout split to skip them");
    return Layout::kSplit;
  }
  if (folders.empty()) return Layout::kNames;
  if (images.empty()) return Layout::kFolders;
  return Layout::kAuto;  // both: decided on the number of images below the folders
}

}  // namespace

TreeListing list_tree(const std::string& dir, Layout layout) {
  TreeListing out;
  const std::vector<Entry> top = read_folder(dir);
  std::vector<std::string> images, folders;
  for (const Entry& e : top) {
    if (is_hidden(e.name)) continue;
    if (e.folder)
      folders.push_back(e.name);
    else if (has_image_extension(e.name))
      images.push_back(e.name);
  }
  out.chosen = layout == Layout::kAuto;
  if (layout == Layout::kAuto) layout = choose(dir, images, folders);
  if (layout == Layout::kAuto) {
    // Image files beside folders: today's flat folder with a few stray sub-folders when the
    // files are most of the images, else unclear.
    TreeListing trial;
    Walker walker(dir, trial);
    std::vector<std::string> empty;
    walker.classes("", 0, empty);
    if (images.size() <= trial.candidates.size()) {
      std::vector<std::string> with_images;
      for (const std::string& f : folders)
        if (std::find(empty.begin(), empty.end(), f + "/") == empty.end()) with_images.push_back(f);
      throw UsageError("pets_preprocess: " + dir + " holds " + std::to_string(images.size()) +
                       " image file" + (images.size() == 1 ? "" : "s") + " (" + some(images) +
                       ") beside folders of images (" + some(with_images, "/") +
                       "): give --layout folders to read the folders as classes (the files then "
                       "skipped), or --layout names to read the files (the folders then not "
                       "searched)");
    }
    layout = Layout::kNames;
  }
  out.layout = layout;
  std::vector<std::string> empty;
  if (layout == Layout::kNames) {
    list_names(dir, out);
  } else {
    Walker walker(dir, out);
    if (layout == Layout::kFolders)
      walker.classes("", 0, empty);
    else
      list_split(dir, top, folders, walker, out, empty);
  }
  if (out.chosen && !empty.empty())
    throw UsageError("pets_preprocess: " + dir + ": " + std::to_string(empty.size()) +
                     (empty.size() == 1 ? " class folder holds" : " class folders hold") +
                     " no image file: " + some(empty) + "; remove " +
                     (empty.size() == 1 ? "it" : "them") + ", or give --layout " +
                     layout_name(layout) + " to leave " + (empty.size() == 1 ? "it" : "them") +
                     " out");
  std::sort(out.skips.begin(), out.skips.end());
  return out;
}

}  // namespace pets::data
