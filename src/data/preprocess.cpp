#include "pets/data/preprocess.hpp"

#include <sys/mman.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <sstream>

#include "pets/comm/mpi_comm.hpp"
#include "pets/data/decode.hpp"
#include "pets/data/labels.hpp"
#include "pets/data/preprocess_candidates.hpp"
#include "pets/data/store_writer.hpp"
#include "pets/util/atomic_file.hpp"
#include "pets/util/error.hpp"
#include "pets/util/number_text.hpp"

#ifndef PETS_VERSION
#define PETS_VERSION "unknown"
#endif

namespace fs = std::filesystem;

namespace pets::data {

std::string PreprocessOptions::image_root() const {
  if (list_file.empty()) return images_dir;
  const fs::path folder = fs::path(list_file).parent_path();
  return folder.empty() ? std::string(".") : folder.string();
}

std::string PreprocessSummary::line() const {
  std::string s = "layout " + layout + "; " + std::to_string(stored) + " stored, " +
                  std::to_string(skipped.size()) + " skipped";
  for (std::size_t i = 0; i < skipped.size(); ++i)
    s += (i ? ", " : ": ") + skipped[i].first + " (" + skipped[i].second + ")";
  // Hidden entries and other files are counted, not named: a photo folder holds many.
  if (const std::string not_read = not_read_text(hidden, not_images); !not_read.empty())
    s += "; " + not_read;
  s += "; " + std::to_string(train) + " train, " + std::to_string(eval) + " eval" +
       (split == split_mode_name(SplitMode::kStratified) ? " (stratified)" : "") + ", " +
       std::to_string(labels) + " labels";
  // Files the decoder warned about (and stored); the class warnings are lines of their own.
  if (!warnings.empty()) s += "; " + std::to_string(warnings.size()) + " decoded with warnings";
  for (std::size_t i = 0; i < warnings.size(); ++i)
    s += (i ? ", " : ": ") + warnings[i].first + " (" + warnings[i].second + ")";
  return s;
}

namespace {

int comm_rank(MPI_Comm c) {
  int r = 0;
  PETS_MPI_CHECK(MPI_Comm_rank(c, &r));
  return r;
}
int comm_size(MPI_Comm c) {
  int s = 0;
  PETS_MPI_CHECK(MPI_Comm_size(c, &s));
  return s;
}

/// Removes the temporary file unless the run committed it.
class TmpFileGuard {
 public:
  explicit TmpFileGuard(std::string path) : path_(std::move(path)) {}
  ~TmpFileGuard() {
    if (!committed_) std::remove(path_.c_str());
  }
  TmpFileGuard(const TmpFileGuard&) = delete;
  TmpFileGuard& operator=(const TmpFileGuard&) = delete;
  void commit() { committed_ = true; }

