#include "pets/data/preprocess.hpp"

#include <sys/mman.h>
#include <unistd.h>

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
#include <type_traits>

#include "pets/comm/mpi_comm.hpp"
#include "pets/data/checks.hpp"
#include "pets/data/decode.hpp"
#include "pets/data/labels.hpp"
#include "pets/util/atomic_file.hpp"
#include "pets/util/error.hpp"
#include "pets/util/number_text.hpp"

#ifndef PETS_VERSION
#define PETS_VERSION "unknown"
#endif

namespace fs = std::filesystem;

namespace pets::data {

std::string PreprocessSummary::line() const {
  std::string s =
      std::to_string(stored) + " stored, " + std::to_string(skipped.size()) + " skipped";
  for (std::size_t i = 0; i < skipped.size(); ++i)
    s += (i ? ", " : ": ") + skipped[i].first + " (" + skipped[i].second + ")";
  s += "; " + std::to_string(train) + " train, " + std::to_string(eval) + " eval, " +
       std::to_string(labels) + " labels";
  // Files the decoder warned about (and stored); the class warnings are lines of their own.
  if (!warnings.empty()) s += "; " + std::to_string(warnings.size()) + " decoded with warnings";
  for (std::size_t i = 0; i < warnings.size(); ++i)
    s += (i ? ", " : ": ") + warnings[i].first + " (" + warnings[i].second + ")";
  return s;
}

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

/// Throws UsageError on every rank when rank 0 found a problem (message non-empty).
void agree_or_throw(const std::string& rank0_problem, MPI_Comm comm) {
  const std::string problem = pets::comm::broadcast_string(rank0_problem, comm);
  if (!problem.empty()) throw UsageError("pets_preprocess: " + problem);
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

H5Id fixed_string_type(std::size_t len) {
  H5Id t(PETS_H5_CHECK(H5Tcopy(H5T_C_S1)));
  PETS_H5_CHECK(H5Tset_size(t.get(), std::max<std::size_t>(len, 1)));
  PETS_H5_CHECK(H5Tset_strpad(t.get(), H5T_STR_NULLPAD));
  return t;
}

void write_string_attr(hid_t obj, const char* name, const std::vector<std::string>& values,
                       bool scalar) {
  std::size_t len = 1;
  for (const auto& v : values) len = std::max(len, v.size());
  H5Id type = fixed_string_type(len);
  const hsize_t n = values.size();
  H5Id space(PETS_H5_CHECK(scalar ? H5Screate(H5S_SCALAR) : H5Screate_simple(1, &n, nullptr)));
  H5Id attr(
      PETS_H5_CHECK(H5Acreate2(obj, name, type.get(), space.get(), H5P_DEFAULT, H5P_DEFAULT)));
  std::vector<char> buf(values.size() * len, '\0');
  for (std::size_t i = 0; i < values.size(); ++i)
    std::memcpy(buf.data() + i * len, values[i].data(), values[i].size());
  PETS_H5_CHECK(H5Awrite(attr.get(), type.get(), buf.data()));
}

/// A scalar numeric attribute of the schema.
template <typename T>
void write_scalar_attr(hid_t obj, const store::Field& field, T value) {
  static_assert(std::is_arithmetic_v<T>);
  H5Id space(PETS_H5_CHECK(H5Screate(H5S_SCALAR)));
  H5Id attr(PETS_H5_CHECK(H5Acreate2(obj, field.name, store::file_type(field.type), space.get(),
                                     H5P_DEFAULT, H5P_DEFAULT)));
  PETS_H5_CHECK(H5Awrite(attr.get(), store::memory_type(field.type), &value));
}

/// Writes this rank's rows [first, first + rows) of `dset`, whose first dimension is `dims[0]`,
/// collectively; ranks without rows take part with an empty selection.
void write_slab(hid_t dset, hid_t mem_type, hid_t dxpl, const std::vector<hsize_t>& dims,
                hsize_t first, hsize_t rows, const void* data) {
  if (dims[0] == 0) return;  // every rank sees the same global size: all skip together
  H5Id space(PETS_H5_CHECK(H5Dget_space(dset)));
  std::vector<hsize_t> start(dims.size(), 0), count = dims;
  start[0] = first;
  count[0] = rows;
  std::vector<hsize_t> mem_dims = count;
  mem_dims[0] = std::max<hsize_t>(rows, 1);
  H5Id mem(
      PETS_H5_CHECK(H5Screate_simple(static_cast<int>(mem_dims.size()), mem_dims.data(), nullptr)));
  if (rows == 0) {
    PETS_H5_CHECK(H5Sselect_none(space.get()));
    PETS_H5_CHECK(H5Sselect_none(mem.get()));
  } else {
    PETS_H5_CHECK(H5Sselect_hyperslab(space.get(), H5S_SELECT_SET, start.data(), nullptr,
                                      count.data(), nullptr));
  }
  PETS_H5_CHECK(H5Dwrite(dset, mem_type, mem.get(), space.get(), dxpl, data));
}

/// Creates a dataset of `dims` (first dimension global), in checksummed chunks of
/// store::index_chunk_rows rows, and writes this rank's rows [first, first + rows) collectively.
void write_rows(hid_t parent, const char* name, hid_t file_type, hid_t mem_type, hid_t dxpl,
                const std::vector<hsize_t>& dims, hsize_t first, hsize_t rows, const void* data) {
  std::vector<hsize_t> chunk = dims, max_dims = dims;
  chunk[0] = store::index_chunk_rows(dims[0]);
  max_dims[0] = H5S_UNLIMITED;  // chunked: HDF5 then allows an empty first dimension
  H5Id dcpl(PETS_H5_CHECK(H5Pcreate(H5P_DATASET_CREATE)));
  PETS_H5_CHECK(
      store::set_checksummed_chunks(dcpl.get(), static_cast<int>(chunk.size()), chunk.data()));
  H5Id space(
      PETS_H5_CHECK(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), max_dims.data())));
  H5Id dset(PETS_H5_CHECK(
      H5Dcreate2(parent, name, file_type, space.get(), H5P_DEFAULT, dcpl.get(), H5P_DEFAULT)));
  write_slab(dset.get(), mem_type, dxpl, dims, first, rows, data);
}

