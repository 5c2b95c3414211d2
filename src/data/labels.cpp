#include "pets/data/labels.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>

#include "pets/data/rng.hpp"
#include "pets/util/error.hpp"

namespace pets::data {

namespace {

/// The length of the image extension `name` ends in (".jpeg": 5), or 0.
std::size_t image_extension_length(std::string_view name) {
  for (std::string_view ext : kImageExtensions) {
    if (name.size() < ext.size() + 1 || name[name.size() - ext.size() - 1] != '.') continue;
    const std::string_view tail = name.substr(name.size() - ext.size());
    if (std::equal(tail.begin(), tail.end(), ext.begin(),
                   [](char a, char b) { return std::tolower(static_cast<unsigned char>(a)) == b; }))
      return ext.size() + 1;
  }
  return 0;
}

}  // namespace

std::string name_pattern() {
  std::string alternatives;
  for (std::string_view ext : kImageExtensions)
    alternatives += (alternatives.empty() ? "" : "|") + std::string(ext);
  return "^(.*)_\\d+\\.(" + alternatives + ")$ (any letter case)";
}

bool has_image_extension(std::string_view name) {
  // A name that is only the extension (".jpg") is a hidden file, not an image.
  const std::size_t n = image_extension_length(name);
  return n > 0 && name.size() > n;
}

std::optional<std::string> label_from_filename(std::string_view name) {
  if (!has_image_extension(name)) return std::nullopt;
  std::string_view stem = name.substr(0, name.size() - image_extension_length(name));
  std::size_t end = stem.size();
  std::size_t digits_begin = end;
  while (digits_begin > 0 && stem[digits_begin - 1] >= '0' && stem[digits_begin - 1] <= '9')
    --digits_begin;
  if (digits_begin == end) return std::nullopt;  // no number
  if (digits_begin == 0 || stem[digits_begin - 1] != '_') return std::nullopt;
  // `(.*)` is greedy, so the group ends at the underscore before the last run of digits.
  return std::string(stem.substr(0, digits_begin - 1));
}

std::vector<std::string> sorted_labels(const std::vector<std::string>& labels) {
  std::vector<std::string> out(labels);
  std::sort(out.begin(), out.end());  // std::string compares bytes as unsigned char
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

std::int32_t label_id(const std::vector<std::string>& sorted, const std::string& label) {
  auto it = std::lower_bound(sorted.begin(), sorted.end(), label);
  PETS_CHECK(it != sorted.end() && *it == label, "unknown label '" + label + "'");
  return static_cast<std::int32_t>(it - sorted.begin());
}

Split split_indices(std::int64_t n, std::uint64_t seed, double train_fraction) {
  PETS_CHECK(n >= 0, "split_indices: negative count");
  PETS_CHECK(train_fraction >= 0.0 && train_fraction <= 1.0,
             "split_indices: train_fraction must be in [0, 1]");
  const std::vector<std::int64_t> perm = permutation(n, mix_seed({seed, 0x53504C4954ULL}));
  const auto cut = static_cast<std::int64_t>(std::floor(static_cast<double>(n) * train_fraction));
  Split split;
  split.train.assign(perm.begin(), perm.begin() + cut);
  split.eval.assign(perm.begin() + cut, perm.end());
  std::sort(split.train.begin(), split.train.end());
  std::sort(split.eval.begin(), split.eval.end());
  return split;
}

const char* split_mode_name(SplitMode mode) {
  return mode == SplitMode::kStratified ? "stratified" : "random";
}

SplitMode parse_split_mode(const std::string& text) {
  if (text == "random") return SplitMode::kRandom;
  if (text == "stratified") return SplitMode::kStratified;
  throw UsageError("pets_preprocess: --split-mode must be random or stratified, got '" + text +
                   "'");
}

const char* split_note(const std::string& split) {
  if (split == split_mode_name(SplitMode::kStratified)) return kStratifiedSplitNote;
  if (split == kGivenSplit) return kGivenSplitNote;
  return kSeededSplitNote;
}

Split stratified_split_indices(const std::vector<std::int32_t>& labels, std::uint64_t seed,
                               double train_fraction) {
  PETS_CHECK(train_fraction >= 0.0 && train_fraction <= 1.0,
             "stratified_split_indices: train_fraction must be in [0, 1]");
  std::vector<std::vector<std::int64_t>> members;
  for (std::size_t i = 0; i < labels.size(); ++i) {
    PETS_CHECK(labels[i] >= 0, "stratified_split_indices: negative label");
    const auto c = static_cast<std::size_t>(labels[i]);
    if (c >= members.size()) members.resize(c + 1);
    members[c].push_back(static_cast<std::int64_t>(i));
  }
  Split split;
  for (std::size_t c = 0; c < members.size(); ++c) {
    const auto n = static_cast<std::int64_t>(members[c].size());
    if (n == 0) continue;
    auto cut = static_cast<std::int64_t>(std::floor(static_cast<double>(n) * train_fraction));
    cut = n == 1 ? 1 : std::clamp<std::int64_t>(cut, 1, n - 1);
    const std::vector<std::int64_t> perm =
        permutation(n, mix_seed({seed, 0x5354524154ULL, static_cast<std::uint64_t>(c)}));
    for (std::int64_t k = 0; k < n; ++k)
      (k < cut ? split.train : split.eval)
          .push_back(members[c][static_cast<std::size_t>(perm[static_cast<std::size_t>(k)])]);
  }
  std::sort(split.train.begin(), split.train.end());
  std::sort(split.eval.begin(), split.eval.end());
  return split;
}

std::vector<std::string> class_coverage_warnings(const std::vector<std::string>& label_names,
                                                 const std::vector<std::int32_t>& train_labels,
                                                 const std::vector<std::int32_t>& eval_labels,
                                                 const std::string& why) {
  std::vector<std::string> out;
  const auto missing = [&](const std::vector<std::int32_t>& labels, const char* what) {
    std::vector<char> seen(label_names.size(), 0);
    for (const std::int32_t l : labels)
      if (l >= 0 && static_cast<std::size_t>(l) < seen.size())
        seen[static_cast<std::size_t>(l)] = 1;
    std::string names;
    std::size_t n = 0;
    for (std::size_t i = 0; i < seen.size(); ++i) {
      if (seen[i]) continue;
      names += (n++ ? ", " : "") + label_names[i];
    }
    if (n == 0) return;
    out.push_back(std::to_string(n) + (n == 1 ? " class has no " : " classes have no ") + what +
                  " image: " + names + " (" + why + ")");
  };
  missing(train_labels, "training");
  missing(eval_labels, "evaluation");
  return out;
}

}  // namespace pets::data
