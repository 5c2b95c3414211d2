#include "pets/data/store_writer.hpp"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <random>
#include <type_traits>

#include "pets/util/error.hpp"

namespace pets::data {

std::string new_store_id() {
  std::random_device bits;
  char text[33];
  std::snprintf(text, sizeof text, "%08x%08x%08x%08x", static_cast<unsigned>(bits()),
                static_cast<unsigned>(bits()), static_cast<unsigned>(bits()),
                static_cast<unsigned>(bits()));
  return text;
}

namespace {

/// The creation properties of a per-image dataset of extents `dims`: checksummed chunks of
/// store::index_chunk_rows rows.
H5Id index_dcpl(const std::vector<hsize_t>& dims) {
  std::vector<hsize_t> chunk = dims;
  chunk[0] = store::index_chunk_rows(dims[0]);
  H5Id dcpl(PETS_H5_CHECK(H5Pcreate(H5P_DATASET_CREATE)));
  PETS_H5_CHECK(
      store::set_checksummed_chunks(dcpl.get(), static_cast<int>(chunk.size()), chunk.data()));
  return dcpl;
}

/// A numeric per-image dataset of the schema.
void write_index(hid_t group, const store::Field& field, hid_t dxpl,
                 const std::vector<hsize_t>& dims, hsize_t first, hsize_t rows, const void* data) {
  H5Id dcpl = index_dcpl(dims);
  h5::write_rows(group, field.name, store::file_type(field.type), store::memory_type(field.type),
                 dcpl.get(), dxpl, dims, first, rows, data);
}

/// A scalar numeric root attribute of the schema.
template <typename T>
void write_scalar(hid_t file, const store::Field& field, T value) {
  static_assert(std::is_arithmetic_v<T>);
  h5::write_scalar_attribute(file, field.name, store::file_type(field.type),
                             store::memory_type(field.type), &value);
}

}  // namespace

StoreWriter::StoreWriter(const std::string& path, MPI_Comm comm) {
  PETS_MPI_CHECK(MPI_Comm_rank(comm, &rank_));
  H5Id fapl(PETS_H5_CHECK(H5Pcreate(H5P_FILE_ACCESS)));
  PETS_H5_CHECK(H5Pset_fapl_mpio(fapl.get(), comm, MPI_INFO_NULL));
  PETS_H5_CHECK(store::set_store_format(fapl.get()));
  file_ = H5Id(H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl.get()));
  if (!file_.valid()) PETS_ERROR("cannot create " + path + ": " + hdf5_error_stack());
  dxpl_ = H5Id(PETS_H5_CHECK(H5Pcreate(H5P_DATASET_XFER)));
  PETS_H5_CHECK(H5Pset_dxpl_mpio(dxpl_.get(), H5FD_MPIO_COLLECTIVE));
  for (SplitKind kind : {SplitKind::kTrain, SplitKind::kEval}) {
    Split& s = splits_[kind == SplitKind::kTrain ? 0 : 1];
    s.group = H5Id(PETS_H5_CHECK(
        H5Gcreate2(file_.get(), split_name(kind), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT)));
    H5Id dcpl(PETS_H5_CHECK(H5Pcreate(H5P_DATASET_CREATE)));
    const hsize_t chunk = 1 << 20;
    PETS_H5_CHECK(store::set_checksummed_chunks(dcpl.get(), 1, &chunk));
    const hsize_t dims = 0, max_dims = H5S_UNLIMITED;
    H5Id space(PETS_H5_CHECK(H5Screate_simple(1, &dims, &max_dims)));
    s.pixels = H5Id(PETS_H5_CHECK(H5Dcreate2(s.group.get(), store::kPixels.name,
                                             store::file_type(store::kPixels.type), space.get(),
                                             H5P_DEFAULT, dcpl.get(), H5P_DEFAULT)));
  }
}

