#include "pets/data/preprocess.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <type_traits>

#include "pets/comm/mpi_comm.hpp"
#include "pets/data/checks.hpp"
#include "pets/data/decode.hpp"
#include "pets/data/labels.hpp"
#include "pets/util/error.hpp"

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
       std::to_string(labels) + " labels; " + std::to_string(warnings.size()) + " with warnings";
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

struct LocalImage {
  std::int64_t candidate;  ///< index into the candidate list
  Image image;
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

/// Creates a dataset of `dims` (first dimension global) and writes this rank's rows
/// [first, first + rows) collectively; ranks without rows take part with an empty selection.
/// Without a `dcpl`, in checksummed chunks of store::index_chunk_rows rows.
void write_rows(hid_t parent, const char* name, hid_t file_type, hid_t mem_type, hid_t dxpl,
                std::vector<hsize_t> dims, hsize_t first, hsize_t rows, const void* data,
                hid_t dcpl = H5P_DEFAULT, bool unlimited = false) {
  H5Id checksummed;
  if (dcpl == H5P_DEFAULT) {
    std::vector<hsize_t> chunk = dims;
    chunk[0] = store::index_chunk_rows(dims[0]);
    checksummed = H5Id(PETS_H5_CHECK(H5Pcreate(H5P_DATASET_CREATE)));
    PETS_H5_CHECK(store::set_checksummed_chunks(checksummed.get(), static_cast<int>(chunk.size()),
                                                chunk.data()));
    dcpl = checksummed.get();
    unlimited = true;
  }
  std::vector<hsize_t> max_dims = dims;
  if (unlimited) max_dims[0] = H5S_UNLIMITED;
  H5Id space(
      PETS_H5_CHECK(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), max_dims.data())));
  H5Id dset(PETS_H5_CHECK(
      H5Dcreate2(parent, name, file_type, space.get(), H5P_DEFAULT, dcpl, H5P_DEFAULT)));
  if (dims[0] == 0) return;  // every rank sees the same global size: all skip together
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
  PETS_H5_CHECK(H5Dwrite(dset.get(), mem_type, mem.get(), space.get(), dxpl, data));
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