/// A (name, reason) compound table, written by rank 0 (others join with no rows).
void write_table(hid_t file, const char* name, const std::vector<NameReason>& rows, int rank,
                 hid_t dxpl) {
  std::size_t l0 = 1, l1 = 1;
  for (const auto& r : rows) {
    l0 = std::max(l0, r.first.size());
    l1 = std::max(l1, r.second.size());
  }
  H5Id t0 = fixed_string_type(l0), t1 = fixed_string_type(l1);
  H5Id type(PETS_H5_CHECK(H5Tcreate(H5T_COMPOUND, l0 + l1)));
  PETS_H5_CHECK(H5Tinsert(type.get(), store::kRowName, 0, t0.get()));
  PETS_H5_CHECK(H5Tinsert(type.get(), store::kRowReason, l0, t1.get()));
  std::vector<char> buf(rows.size() * (l0 + l1), '\0');
  for (std::size_t i = 0; i < rows.size(); ++i) {
    std::memcpy(buf.data() + i * (l0 + l1), rows[i].first.data(), rows[i].first.size());
    std::memcpy(buf.data() + i * (l0 + l1) + l0, rows[i].second.data(), rows[i].second.size());
  }
  const hsize_t n = rows.size();
  write_rows(file, name, type.get(), type.get(), dxpl, {n}, 0, rank == 0 ? n : 0, buf.data());
}

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

/// One split group: its pixels grow by one collective append per round; the per-image rows
/// are written once at the end, when the label ids are known.
class SplitWriter {
 public:
  SplitWriter(hid_t file, const char* group_name, hid_t dxpl)
      : group_(PETS_H5_CHECK(H5Gcreate2(file, group_name, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT))),
        dxpl_(dxpl) {
    H5Id dcpl(PETS_H5_CHECK(H5Pcreate(H5P_DATASET_CREATE)));
    const hsize_t chunk = 1 << 20;
    PETS_H5_CHECK(store::set_checksummed_chunks(dcpl.get(), 1, &chunk));
    const hsize_t dims = 0, max_dims = H5S_UNLIMITED;
    H5Id space(PETS_H5_CHECK(H5Screate_simple(1, &dims, &max_dims)));
    pixels_ = H5Id(PETS_H5_CHECK(H5Dcreate2(group_.get(), store::kPixels.name,
                                            store::file_type(store::kPixels.type), space.get(),
                                            H5P_DEFAULT, dcpl.get(), H5P_DEFAULT)));
  }

