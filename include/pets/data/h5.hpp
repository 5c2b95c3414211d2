#pragma once
/// \file
/// The HDF5 C API as the store uses it, with no knowledge of the store's schema: an owning
/// handle, the library lock, HDF5's error stack as text, and attribute and dataset I/O both ways
/// (fixed-length strings, numeric scalars, collective row writes into checksummed chunks). The
/// schema is in pets/data/store_schema.hpp; its reader and writer are store_reader.hpp and
/// store_writer.hpp. The C API because HDF5's C++ API does not support parallel HDF5.

#include <hdf5.h>

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <type_traits>
#include <vector>

#include "pets/util/error.hpp"

namespace pets::data {

/// Owns one HDF5 identifier (file, group, dataset, dataspace, datatype, property list or
/// attribute) and closes it with the matching H5?close. Move-only.
class H5Id {
 public:
  H5Id() = default;
  /// Takes ownership; a negative id (a failed call) is kept as "empty".
  explicit H5Id(hid_t id) : id_(id) {}
  ~H5Id() { reset(); }
  H5Id(const H5Id&) = delete;
  H5Id& operator=(const H5Id&) = delete;
  H5Id(H5Id&& other) noexcept : id_(other.release()) {}
  H5Id& operator=(H5Id&& other) noexcept;

  hid_t get() const { return id_; }
  bool valid() const { return id_ >= 0; }
  /// Gives up ownership without closing.
  hid_t release();
  /// Closes now (errors ignored: a destructor cannot report them; use close() for files).
  void reset();
  /// Closes and throws pets::Error with the HDF5 error stack when closing fails.
  void close();

 private:
  hid_t id_ = -1;
};

/// Turns off HDF5's automatic printing of its error stack (call once per process; idempotent).
void silence_hdf5_errors();

/// The current HDF5 error stack as one line ("major: minor: description; ..."), then clears it.
std::string hdf5_error_stack();

/// Only the innermost frame of the HDF5 error stack, where the fault was found ("File has been
/// truncated (truncated file: eof = ...)"), then clears the stack: for messages to users, who
/// need the cause, not HDF5's call chain.
std::string hdf5_root_cause();

namespace h5 {

/// The HDF5 library of a parallel build is not thread-safe: every call into it from more than
/// one thread holds this lock.
std::mutex& library_mutex();

/// Why the last HDF5 call failed, read from its error stack (then cleared).
struct Failure {
  /// The description of the frame that found a checksum wrong when `checksum`; otherwise the
  /// innermost cause (hdf5_root_cause).
  std::string cause;
  /// A checksum did not match: the file's bytes changed since they were written. HDF5 1.10's
  /// words for it: "incorrect metadata checksum after all read attempts" (superblock, object
  /// headers, chunk indexes), "data error detected by Fletcher32 checksum" (a chunk's data).
  bool checksum = false;
};
Failure last_failure();

/// The extents of a dataset's or an attribute's dataspace ({} for a scalar or on failure).
std::vector<hsize_t> extent(hid_t dataset_or_attribute);

/// "[2, 3]".
std::string extent_text(const std::vector<hsize_t>& dims);

/// The native memory type of an arithmetic C++ type (uint8, int32, uint32, uint64, int64, double).
template <typename T>
hid_t native_type() {
  static_assert(std::is_arithmetic_v<T>);
  if constexpr (std::is_same_v<T, double>)
    return H5T_NATIVE_DOUBLE;
  else if constexpr (std::is_same_v<T, std::uint8_t>)
    return H5T_NATIVE_UINT8;
  else if constexpr (std::is_same_v<T, std::int32_t>)
    return H5T_NATIVE_INT32;
  else if constexpr (std::is_same_v<T, std::uint32_t>)
    return H5T_NATIVE_UINT32;
  else if constexpr (std::is_same_v<T, std::uint64_t>)
    return H5T_NATIVE_UINT64;
  else {
    static_assert(std::is_same_v<T, std::int64_t>, "no HDF5 native type chosen for this type");
    return H5T_NATIVE_INT64;
  }
}

/// A fixed-length, NUL-padded string type of `len` bytes (at least 1).
H5Id fixed_string_type(std::size_t len);

/// `n` fixed-length strings of `len` bytes, `stride` bytes apart from `data`, each cut at its
/// first NUL.
std::vector<std::string> unpack_fixed_strings(const char* data, std::size_t n, std::size_t len,
                                              std::size_t stride);

/// Reads every element of a fixed-length string dataset or attribute (a scalar is one element)
/// in its own type; false when HDF5's read fails (its error stack is left for last_failure).
/// The caller checks the type first: it must be a fixed-length string.
bool read_fixed_strings(hid_t dataset_or_attribute, std::vector<std::string>& out);

/// The name of the file `obj` lies in and the object's path in it, "<file>:/train/labels", for
/// messages.
std::string object_text(hid_t obj);

/// Opens dataset `name` below `parent`; throws pets::Error naming the file and the dataset's
/// path when there is none or it cannot be opened.
H5Id open_dataset(hid_t parent, const std::string& name);

/// Opens attribute `name` of `obj`; throws pets::Error naming the file, object and attribute
/// when there is none or it cannot be opened.
H5Id open_attribute(hid_t obj, const std::string& name);

/// An attribute of fixed-length strings (a scalar attribute gives one); throws pets::Error
/// naming it when it is missing, is not of fixed-length strings or cannot be read.
std::vector<std::string> read_string_attribute(hid_t obj, const std::string& name);

/// A scalar numeric attribute converted to T; throws pets::Error naming it when it is missing,
/// holds more than one value or cannot be converted.
template <typename T>
T read_scalar_attribute(hid_t obj, const std::string& name);

/// Writes `values` as an attribute of fixed-length strings as long as the longest: a scalar
/// attribute when `scalar` (one value), else one of `values.size()` elements.
void write_string_attribute(hid_t obj, const char* name, const std::vector<std::string>& values,
                            bool scalar);

/// Writes a scalar attribute of `file_type` holding `*value` of memory type `mem_type`.
void write_scalar_attribute(hid_t obj, const char* name, hid_t file_type, hid_t mem_type,
                            const void* value);

/// Collective: writes this rank's rows [first, first + rows) of `dataset`, whose extents are
/// `dims` (the first one global); ranks without rows take part with an empty selection.
void write_slab(hid_t dataset, hid_t mem_type, hid_t dxpl, const std::vector<hsize_t>& dims,
                hsize_t first, hsize_t rows, const void* data);

/// Collective: creates dataset `name` of extents `dims` (the first one global and unlimited, so
/// that it may be 0) with the creation properties `dcpl` (a chunked layout), then writes this
/// rank's rows [first, first + rows) as write_slab does.
void write_rows(hid_t parent, const char* name, hid_t file_type, hid_t mem_type, hid_t dcpl,
                hid_t dxpl, const std::vector<hsize_t>& dims, hsize_t first, hsize_t rows,
                const void* data);

}  // namespace h5
}  // namespace pets::data
