// make_bad_store GOOD.h5 OUTDIR: writes one damaged copy of a good image store per way a store
// can be wrong, and prints one line per copy: "FILE<TAB>TEXT", where TEXT is what the one error
// line of a program refusing FILE must contain. The test scripts feed these to pets_train.
#include <hdf5.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "pets/data/store_schema.hpp"
#include "store_damage.hpp"

namespace fs = std::filesystem;
namespace store = pets::data::store;
namespace damage = pets::data::testing;

namespace {

/// "train/labels": a split's dataset, as the edits open it.
std::string in(const char* group, const store::Field& field) {
  return store::dataset_path(group, field);
}
/// "/train/labels has the wrong type": how the store names a dataset in its errors.
std::string named(const char* group, const store::Field& field) { return "/" + in(group, field); }

const char* const kTrain = store::kTrainGroup;
const char* const kEval = store::kEvalGroup;

void check(bool ok, const std::string& what) {
  if (!ok) throw std::runtime_error(what);
}

hsize_t count_of(hid_t file, const std::string& dataset) {
  const hid_t d = H5Dopen2(file, dataset.c_str(), H5P_DEFAULT);
  check(d >= 0, "no dataset " + dataset);
  const hid_t sp = H5Dget_space(d);
  hsize_t dims[2] = {0, 0};
  H5Sget_simple_extent_dims(sp, dims, nullptr);
  H5Sclose(sp);
  H5Dclose(d);
  return dims[0];
}

/// Replaces `dataset` with an empty (fill-valued) one of `type` and `dims`.
void replace_dataset(hid_t file, const std::string& dataset, hid_t type,
                     const std::vector<hsize_t>& dims) {
  check(H5Ldelete(file, dataset.c_str(), H5P_DEFAULT) >= 0, "cannot delete " + dataset);
  const hid_t sp = H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr);
  const hid_t d =
      H5Dcreate2(file, dataset.c_str(), type, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  check(d >= 0, "cannot create " + dataset);
  H5Dclose(d);
  H5Sclose(sp);
}

template <typename T>
void write_first(hid_t file, const std::string& dataset, hid_t mem_type, T value) {
  const hid_t d = H5Dopen2(file, dataset.c_str(), H5P_DEFAULT);
  const hid_t sp = H5Dget_space(d);
  const int rank = H5Sget_simple_extent_ndims(sp);
  const hsize_t start[2] = {0, 0}, count[2] = {1, 1};
  H5Sselect_hyperslab(sp, H5S_SELECT_SET, start, nullptr, count, nullptr);
  const hid_t mem = H5Screate_simple(rank, count, nullptr);
  check(H5Dwrite(d, mem_type, mem, sp, H5P_DEFAULT, &value) >= 0, "cannot write " + dataset);
  H5Sclose(mem);
  H5Sclose(sp);
  H5Dclose(d);
}

struct Case {
  std::string file;
  std::string expect;
  std::function<void(hid_t)> edit;  ///< applied to a read-write copy; null: `raw` makes the file
  std::function<void(const std::string&)> raw;
};

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: make_bad_store GOOD.h5 OUTDIR\n");
    return 2;
  }
  const std::string good = argv[1];
  const fs::path out = argv[2];
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  const std::vector<Case> cases = {
      {"not_hdf5.h5", "not an HDF5 file", nullptr,
       [](const std::string& p) { std::ofstream(p) << "id,label\n1,cat\n"; }},
      {"truncated.h5", "truncated", nullptr,
       [&](const std::string& p) {
         fs::copy_file(good, p);
         fs::resize_file(p, fs::file_size(p) * 2 / 3);
       }},
      {"schema_newer.h5",
       std::string(store::kSchemaVersion.name) + " is " + std::to_string(store::kVersion + 1),
       [](hid_t f) {
         const hid_t a = H5Aopen(f, store::kSchemaVersion.name, H5P_DEFAULT);
         const int v = store::kVersion + 1;
         check(H5Awrite(a, H5T_NATIVE_INT, &v) >= 0, "cannot write schema_version");
         H5Aclose(a);
       },
       nullptr},
      {"labels_float.h5", named(kTrain, store::kLabels) + " has the wrong type",
       [](hid_t f) {
         replace_dataset(f, in(kTrain, store::kLabels), H5T_IEEE_F32LE,
                         {count_of(f, in(kTrain, store::kLabels))});
       },
       nullptr},
      // Same size, other sign: read as uint8, every negative pixel would silently become 0.
      {"pixels_int8.h5", named(kEval, store::kPixels) + " has the wrong type",
       [](hid_t f) {
         replace_dataset(f, in(kEval, store::kPixels), H5T_STD_I8LE,
                         {count_of(f, in(kEval, store::kPixels))});
       },
       nullptr},
      {"pixels_2d.h5", named(kTrain, store::kPixels) + " has shape [",
       [](hid_t f) {
         replace_dataset(f, in(kTrain, store::kPixels), store::file_type(store::kPixels.type),
                         {count_of(f, in(kTrain, store::kPixels)) / 3, 3});
       },
       nullptr},
      {"shapes_2_columns.h5", named(kTrain, store::kShapes) + " has shape [",
       [](hid_t f) {
         replace_dataset(f, in(kTrain, store::kShapes), store::file_type(store::kShapes.type),
                         {count_of(f, in(kTrain, store::kShapes)), store::kShapes.columns - 1});
       },
       nullptr},
      {"label_out_of_range.h5", "has label 99",
       [](hid_t f) { write_first<int>(f, in(kEval, store::kLabels), H5T_NATIVE_INT, 99); },
       nullptr},
      {"label_negative.h5", "has label -1",
       [](hid_t f) { write_first<int>(f, in(kTrain, store::kLabels), H5T_NATIVE_INT, -1); },
       nullptr},
      {"counts_disagree.h5", "disagree on the image count",
       [](hid_t f) {
         replace_dataset(f, in(kTrain, store::kOffsets), store::file_type(store::kOffsets.type),
                         {count_of(f, in(kTrain, store::kOffsets)) - 1});
       },
       nullptr},
      {"offset_past_pixels.h5", "lies outside " + named(kTrain, store::kPixels),
       [](hid_t f) {
         write_first<std::uint64_t>(f, in(kTrain, store::kOffsets), H5T_NATIVE_UINT64, 1ull << 40);
       },
       nullptr},
      // A store of the previous schema version, as pets_preprocess wrote it (no checksums).
      {"schema_v1.h5", "rerun pets_preprocess", nullptr,
       [&](const std::string& p) { damage::write_version1_store(good, p); }},
      // One bit flipped in the bytes HDF5 checks: the superblock, object headers, a chunk.
      {"superblock_byte.h5", "the file is damaged (incorrect metadata checksum", nullptr,
       [&](const std::string& p) {
         fs::copy_file(good, p);
         damage::flip_byte(p, damage::kSuperblockByte);
       }},
      {"root_header_byte.h5", "the file is damaged (incorrect metadata checksum", nullptr,
       [&](const std::string& p) {
         fs::copy_file(good, p);
         damage::flip_byte(p, damage::header_byte(p, "/"));
       }},
      {"labels_header_byte.h5",
       named(kTrain, store::kLabels) + ": the file is damaged (incorrect metadata checksum",
       nullptr,
       [&](const std::string& p) {
         fs::copy_file(good, p);
         damage::flip_byte(p, damage::header_byte(p, in(kTrain, store::kLabels)));
       }},
      // Found only when pets_train reads the chunk, in its first step.
      {"pixel_byte.h5", "(data error detected by Fletcher32 checksum)", nullptr,
       [&](const std::string& p) {
         fs::copy_file(good, p);
         damage::flip_byte(p, damage::chunk_byte(p, in(kTrain, store::kPixels)));
       }},
  };
  try {
    fs::create_directories(out);
    for (const Case& c : cases) {
      const std::string path = (out / c.file).string();
      fs::remove(path);
      if (c.raw) {
        c.raw(path);
      } else {
        fs::copy_file(good, path);
        const hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
        check(f >= 0, "cannot open " + path);
        c.edit(f);
        check(H5Fclose(f) >= 0, "cannot close " + path);
      }
      std::printf("%s\t%s\n", path.c_str(), c.expect.c_str());
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "make_bad_store: %s\n", e.what());
    return 1;
  }
  return 0;
}