void StoreWriter::append_pixels(SplitKind kind, std::uint64_t round_bytes, std::uint64_t offset,
                                const std::uint8_t* data, std::size_t bytes) {
  if (round_bytes == 0) return;
  Split& s = splits_[kind == SplitKind::kTrain ? 0 : 1];
  const hsize_t total = s.written + round_bytes;
  PETS_H5_CHECK(H5Dset_extent(s.pixels.get(), &total));
  h5::write_slab(s.pixels.get(), store::memory_type(store::kPixels.type), dxpl_.get(), {total},
                 s.written + offset, bytes, data);
  s.written = total;
}

void StoreWriter::write_split_rows(SplitKind kind, const SplitRows& rows) {
  Split& s = splits_[kind == SplitKind::kTrain ? 0 : 1];
  const std::size_t len = rows.name_length;
  std::vector<char> names(rows.names.size() * len, '\0');
  for (std::size_t k = 0; k < rows.names.size(); ++k)
    std::memcpy(names.data() + k * len, rows.names[k].data(), rows.names[k].size());
  const hid_t g = s.group.get();
  const hsize_t mine = rows.labels.size(), first = rows.first, count = rows.count;
  write_index(g, store::kOffsets, dxpl_.get(), {count}, first, mine, rows.offsets.data());
  write_index(g, store::kShapes, dxpl_.get(), {count, store::kShapes.columns}, first, mine,
              rows.shapes.data());
  write_index(g, store::kLabels, dxpl_.get(), {count}, first, mine, rows.labels.data());
  H5Id name_type = h5::fixed_string_type(len);
  H5Id dcpl = index_dcpl({count});
  h5::write_rows(g, store::kNames.name, name_type.get(), name_type.get(), dcpl.get(), dxpl_.get(),
                 {count}, first, mine, names.data());
  s.pixels.close();
  s.group.close();
}

void StoreWriter::write_attributes(const StoreAttributes& a) {
  const hid_t f = file_.get();
  h5::write_string_attribute(f, store::kLabelNames.name, a.label_names, false);
  write_scalar<std::uint64_t>(f, store::kSeed, a.seed);
  write_scalar<double>(f, store::kTrainFraction, a.train_fraction);
  write_scalar<std::int32_t>(f, store::kMaxSide, a.max_side);
  write_scalar<std::int32_t>(f, store::kSchemaVersion, store::kVersion);
  h5::write_string_attribute(f, store::kToolVersion.name, {a.tool_version}, true);
  h5::write_string_attribute(f, store::kStoreId.name, {a.store_id}, true);
  h5::write_string_attribute(f, store::kLayout.name, {a.layout}, true);
  h5::write_string_attribute(f, store::kSplit.name, {a.split}, true);
}

void StoreWriter::write_table(const char* name, const std::vector<NameReason>& rows) {
  std::size_t l0 = 1, l1 = 1;
  for (const auto& r : rows) {
    l0 = std::max(l0, r.first.size());
    l1 = std::max(l1, r.second.size());
  }
  H5Id t0 = h5::fixed_string_type(l0), t1 = h5::fixed_string_type(l1);
  H5Id type(PETS_H5_CHECK(H5Tcreate(H5T_COMPOUND, l0 + l1)));
  PETS_H5_CHECK(H5Tinsert(type.get(), store::kRowName, 0, t0.get()));
  PETS_H5_CHECK(H5Tinsert(type.get(), store::kRowReason, l0, t1.get()));
  std::vector<char> buf(rows.size() * (l0 + l1), '\0');
  for (std::size_t i = 0; i < rows.size(); ++i) {
    std::memcpy(buf.data() + i * (l0 + l1), rows[i].first.data(), rows[i].first.size());
    std::memcpy(buf.data() + i * (l0 + l1) + l0, rows[i].second.data(), rows[i].second.size());
  }
  const hsize_t n = rows.size();
  H5Id dcpl = index_dcpl({n});
  h5::write_rows(file_.get(), name, type.get(), type.get(), dcpl.get(), dxpl_.get(), {n}, 0,
                 rank_ == 0 ? n : 0, buf.data());
}

void StoreWriter::write_tables(const std::vector<NameReason>& skipped,
                               const std::vector<NameReason>& warnings) {
  write_table(store::kSkippedTable, skipped);
  write_table(store::kWarningsTable, warnings);
}

void StoreWriter::close() { file_.close(); }

}  // namespace pets::data