/// One split's part on this rank, in candidate (file name) order.
void write_split(hid_t file, const char* group_name, const std::vector<const LocalImage*>& mine,
                 const std::vector<std::int32_t>& labels_of_candidate,
                 const std::vector<std::string>& candidate_names, std::size_t name_len,
                 MPI_Comm comm, hid_t dxpl) {
  unsigned long long my_bytes = 0, my_count = mine.size();
  for (const LocalImage* li : mine) my_bytes += li->image.bytes();
  unsigned long long byte_offset = 0, index_offset = 0, total_bytes = 0, total_count = 0;
  PETS_MPI_CHECK(MPI_Exscan(&my_bytes, &byte_offset, 1, MPI_UNSIGNED_LONG_LONG, MPI_SUM, comm));
  PETS_MPI_CHECK(MPI_Exscan(&my_count, &index_offset, 1, MPI_UNSIGNED_LONG_LONG, MPI_SUM, comm));
  if (comm_rank(comm) == 0) byte_offset = index_offset = 0;  // MPI_Exscan leaves rank 0 undefined
  PETS_MPI_CHECK(MPI_Allreduce(&my_bytes, &total_bytes, 1, MPI_UNSIGNED_LONG_LONG, MPI_SUM, comm));
  PETS_MPI_CHECK(MPI_Allreduce(&my_count, &total_count, 1, MPI_UNSIGNED_LONG_LONG, MPI_SUM, comm));

  std::vector<std::uint8_t> pixels;
  pixels.reserve(my_bytes);
  std::vector<std::uint64_t> offsets;
  std::vector<std::int32_t> shapes, labels;
  std::vector<char> names(mine.size() * name_len, '\0');
  std::uint64_t at = byte_offset;
  for (std::size_t i = 0; i < mine.size(); ++i) {
    const LocalImage& li = *mine[i];
    offsets.push_back(at);
    at += li.image.bytes();
    pixels.insert(pixels.end(), li.image.pixels.begin(), li.image.pixels.end());
    shapes.insert(shapes.end(), {li.image.height, li.image.width, 3});
    labels.push_back(labels_of_candidate[static_cast<std::size_t>(li.candidate)]);
    const std::string& nm = candidate_names[static_cast<std::size_t>(li.candidate)];
    std::memcpy(names.data() + i * name_len, nm.data(), nm.size());
  }

  H5Id group(PETS_H5_CHECK(H5Gcreate2(file, group_name, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT)));
  const hid_t g = group.get();
  H5Id dcpl(PETS_H5_CHECK(H5Pcreate(H5P_DATASET_CREATE)));
  const hsize_t chunk = 1 << 20;
  PETS_H5_CHECK(store::set_checksummed_chunks(dcpl.get(), 1, &chunk));
  using store::file_type;
  using store::memory_type;
  write_rows(g, store::kPixels.name, file_type(store::kPixels.type),
             memory_type(store::kPixels.type), dxpl, {total_bytes}, byte_offset, my_bytes,
             pixels.data(), dcpl.get(), true);
  write_rows(g, store::kOffsets.name, file_type(store::kOffsets.type),
             memory_type(store::kOffsets.type), dxpl, {total_count}, index_offset, my_count,
             offsets.data());
  write_rows(g, store::kShapes.name, file_type(store::kShapes.type),
             memory_type(store::kShapes.type), dxpl, {total_count, store::kShapes.columns},
             index_offset, my_count, shapes.data());
  write_rows(g, store::kLabels.name, file_type(store::kLabels.type),
             memory_type(store::kLabels.type), dxpl, {total_count}, index_offset, my_count,
             labels.data());
  H5Id name_type = fixed_string_type(name_len);
  write_rows(g, store::kNames.name, name_type.get(), name_type.get(), dxpl, {total_count},
             index_offset, my_count, names.data());
  group.close();
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
    std::error_code ec;
    if (o.images_dir.empty() || o.out.empty())
      problem = "--images and --out are required";
    else if (!(o.train_fraction >= 0.0 && o.train_fraction <= 1.0))
      problem = "--train-fraction must be in [0, 1]";
    else if (o.max_side < 0)
      problem = "--max-side must be >= 0";
    else if (!fs::is_directory(o.images_dir, ec))
      problem = "--images " + o.images_dir + " is not a folder";
    else {
      const fs::path parent = fs::absolute(fs::path(o.out), ec).parent_path();
      if (!fs::is_directory(parent, ec))
        problem = "--out: folder " + parent.string() + " does not exist";
      else if (fs::is_directory(o.out, ec))
        problem = "--out " + o.out + " is a folder";
      else if (access(parent.c_str(), W_OK) != 0)
        problem = "--out: folder " + parent.string() + " is not writable";
    }
    if (problem.empty()) {
      try {
        entries = classify_folder(o.images_dir);
      } catch (const std::exception& e) {
        problem = std::string("cannot list ") + o.images_dir + ": " + e.what();
      }
    }
  }
  agree_or_throw(problem, comm);

  // The folder listing, from rank 0 (one view of the file system for all).
  {
    std::vector<std::string> flat;
    for (const auto& e : entries) {
      flat.push_back(e.first);
      flat.push_back(e.second);
    }
    flat = pets::comm::allgather_strings(flat, comm);  // only rank 0 contributes
    entries.clear();
    for (std::size_t i = 0; i + 1 < flat.size(); i += 2) entries.emplace_back(flat[i], flat[i + 1]);
  }
  std::vector<std::string> candidates;
  std::vector<NameReason> skipped;
  for (const auto& e : entries) {
    if (e.second.empty())
      candidates.push_back(e.first);
    else
      skipped.push_back(e);
  }
  std::vector<std::string> candidate_labels;
  for (const auto& c : candidates) candidate_labels.push_back(*label_from_filename(c));
  const std::vector<std::string> label_names = sorted_labels(candidate_labels);
  std::vector<std::int32_t> label_of;
  for (const auto& l : candidate_labels) label_of.push_back(label_id(label_names, l));
  std::size_t name_len = 1;
  for (const auto& c : candidates) name_len = std::max(name_len, c.size());

  // Decode this rank's contiguous block of candidates.
  const auto nc = static_cast<std::int64_t>(candidates.size());
  const std::int64_t lo = nc * rank / size, hi = nc * (rank + 1) / size;
  DecodeOptions dopt;
  dopt.max_side = o.max_side;
  dopt.max_pixels = o.max_pixels;
  Decoder decoder;
  std::vector<LocalImage> local;
  std::vector<std::int32_t> ok_local;
  std::vector<std::string> local_skips, local_warnings;
  for (std::int64_t i = lo; i < hi; ++i) {
    const std::string& name = candidates[static_cast<std::size_t>(i)];
    DecodeResult r = decoder.decode_file((fs::path(o.images_dir) / name).string(), dopt);
    ok_local.push_back(r.ok ? 1 : 0);
    if (r.ok) {
      for (const auto& w : r.warnings) {
        local_warnings.push_back(name);
        local_warnings.push_back(w);
      }
      local.push_back({i, std::move(r.image)});
    } else {
      local_skips.push_back(name);
      local_skips.push_back(r.reason);
    }
  }

  // Usable flags of all candidates, in candidate order (blocks are in rank order).
  std::vector<std::int32_t> ok_all(static_cast<std::size_t>(nc));
  {
    std::vector<int> counts(static_cast<std::size_t>(size)), displs(static_cast<std::size_t>(size));
    for (int r = 0; r < size; ++r) {
      displs[static_cast<std::size_t>(r)] = static_cast<int>(nc * r / size);
      counts[static_cast<std::size_t>(r)] = static_cast<int>(nc * (r + 1) / size - nc * r / size);
    }
    PETS_MPI_CHECK(MPI_Allgatherv(ok_local.data(), static_cast<int>(ok_local.size()), MPI_INT32_T,
                                  ok_all.data(), counts.data(), displs.data(), MPI_INT32_T, comm));
  }
  {
    const std::vector<std::string> s = pets::comm::allgather_strings(local_skips, comm);
    for (std::size_t i = 0; i + 1 < s.size(); i += 2) skipped.emplace_back(s[i], s[i + 1]);
    std::sort(skipped.begin(), skipped.end());
  }
  PreprocessSummary summary;
  {
    const std::vector<std::string> w = pets::comm::allgather_strings(local_warnings, comm);
    for (std::size_t i = 0; i + 1 < w.size(); i += 2) summary.warnings.emplace_back(w[i], w[i + 1]);
  }
  summary.skipped = skipped;
  summary.labels = static_cast<std::int64_t>(label_names.size());

  // The split over usable images depends on the images and the seed only.
  std::vector<std::int64_t> usable_index(static_cast<std::size_t>(nc), -1);
  std::int64_t n_usable = 0;
  for (std::int64_t i = 0; i < nc; ++i)
    if (ok_all[static_cast<std::size_t>(i)]) usable_index[static_cast<std::size_t>(i)] = n_usable++;
  if (n_usable == 0)
    throw UsageError("pets_preprocess: no usable image in " + o.images_dir + " (" +
                     std::to_string(skipped.size()) + " entries skipped)");
  const Split split = split_indices(n_usable, o.seed, o.train_fraction);
  std::vector<char> is_train(static_cast<std::size_t>(n_usable), 0);
  for (std::int64_t u : split.train) is_train[static_cast<std::size_t>(u)] = 1;
  std::vector<const LocalImage*> my_train, my_eval;
  for (const LocalImage& li : local)
    (is_train[static_cast<std::size_t>(usable_index[static_cast<std::size_t>(li.candidate)])]
         ? my_train
         : my_eval)
        .push_back(&li);
  summary.stored = n_usable;
  summary.train = static_cast<std::int64_t>(split.train.size());
  summary.eval = static_cast<std::int64_t>(split.eval.size());

  // Write under a temporary name beside --out; rename only once the file is closed.
  int pid = static_cast<int>(getpid());
  PETS_MPI_CHECK(MPI_Bcast(&pid, 1, MPI_INT, 0, comm));
  const std::string tmp = o.out + ".tmp." + std::to_string(pid);
  TmpFileGuard guard(tmp);
  {
    H5Id fapl(PETS_H5_CHECK(H5Pcreate(H5P_FILE_ACCESS)));
    PETS_H5_CHECK(H5Pset_fapl_mpio(fapl.get(), comm, MPI_INFO_NULL));
    PETS_H5_CHECK(store::set_store_format(fapl.get()));
    H5Id file(H5Fcreate(tmp.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl.get()));
    if (!file.valid()) PETS_ERROR("cannot create " + tmp + ": " + hdf5_error_stack());
    H5Id dxpl(PETS_H5_CHECK(H5Pcreate(H5P_DATASET_XFER)));
    PETS_H5_CHECK(H5Pset_dxpl_mpio(dxpl.get(), H5FD_MPIO_COLLECTIVE));
    const hid_t f = file.get();
    write_string_attr(f, store::kLabelNames.name, label_names, false);
    write_scalar_attr<std::uint64_t>(f, store::kSeed, o.seed);
    write_scalar_attr<double>(f, store::kTrainFraction, o.train_fraction);
    write_scalar_attr<std::int32_t>(f, store::kMaxSide, o.max_side);
    write_scalar_attr<std::int32_t>(f, store::kSchemaVersion, store::kVersion);
    write_string_attr(f, store::kToolVersion.name, {std::string("pets_preprocess ") + PETS_VERSION},
                      true);
    write_split(f, split_name(SplitKind::kTrain), my_train, label_of, candidates, name_len, comm,
                dxpl.get());
    write_split(f, split_name(SplitKind::kEval), my_eval, label_of, candidates, name_len, comm,
                dxpl.get());
    write_table(f, store::kSkippedTable, summary.skipped, rank, dxpl.get());
    write_table(f, store::kWarningsTable, summary.warnings, rank, dxpl.get());
    file.close();
  }
  int renamed = 1;
  if (rank == 0) renamed = std::rename(tmp.c_str(), o.out.c_str()) == 0 ? 1 : 0;
  PETS_MPI_CHECK(MPI_Bcast(&renamed, 1, MPI_INT, 0, comm));
  PETS_CHECK(renamed == 1, "cannot rename " + tmp + " to " + o.out);
  guard.commit();
  return summary;
}

}  // namespace pets::data
