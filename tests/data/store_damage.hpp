#pragma once
// Damage to a store's bytes, one at a time, for the store tests and make_bad_store: where a
// byte of the superblock, of an object header or of a dataset's first chunk lies, a bit flip,
// and a copy written as pets_preprocess wrote schema version 1 (HDF5's earliest format, no
// checksums). Every function throws std::runtime_error when the file is not as expected.
#include <cstdint>
#include <string>

namespace pets::data::testing {

/// A byte of the superblock's checksummed part (the base address), past the signature.
inline constexpr std::uint64_t kSuperblockByte = 20;

/// The file offset of the last byte of messages in the object header of `object` ("/" or a
/// path such as "train/labels"), just before the checksum of its first chunk.
std::uint64_t header_byte(const std::string& file, const std::string& object);

/// The file offset of a byte inside the stored first chunk of `dataset`.
std::uint64_t chunk_byte(const std::string& file, const std::string& dataset);

/// Flips the lowest bit of the byte at `offset` of `file`.
void flip_byte(const std::string& file, std::uint64_t offset);

/// Writes to `out` the contents of the store `good` as pets_preprocess wrote schema version 1:
/// HDF5's earliest format (superblock version 0, version-1 object headers), no filters (the
/// pixels in 1 MiB chunks, everything else contiguous), schema_version 1.
void write_version1_store(const std::string& good, const std::string& out);

}  // namespace pets::data::testing