  /// Collective: grows pixels by `round_bytes` (the same on every rank) and writes this rank's
  /// `mine` at `offset` from the start of the round.
  void append(std::uint64_t round_bytes, std::uint64_t offset, const PixelBuffer& mine) {
    if (round_bytes == 0) return;
    const hsize_t total = written_ + round_bytes;
    PETS_H5_CHECK(H5Dset_extent(pixels_.get(), &total));
    write_slab(pixels_.get(), store::memory_type(store::kPixels.type), dxpl_, {total},
               written_ + offset, mine.size(), mine.data());
    written_ = total;
  }

  /// Collective: the offsets, shapes, labels and names of the split's images (`members`, in
  /// store order); each rank writes a contiguous share of the rows.
  void finish(const CandidateInfo& info, const std::vector<std::int64_t>& members,
              const std::vector<std::int32_t>& member_labels, std::size_t name_len, int rank,
              int size) {
    const auto n = static_cast<std::int64_t>(members.size());
    const std::int64_t lo = n * rank / size, hi = n * (rank + 1) / size;
    std::uint64_t at = 0;
    for (std::int64_t k = 0; k < lo; ++k)
      at += info.bytes(static_cast<std::size_t>(members[static_cast<std::size_t>(k)]));
    std::vector<std::uint64_t> offsets;
    std::vector<std::int32_t> shapes, labels;
    std::vector<char> names(static_cast<std::size_t>(hi - lo) * name_len, '\0');
    for (std::int64_t k = lo; k < hi; ++k) {
      const auto c = static_cast<std::size_t>(members[static_cast<std::size_t>(k)]);
      offsets.push_back(at);
      at += info.bytes(c);
      shapes.insert(shapes.end(), {info.height[c], info.width[c], 3});
      labels.push_back(member_labels[static_cast<std::size_t>(k)]);
      std::memcpy(names.data() + static_cast<std::size_t>(k - lo) * name_len, info.names[c].data(),
                  info.names[c].size());
    }
    const hid_t g = group_.get();
    const hsize_t rows = static_cast<hsize_t>(hi - lo), first = static_cast<hsize_t>(lo);
    const hsize_t count = static_cast<hsize_t>(n);
    using store::file_type;
    using store::memory_type;
    write_rows(g, store::kOffsets.name, file_type(store::kOffsets.type),
               memory_type(store::kOffsets.type), dxpl_, {count}, first, rows, offsets.data());
    write_rows(g, store::kShapes.name, file_type(store::kShapes.type),
               memory_type(store::kShapes.type), dxpl_, {count, store::kShapes.columns}, first,
               rows, shapes.data());
    write_rows(g, store::kLabels.name, file_type(store::kLabels.type),
               memory_type(store::kLabels.type), dxpl_, {count}, first, rows, labels.data());
    H5Id name_type = fixed_string_type(name_len);
    write_rows(g, store::kNames.name, name_type.get(), name_type.get(), dxpl_, {count}, first, rows,
               names.data());
    pixels_.close();
    group_.close();
  }