 private:
  std::string path_;
  bool committed_ = false;
};

/// One round's decoded pixels of one split on this rank: a fixed reservation of address space
/// (MAP_NORESERVE), resident only as far as it has been written, never copied to grow.
class PixelBuffer {
 public:
  explicit PixelBuffer(std::size_t capacity) : capacity_(std::max<std::size_t>(capacity, 1)) {
    void* p = mmap(nullptr, capacity_, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    PETS_CHECK(p != MAP_FAILED, "cannot reserve " + std::to_string(capacity_) +
                                    " bytes for one round (lower --max-memory)");
    data_ = static_cast<std::uint8_t*>(p);
  }
  ~PixelBuffer() { munmap(data_, capacity_); }
  PixelBuffer(const PixelBuffer&) = delete;
  PixelBuffer& operator=(const PixelBuffer&) = delete;

  void append(const std::vector<std::uint8_t>& bytes) {
    PETS_CHECK(bytes.size() <= capacity_ - size_, "round buffer overflow");
    std::memcpy(data_ + size_, bytes.data(), bytes.size());
    size_ += bytes.size();
  }
  void clear() { size_ = 0; }
  const std::uint8_t* data() const { return data_; }
  std::size_t size() const { return size_; }

 private:
  std::size_t capacity_;
  std::uint8_t* data_ = nullptr;
  std::size_t size_ = 0;
};

/// The largest decoded size an image can have under these options.
std::uint64_t largest_image_bytes(const PreprocessOptions& o) {
  std::uint64_t pixels = o.max_pixels;
  if (o.max_side > 0) {
    const auto side = static_cast<std::uint64_t>(o.max_side);
    pixels = std::min(pixels, side * side);
  }
  return std::max<std::uint64_t>(pixels, 1) * 3;
}

/// Decodes the candidates [lo, hi) (this rank's share of a round) into one buffer per split
/// and shares the decoded sizes of the whole window [begin, end) with every rank.
void decode_round(const PreprocessOptions& o, CandidateInfo& info, std::int64_t begin,
                  std::int64_t end, MPI_Comm comm, Decoder& decoder,
                  PixelBuffer* const (&buffers)[2], std::vector<NameReason>& skips,
                  std::vector<NameReason>& warnings) {
  const int rank = comm_rank(comm), size = comm_size(comm);
  const std::int64_t n = end - begin;
  const std::int64_t lo = begin + n * rank / size, hi = begin + n * (rank + 1) / size;
  DecodeOptions dopt;
  dopt.max_side = o.max_side;
  dopt.max_pixels = o.max_pixels;
  std::vector<std::int32_t> sizes;  // (height, width) per candidate of the share
  for (PixelBuffer* b : buffers) b->clear();
  for (std::int64_t i = lo; i < hi; ++i) {
    const auto c = static_cast<std::size_t>(i);
    const std::string& name = info.names[c];
    DecodeResult r = decoder.decode_file((fs::path(o.image_root()) / name).string(), dopt);
    if (!r.ok) {
      skips.emplace_back(name, r.reason);
      sizes.insert(sizes.end(), {0, 0});
      continue;
    }
    for (const auto& w : r.warnings) warnings.emplace_back(name, w);
    buffers[info.train[c] ? 0 : 1]->append(r.image.pixels);
    sizes.insert(sizes.end(), {r.image.height, r.image.width});
  }
  std::vector<int> counts(static_cast<std::size_t>(size)), displs(static_cast<std::size_t>(size));
  for (int r = 0; r < size; ++r) {
    displs[static_cast<std::size_t>(r)] = static_cast<int>(2 * (n * r / size));
    counts[static_cast<std::size_t>(r)] = static_cast<int>(2 * (n * (r + 1) / size - n * r / size));
  }
  std::vector<std::int32_t> all(static_cast<std::size_t>(2 * n));
  PETS_MPI_CHECK(MPI_Allgatherv(sizes.data(), static_cast<int>(sizes.size()), MPI_INT32_T,
                                all.data(), counts.data(), displs.data(), MPI_INT32_T, comm));
  for (std::int64_t k = 0; k < n; ++k) {
    info.height[static_cast<std::size_t>(begin + k)] = all[static_cast<std::size_t>(2 * k)];
    info.width[static_cast<std::size_t>(begin + k)] = all[static_cast<std::size_t>(2 * k + 1)];
  }
}

/// Gathers every rank's (name, reason) rows, sorted.
std::vector<NameReason> allgather_rows(const std::vector<NameReason>& mine, MPI_Comm comm) {
  std::vector<std::string> flat;
  for (const auto& r : mine) {
    flat.push_back(r.first);
    flat.push_back(r.second);
  }
  flat = pets::comm::allgather_strings(flat, comm);
  std::vector<NameReason> out;
  for (std::size_t i = 0; i + 1 < flat.size(); i += 2) out.emplace_back(flat[i], flat[i + 1]);
  std::sort(out.begin(), out.end());
  return out;
}

/// The rounds: at most `per_rank` images per rank each, `window` candidates per round, into
/// buffers of `capacity` bytes per split.
struct RoundPlan {
  std::int64_t per_rank = 1;
  std::int64_t window = 1;
  std::size_t capacity = 0;
};

/// Decides, before decoding, where each candidate goes and how the candidates are cut into
/// rounds. The split is the folders' in the split layout, else a seeded permutation of the
/// candidate files (as the tutorial's of its file list) or, with --split-mode stratified, of each
/// class's files, so that every round knows where its images go.
RoundPlan plan(const PreprocessOptions& o, Listing& listing, int size) {
  CandidateInfo& info = listing.info;
  const auto nc = static_cast<std::int64_t>(info.names.size());
  if (!listing.given_train.empty()) {
    // The listing is every rank's: every rank throws.
    if (o.split_mode_given)
      throw UsageError("pets_preprocess: --split-mode " +
                       std::string(split_mode_name(o.split_mode)) + ": " +
                       (listing.layout == Layout::kList
                            ? "--list " + o.list_file + " gives the split (its split column)"
                            : std::string("layout ") + layout_name(listing.layout) +
                                  (listing.chosen ? " (chosen by --layout auto)" : "") + " of " +
                                  o.images_dir + " keeps the split of its folders") +
                       "; leave --split-mode out");
    info.train = listing.given_train;
  } else {
    const Split split = o.split_mode == SplitMode::kStratified
                            ? stratified_split_indices(info.label, o.seed, o.train_fraction)
                            : split_indices(nc, o.seed, o.train_fraction);
    info.train.assign(static_cast<std::size_t>(nc), 0);
    for (std::int64_t i : split.train) info.train[static_cast<std::size_t>(i)] = 1;
  }
  const std::uint64_t largest = largest_image_bytes(o);
  RoundPlan p;
  p.per_rank = static_cast<std::int64_t>(std::clamp<std::uint64_t>(
      o.max_memory / largest, 1, static_cast<std::uint64_t>(std::max<std::int64_t>(nc, 1))));
  p.window = p.per_rank * size;
  p.capacity = static_cast<std::size_t>(largest * static_cast<std::uint64_t>(p.per_rank));
  return p;
}

/// The temporary name the store is written under, beside --out (rank 0's host and pid), the
/// same on every rank. First, as pets_train does, rank 0 removes the temporary files in --out's
/// folder whose writer is gone (this host, the process ended: a killed run's) and reports them.
std::string start_output(const PreprocessOptions& o, MPI_Comm comm, PreprocessSummary& summary) {
  const int rank = comm_rank(comm);
  if (rank == 0) {
    const std::string folder = fs::path(o.out).parent_path().empty()
                                   ? std::string(".")
                                   : fs::path(o.out).parent_path().string();
    StaleTempReport stale = remove_stale_temp_files(folder);
    summary.removed_temps = std::move(stale.removed);
    const std::string mine = fs::path(atomic_temp_path(o.out)).filename().string() + " (";
    for (std::string& kept : stale.kept)  // not this run's own name, which it overwrites
      if (fs::path(kept).filename().string().rfind(mine, 0) != 0)
        summary.kept_temps.push_back(std::move(kept));
  }
  return pets::comm::broadcast_string(rank == 0 ? atomic_temp_path(o.out) : std::string(), comm);
}

/// Decodes the candidates and appends their pixels to the store, one round of a bounded number
/// of images per rank at a time; the round buffers are unmapped on return. Returns the rounds.
std::int64_t write_rounds(const PreprocessOptions& o, CandidateInfo& info, const RoundPlan& p,
                          MPI_Comm comm, StoreWriter& writer, std::vector<NameReason>& skips,
                          std::vector<NameReason>& warnings) {
  const int rank = comm_rank(comm), size = comm_size(comm);
  const auto nc = static_cast<std::int64_t>(info.names.size());
  PixelBuffer train_pixels(p.capacity), eval_pixels(p.capacity);
  PixelBuffer* const buffers[2] = {&train_pixels, &eval_pixels};
  Decoder decoder;
  std::int64_t rounds = 0;
  for (std::int64_t begin = 0; begin < nc; begin += p.window) {
    const std::int64_t end = std::min(nc, begin + p.window);
    decode_round(o, info, begin, end, comm, decoder, buffers, skips, warnings);
    // Where this rank's bytes go: after the round's bytes of the lower ranks' shares.
    const std::int64_t my_lo = begin + (end - begin) * rank / size;
    std::uint64_t round_bytes[2] = {0, 0}, my_offset[2] = {0, 0};
    for (std::int64_t i = begin; i < end; ++i) {
      const auto c = static_cast<std::size_t>(i);
      const int s = info.train[c] ? 0 : 1;
      if (i < my_lo) my_offset[s] += info.bytes(c);
      round_bytes[s] += info.bytes(c);
    }
    for (int s = 0; s < 2; ++s)
      writer.append_pixels(s == 0 ? SplitKind::kTrain : SplitKind::kEval, round_bytes[s],
                           my_offset[s], buffers[s]->data(), buffers[s]->size());
    ++rounds;
  }
  return rounds;
}

/// This rank's contiguous share of the per-image rows of one split: its images `members` (in
/// store order) with their label ids `member_labels`.
SplitRows split_rows(const CandidateInfo& info, const std::vector<std::int64_t>& members,
                     const std::vector<std::int32_t>& member_labels, std::size_t name_length,
                     int rank, int size) {
  const auto n = static_cast<std::int64_t>(members.size());
  const std::int64_t lo = n * rank / size, hi = n * (rank + 1) / size;
  SplitRows rows;
  rows.count = static_cast<std::uint64_t>(n);
  rows.first = static_cast<std::uint64_t>(lo);
  rows.name_length = name_length;
  std::uint64_t at = 0;
  for (std::int64_t k = 0; k < lo; ++k)
    at += info.bytes(static_cast<std::size_t>(members[static_cast<std::size_t>(k)]));
  for (std::int64_t k = lo; k < hi; ++k) {
    const auto c = static_cast<std::size_t>(members[static_cast<std::size_t>(k)]);
    rows.offsets.push_back(at);
    at += info.bytes(c);
    rows.shapes.insert(rows.shapes.end(), {info.height[c], info.width[c], 3});
    rows.labels.push_back(member_labels[static_cast<std::size_t>(k)]);
    rows.names.push_back(info.names[c]);
  }
  return rows;
}

/// Once every image is decoded: the labels (from the stored images only: a skipped file never
/// makes a class), the refusal of a store without images or with an empty split, each split's
/// per-image rows, the root attributes and the tables; then closes the file and fills in
/// `summary`.
void finalize(const PreprocessOptions& o, const Listing& listing, std::vector<NameReason> skips,
              std::vector<NameReason> warnings, MPI_Comm comm, StoreWriter& writer,
              PreprocessSummary& summary) {
  const int rank = comm_rank(comm), size = comm_size(comm);
  const CandidateInfo& info = listing.info;
  std::vector<char> label_stored(info.label_table.size(), 0);
  std::vector<std::int64_t> members[2];
  for (std::size_t c = 0; c < info.names.size(); ++c) {
    if (!info.stored(c)) continue;
    label_stored[static_cast<std::size_t>(info.label[c])] = 1;
    members[info.train[c] ? 0 : 1].push_back(static_cast<std::int64_t>(c));
  }
  const std::int64_t n_stored = static_cast<std::int64_t>(members[0].size() + members[1].size());
  summary.skipped = allgather_rows(skips, comm);
  summary.skipped.insert(summary.skipped.end(), listing.skips.begin(), listing.skips.end());
  std::sort(summary.skipped.begin(), summary.skipped.end());
  summary.warnings = allgather_rows(warnings, comm);
  const std::string not_read = not_read_text(listing.hidden, listing.not_images);
  const std::string layout = std::string("layout ") + layout_name(listing.layout) +
                             (listing.chosen ? ", chosen by --layout auto" : "");
  if (n_stored == 0)
    throw UsageError("pets_preprocess: no usable image in " + o.source() + " (" + layout +
                     "): " + skip_reasons_text(summary.skipped) +
                     (not_read.empty() ? "" : "; " + not_read));
  if (const auto classes = std::count(label_stored.begin(), label_stored.end(), 1); classes < 2) {
    const auto t = std::find(label_stored.begin(), label_stored.end(), 1) - label_stored.begin();
    throw UsageError("pets_preprocess: only one class (" +
                     info.label_table[static_cast<std::size_t>(t)] + ") among the " +
                     std::to_string(n_stored) + " stored images of " + o.source() + " (" + layout +
                     "): a classifier needs at least two");
  }
  const bool given = !listing.given_train.empty();
  for (int s = 0; s < 2; ++s) {
    if (!members[s].empty()) continue;
    if (given)
      throw UsageError("pets_preprocess: no " + std::string(s == 0 ? "training" : "evaluation") +
                       " image stored from " + o.source() + " (" + layout +
                       "): " + skip_reasons_text(summary.skipped));
    throw UsageError(
        "pets_preprocess: no " + std::string(s == 0 ? "training" : "evaluation") + " image: all " +
        std::to_string(n_stored) + " stored images fell into the other split (--train-fraction " +
        format_number(o.train_fraction) + "; " + skip_reasons_text(summary.skipped) + ")");
  }
  // Ids among the stored labels, in the same (sorted) order as label_table.
  StoreAttributes attributes;
  std::vector<std::string>& label_names = attributes.label_names;
  std::vector<std::int32_t> id_of_table(info.label_table.size(), -1);
  for (std::size_t t = 0; t < info.label_table.size(); ++t) {
    if (!label_stored[t]) continue;
    id_of_table[t] = static_cast<std::int32_t>(label_names.size());
    label_names.push_back(info.label_table[t]);
  }
  std::vector<std::int32_t> split_labels[2];
  for (int s = 0; s < 2; ++s)
    for (const std::int64_t i : members[s])
      split_labels[s].push_back(
          id_of_table[static_cast<std::size_t>(info.label[static_cast<std::size_t>(i)])]);
  for (int s = 0; s < 2; ++s)
    writer.write_split_rows(
        s == 0 ? SplitKind::kTrain : SplitKind::kEval,
        split_rows(info, members[s], split_labels[s], listing.name_length, rank, size));

  attributes.seed = o.seed;
  attributes.train_fraction = o.train_fraction;
  attributes.layout = layout_name(listing.layout);
  attributes.split = given ? kGivenSplit : split_mode_name(o.split_mode);
  attributes.max_side = o.max_side;
  attributes.tool_version = std::string("pets_preprocess ") + PETS_VERSION;
  // Rank 0's random id: an attribute's value must be the same on every rank.
  attributes.store_id = pets::comm::broadcast_string(rank == 0 ? new_store_id() : "", comm);
  writer.write_attributes(attributes);
  writer.write_tables(summary.skipped, summary.warnings);
  writer.close();

  summary.layout = std::string(layout_name(listing.layout)) + (listing.chosen ? " (auto)" : "");
  summary.split = attributes.split;
  summary.hidden = listing.hidden;
  summary.not_images = listing.not_images;
  summary.stored = n_stored;
  summary.train = static_cast<std::int64_t>(members[0].size());
  summary.eval = static_cast<std::int64_t>(members[1].size());
  summary.labels = static_cast<std::int64_t>(label_names.size());
  summary.class_warnings = class_coverage_warnings(label_names, split_labels[0], split_labels[1],
                                                   split_note(attributes.split));
}

/// Renames the finished temporary file to --out (rank 0) and tells every rank whether it could.
void commit_output(const std::string& tmp, const std::string& out, MPI_Comm comm) {
  int renamed = 1;
  if (comm_rank(comm) == 0) renamed = std::rename(tmp.c_str(), out.c_str()) == 0 ? 1 : 0;
  PETS_MPI_CHECK(MPI_Bcast(&renamed, 1, MPI_INT, 0, comm));
  PETS_CHECK(renamed == 1, "cannot rename " + tmp + " to " + out);
}

/// Every rank's peak resident memory, in rank order.
std::vector<std::uint64_t> gather_peak_resident(MPI_Comm comm) {
  unsigned long long peak = peak_resident_bytes();
  std::vector<unsigned long long> peaks(static_cast<std::size_t>(comm_size(comm)));
  PETS_MPI_CHECK(MPI_Allgather(&peak, 1, MPI_UNSIGNED_LONG_LONG, peaks.data(), 1,
                               MPI_UNSIGNED_LONG_LONG, comm));
  return {peaks.begin(), peaks.end()};
}

}  // namespace

PreprocessSummary run_preprocess(const PreprocessOptions& o, MPI_Comm comm) {
  silence_hdf5_errors();
  Listing listing = list_candidates(o, comm);
  const RoundPlan rounds = plan(o, listing, comm_size(comm));
  PreprocessSummary summary;
  // Written under a temporary name, renamed only once the file is closed.
  const std::string tmp = start_output(o, comm, summary);
  TmpFileGuard guard(tmp);
  {
    StoreWriter writer(tmp, comm);
    std::vector<NameReason> skips, warnings;
    summary.rounds = write_rounds(o, listing.info, rounds, comm, writer, skips, warnings);
    finalize(o, listing, std::move(skips), std::move(warnings), comm, writer, summary);
  }
  commit_output(tmp, o.out, comm);
  guard.commit();
  summary.peak_resident = gather_peak_resident(comm);
  return summary;
}

std::string reason_kind(const std::string& reason) {
  const std::size_t cut = std::min(reason.find(": "), reason.find(" ("));
  return reason.substr(0, cut);
}

std::string skip_reasons_text(const std::vector<NameReason>& skipped) {
  std::map<std::string, std::int64_t> counts;
  for (const auto& s : skipped) ++counts[reason_kind(s.second)];
  std::vector<std::pair<std::int64_t, std::string>> order;
  for (const auto& [kind, n] : counts) order.emplace_back(-n, kind);
  std::sort(order.begin(), order.end());
  std::string text = std::to_string(skipped.size()) +
                     (skipped.size() == 1 ? " entry skipped" : " entries skipped");
  for (std::size_t i = 0; i < order.size(); ++i)
    text += (i ? ", " : " (") + std::to_string(-order[i].first) + " " + order[i].second;
  return text + (order.empty() ? "" : ")");
}

std::string not_read_text(std::int64_t hidden, std::int64_t not_images) {
  if (hidden + not_images == 0) return "";
  std::string parts;
  if (hidden > 0) parts = std::to_string(hidden) + " hidden";
  if (not_images > 0)
    parts +=
        (parts.empty() ? "" : ", ") + std::to_string(not_images) + " without an image extension";
  return std::to_string(hidden + not_images) + " not read (" + parts + ")";
}

std::uint64_t parse_byte_size(const std::string& text, const std::string& option) {
  std::string digits = text;
  unsigned shift = 0;
  if (!digits.empty()) {
    const char unit = static_cast<char>(std::toupper(static_cast<unsigned char>(digits.back())));
    shift = unit == 'K' ? 10 : unit == 'M' ? 20 : unit == 'G' ? 30 : 0;
    if (shift != 0) digits.pop_back();
  }
  std::uint64_t value = 0;
  const char* end = digits.data() + digits.size();
  const auto [ptr, ec] = std::from_chars(digits.data(), end, value);
  if (digits.empty() || ec != std::errc() || ptr != end || value == 0 ||
      value > (std::numeric_limits<std::uint64_t>::max() >> shift))
    throw UsageError("pets_preprocess: " + option +
                     " must be a positive byte count with an optional K, M or G, got '" + text +
                     "'");
  return value << shift;
}

std::uint64_t peak_resident_bytes() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmHWM:", 0) != 0) continue;
    std::istringstream fields(line.substr(6));
    std::uint64_t kib = 0;
    fields >> kib;
    return kib * 1024;
  }
  return 0;
}

}  // namespace pets::data
