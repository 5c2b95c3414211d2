#pragma once
/// \file
/// The schema of the preprocessed image store, defined once: the names, element types and
/// ranks of every attribute and dataset, and the version. pets_preprocess writes it
/// (StoreWriter, data/store_writer.cpp), Store reads and validates it (data/store_reader.cpp), and
/// the fuzzer's mutator, the bad-store tool and the tests name its parts through these constants.
///
///     /                     attributes: label_names (fixed strings [labels], id order),
///                           seed (uint64), train_fraction (double), max_side (int32),
///                           schema_version (int32), tool_version (fixed string),
///                           store_id (fixed string: 32 hex digits, random, new for every file
///                           pets_preprocess writes; a checkpoint records it, see train/)
///     /train, /eval         pixels  uint8 [total bytes], chunked, all images HWC back to back
///                           offsets uint64 [n]     first byte of image i in pixels
///                           shapes  int32 [n, 3]   (height, width, 3)
///                           labels  int32 [n]      index into label_names
///                           names   string [n]     source file name
///     /skipped              compound {name, reason} [m]: files not stored, and why
///     /warnings             compound {name, reason} [k]: stored files with decoder warnings
///
/// Numbers are stored little-endian; strings are fixed-length and NUL-padded.
///
/// The file proves its own integrity: it is written in HDF5's newest file format
/// (set_store_format: superblock version 3, version-2 object headers, array and B-tree chunk
/// indexes, all with checksums of their metadata), and every dataset is chunked with the
/// Fletcher32 checksum filter (set_checksummed_chunks), so HDF5 itself refuses a changed byte
/// of metadata when it loads it and of data when it reads the chunk.

#include <hdf5.h>

#include <cstddef>
#include <cstdint>
#include <string>

namespace pets::data::store {

/// The schema version this code writes and reads. Version 1 (pets_train 0.x before the
/// checksummed format) wrote HDF5's earliest format, unchecksummed: refused with a request to
/// rerun pets_preprocess.
inline constexpr std::int32_t kVersion = 2;

/// The oldest HDF5 superblock version a store may have: versions 2 and 3 carry a checksum,
/// and files written with them hold only checksummed object headers.
inline constexpr int kMinSuperblockVersion = 2;

/// Sets a file access property list to write the store's format: the newest HDF5 file format
/// this library knows, as both bounds (HDF5 1.10: H5F_LIBVER_V110, superblock version 3).
inline herr_t set_store_format(hid_t fapl) {
  return H5Pset_libver_bounds(fapl, H5F_LIBVER_LATEST, H5F_LIBVER_LATEST);
}

/// Sets a dataset creation property list to chunks of `chunk` (rank = its size) with the
/// Fletcher32 checksum of each chunk, computed on write and checked on every read.
inline herr_t set_checksummed_chunks(hid_t dcpl, int rank, const hsize_t* chunk) {
  if (H5Pset_chunk(dcpl, rank, chunk) < 0) return -1;
  return H5Pset_fletcher32(dcpl);
}

/// The rows of one chunk of the other datasets (at most 4096 rows: 256 KB of names).
inline hsize_t index_chunk_rows(hsize_t rows) { return rows < 1 ? 1 : rows > 4096 ? 4096 : rows; }

/// The element type of an attribute or dataset.
struct ElementType {
  H5T_class_t type_class;  ///< H5T_INTEGER, H5T_FLOAT or H5T_STRING (fixed length)
  std::size_t size;        ///< bytes per element; 0 for strings (any length)
  H5T_sign_t sign;         ///< integers: H5T_SGN_NONE or H5T_SGN_2; others H5T_SGN_ERROR
};

inline constexpr ElementType kUint8{H5T_INTEGER, 1, H5T_SGN_NONE};
inline constexpr ElementType kUint64{H5T_INTEGER, 8, H5T_SGN_NONE};
inline constexpr ElementType kInt32{H5T_INTEGER, 4, H5T_SGN_2};
inline constexpr ElementType kFloat64{H5T_FLOAT, 8, H5T_SGN_ERROR};
inline constexpr ElementType kString{H5T_STRING, 0, H5T_SGN_ERROR};

/// One attribute or dataset: its name, element type and rank (0: a scalar attribute).
struct Field {
  const char* name;
  ElementType type;
  int rank;
  hsize_t columns = 0;  ///< the second extent of a rank-2 dataset
};

/// Root attributes.
inline constexpr Field kLabelNames{"label_names", kString, 1};
inline constexpr Field kSeed{"seed", kUint64, 0};
inline constexpr Field kTrainFraction{"train_fraction", kFloat64, 0};
inline constexpr Field kMaxSide{"max_side", kInt32, 0};
inline constexpr Field kSchemaVersion{"schema_version", kInt32, 0};
inline constexpr Field kToolVersion{"tool_version", kString, 0};
/// The layout pets_preprocess read ("names", "folders", "split") and how it split the images
/// ("random", "stratified", "given": the folders'). Stores written before them have neither.
inline constexpr Field kLayout{"layout", kString, 0};
inline constexpr Field kSplit{"split", kString, 0};
/// The store's identity: 128 random bits as 32 hex digits. Stores written before it have none.
inline constexpr Field kStoreId{"store_id", kString, 0};

/// The two split groups.
inline constexpr const char* kTrainGroup = "train";
inline constexpr const char* kEvalGroup = "eval";

/// The datasets of each split group; all but pixels have one row per image.
inline constexpr Field kPixels{"pixels", kUint8, 1};
inline constexpr Field kOffsets{"offsets", kUint64, 1};
inline constexpr Field kShapes{"shapes", kInt32, 2, 3};
inline constexpr Field kLabels{"labels", kInt32, 1};
inline constexpr Field kNames{"names", kString, 1};

/// The (name, reason) tables at the root, and their two members.
inline constexpr const char* kSkippedTable = "skipped";
inline constexpr const char* kWarningsTable = "warnings";
inline constexpr const char* kRowName = "name";
inline constexpr const char* kRowReason = "reason";

/// "train/labels": the path of a split's dataset relative to the root.
inline std::string dataset_path(const char* group, const Field& field) {
  return std::string(group) + "/" + field.name;
}

/// The little-endian file type of a numeric element type (the writer's choice).
inline hid_t file_type(const ElementType& t) {
  if (t.type_class == H5T_FLOAT) return H5T_IEEE_F64LE;
  if (t.size == 1) return t.sign == H5T_SGN_NONE ? H5T_STD_U8LE : H5T_STD_I8LE;
  if (t.size == 4) return t.sign == H5T_SGN_NONE ? H5T_STD_U32LE : H5T_STD_I32LE;
  return t.sign == H5T_SGN_NONE ? H5T_STD_U64LE : H5T_STD_I64LE;
}

/// The native memory type of a numeric element type (what readers and writers convert to).
inline hid_t memory_type(const ElementType& t) {
  if (t.type_class == H5T_FLOAT) return H5T_NATIVE_DOUBLE;
  if (t.size == 1) return t.sign == H5T_SGN_NONE ? H5T_NATIVE_UINT8 : H5T_NATIVE_INT8;
  if (t.size == 4) return t.sign == H5T_SGN_NONE ? H5T_NATIVE_UINT32 : H5T_NATIVE_INT32;
  return t.sign == H5T_SGN_NONE ? H5T_NATIVE_UINT64 : H5T_NATIVE_INT64;
}

}  // namespace pets::data::store