 private:
  H5Id group_;
  H5Id pixels_;
  hid_t dxpl_;
  std::uint64_t written_ = 0;
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
    DecodeResult r = decoder.decode_file((fs::path(o.images_dir) / name).string(), dopt);
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

PreprocessSummary run_preprocess(const PreprocessOptions& o, MPI_Comm comm) {
  silence_hdf5_errors();
  const int rank = comm_rank(comm);
  const int size = comm_size(comm);

  // Options and paths are checked on rank 0 and the verdict shared, so every rank throws.
  std::string problem;
  std::vector<NameReason> entries;
  if (rank == 0) {
    problem = check_options(o);
    if (problem.empty()) {
      try {
        entries = classify_folder(o.images_dir);
      } catch (const std::exception& e) {
        problem = std::string("cannot list ") + o.images_dir + ": " + e.what();
      }
    }
  }
  agree_or_throw(problem, comm);

  // The folder listing, from rank 0 (one view of the file system for all), as one packed
  // text ("name\0reason\0" per entry): a few bytes per file on every rank.
  CandidateInfo info;
  std::vector<NameReason> listing_skips;
  {
    std::string packed;
    for (const auto& e : entries) packed += e.first + '\0' + e.second + '\0';
    std::vector<NameReason>().swap(entries);
    packed = pets::comm::broadcast_string(std::move(packed), comm);
    std::vector<std::string> labels;
    for (std::size_t at = 0; at < packed.size();) {
      const std::size_t name_end = packed.find('\0', at),
                        reason_end = packed.find('\0', name_end + 1);
      std::string name = packed.substr(at, name_end - at);
      if (reason_end == name_end + 1) {
        labels.push_back(*label_from_filename(name));
        info.names.push_back(std::move(name));
      } else {
        listing_skips.emplace_back(std::move(name),
                                   packed.substr(name_end + 1, reason_end - name_end - 1));
      }
      at = reason_end + 1;
    }
    info.label_table = sorted_labels(labels);
    info.label.reserve(labels.size());
    for (const auto& l : labels) info.label.push_back(label_id(info.label_table, l));
  }
  const auto nc = static_cast<std::int64_t>(info.names.size());
  info.height.assign(static_cast<std::size_t>(nc), 0);
  info.width.assign(static_cast<std::size_t>(nc), 0);
  std::size_t name_len = 1;
  for (const auto& c : info.names) name_len = std::max(name_len, c.size());

  // The split is a seeded permutation of the candidate files (as the tutorial's of its file
  // list), decided before decoding so that every round knows where its images go.
  {
    const Split split = split_indices(nc, o.seed, o.train_fraction);
    info.train.assign(static_cast<std::size_t>(nc), 0);
    for (std::int64_t i : split.train) info.train[static_cast<std::size_t>(i)] = 1;
  }

  // Write under a temporary name beside --out (rank 0's host and pid); rename only once the file
  // is closed. First, as pets_train does, the temporary files in --out's folder whose writer is
  // gone (this host, the process ended: a killed run's) are removed.
  PreprocessSummary summary;
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
  const std::string tmp =
      pets::comm::broadcast_string(rank == 0 ? atomic_temp_path(o.out) : std::string(), comm);
  TmpFileGuard guard(tmp);
  std::vector<NameReason> skips, warnings;
  {
    H5Id fapl(PETS_H5_CHECK(H5Pcreate(H5P_FILE_ACCESS)));
    PETS_H5_CHECK(H5Pset_fapl_mpio(fapl.get(), comm, MPI_INFO_NULL));
    PETS_H5_CHECK(store::set_store_format(fapl.get()));
    PETS_H5_CHECK(store::set_store_format(fapl.get()));
    H5Id file(H5Fcreate(tmp.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl.get()));
    if (!file.valid()) PETS_ERROR("cannot create " + tmp + ": " + hdf5_error_stack());
    H5Id dxpl(PETS_H5_CHECK(H5Pcreate(H5P_DATASET_XFER)));
    PETS_H5_CHECK(H5Pset_dxpl_mpio(dxpl.get(), H5FD_MPIO_COLLECTIVE));
    const hid_t f = file.get();
    SplitWriter writers[2] = {SplitWriter(f, split_name(SplitKind::kTrain), dxpl.get()),
                              SplitWriter(f, split_name(SplitKind::kEval), dxpl.get())};

    // Decode and append in rounds of a bounded number of images per rank.
    {  // one round of decoded pixels at a time
      const std::uint64_t largest = largest_image_bytes(o);
      const auto per_rank = static_cast<std::int64_t>(std::clamp<std::uint64_t>(
          o.max_memory / largest, 1, static_cast<std::uint64_t>(std::max<std::int64_t>(nc, 1))));
      const std::int64_t window = per_rank * size;
      const auto capacity =
          static_cast<std::size_t>(largest * static_cast<std::uint64_t>(per_rank));
      PixelBuffer train_pixels(capacity), eval_pixels(capacity);
      PixelBuffer* const buffers[2] = {&train_pixels, &eval_pixels};
      Decoder decoder;
      for (std::int64_t begin = 0; begin < nc; begin += window) {
        const std::int64_t end = std::min(nc, begin + window);
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
        for (int s = 0; s < 2; ++s) writers[s].append(round_bytes[s], my_offset[s], *buffers[s]);
        ++summary.rounds;
      }
    }  // the round buffers are unmapped here

    // Labels come from the stored images only: a skipped file never makes a class.
    std::vector<char> label_stored(info.label_table.size(), 0);
    std::vector<std::int64_t> members[2];
    for (std::int64_t i = 0; i < nc; ++i) {
      const auto c = static_cast<std::size_t>(i);
      if (!info.stored(c)) continue;
      label_stored[static_cast<std::size_t>(info.label[c])] = 1;
      members[info.train[c] ? 0 : 1].push_back(i);
    }
    const std::int64_t n_stored = static_cast<std::int64_t>(members[0].size() + members[1].size());
    summary.skipped = allgather_rows(skips, comm);
    summary.skipped.insert(summary.skipped.end(), listing_skips.begin(), listing_skips.end());
    std::sort(summary.skipped.begin(), summary.skipped.end());
    summary.warnings = allgather_rows(warnings, comm);
    if (n_stored == 0)
      throw UsageError("pets_preprocess: no usable image in " + o.images_dir + ": " +
                       skip_reasons_text(summary.skipped));
    for (int s = 0; s < 2; ++s) {
      if (members[s].empty())
        throw UsageError("pets_preprocess: no " + std::string(s == 0 ? "training" : "evaluation") +
                         " image: all " + std::to_string(n_stored) +
                         " stored images fell into the other split (--train-fraction " +
                         format_number(o.train_fraction) + "; " +
                         skip_reasons_text(summary.skipped) + ")");
    }
    // Ids among the stored labels, in the same (sorted) order as label_table.
    std::vector<std::string> label_names;
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
      writers[s].finish(info, members[s], split_labels[s], name_len, rank, size);

    write_string_attr(f, store::kLabelNames.name, label_names, false);
    write_scalar_attr<std::uint64_t>(f, store::kSeed, o.seed);
    write_scalar_attr<double>(f, store::kTrainFraction, o.train_fraction);
    write_scalar_attr<std::int32_t>(f, store::kMaxSide, o.max_side);
    write_scalar_attr<std::int32_t>(f, store::kSchemaVersion, store::kVersion);
    write_string_attr(f, store::kToolVersion.name, {std::string("pets_preprocess ") + PETS_VERSION},
                      true);
    // Rank 0's random id: an attribute's value must be the same on every rank.
    write_string_attr(f, store::kStoreId.name,
                      {pets::comm::broadcast_string(rank == 0 ? new_store_id() : "", comm)}, true);
    write_table(f, store::kSkippedTable, summary.skipped, rank, dxpl.get());
    write_table(f, store::kWarningsTable, summary.warnings, rank, dxpl.get());
    file.close();

    summary.stored = n_stored;
    summary.train = static_cast<std::int64_t>(members[0].size());
    summary.eval = static_cast<std::int64_t>(members[1].size());
    summary.labels = static_cast<std::int64_t>(label_names.size());
    summary.class_warnings = class_coverage_warnings(label_names, split_labels[0], split_labels[1]);
  }
  int renamed = 1;
  if (rank == 0) renamed = std::rename(tmp.c_str(), o.out.c_str()) == 0 ? 1 : 0;
  PETS_MPI_CHECK(MPI_Bcast(&renamed, 1, MPI_INT, 0, comm));
  PETS_CHECK(renamed == 1, "cannot rename " + tmp + " to " + o.out);
  guard.commit();

  unsigned long long peak = peak_resident_bytes();
  std::vector<unsigned long long> peaks(static_cast<std::size_t>(size));
  PETS_MPI_CHECK(MPI_Allgather(&peak, 1, MPI_UNSIGNED_LONG_LONG, peaks.data(), 1,
                               MPI_UNSIGNED_LONG_LONG, comm));
  summary.peak_resident.assign(peaks.begin(), peaks.end());
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

std::uint64_t parse_unsigned(const std::string& text, const std::string& option) {
  std::uint64_t value = 0;
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, value);
  // from_chars refuses a sign, so "-1" cannot wrap around.
  if (text.empty() || ec != std::errc() || ptr != end)
    throw UsageError("pets_preprocess: " + option + " must be an integer in 0 .. 2^64-1, got '" +
                     text + "'");
  return value;
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
