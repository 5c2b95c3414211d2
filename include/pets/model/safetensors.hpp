#pragma once
/// \file
/// The safetensors format (8-byte little-endian header length, a JSON header, raw little-endian
/// tensor data), without LibTorch: reading validates every claim of the header against the file,
/// writing is atomic (temporary file, fsync, rename, fsync of the folder).

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace pets::model {

enum class DType { F64, F32, F16, BF16, I64, I32, I16, I8, U8, BOOL };

/// The header spelling ("F32", "BF16", ...).
const char* dtype_name(DType dtype);
/// Bytes per element.
std::size_t dtype_size(DType dtype);

/// One entry of the header; `begin`/`end` are byte offsets into the data section.
struct TensorInfo {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  uint64_t begin = 0;
  uint64_t end = 0;

  int64_t numel() const;
};

/// A whole safetensors file held in memory, its header checked on open.
class SafetensorsFile {
 public:
  /// Reads and validates `path`; throws pets::Error naming the file and the key or byte offset.
  static SafetensorsFile open(const std::string& path);
  /// Validates an in-memory image of a file; `label` names it in messages.
  static SafetensorsFile parse(std::vector<uint8_t> bytes, const std::string& label);

  const std::string& path() const { return path_; }
  /// Entries in header order.
  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  /// The entry called `name`, or nullptr.
  const TensorInfo* find(const std::string& name) const;
  /// The entry called `name`; throws naming the key when absent.
  const TensorInfo& at(const std::string& name) const;
  /// Start of the entry's raw bytes.
  const uint8_t* data(const TensorInfo& info) const;
  /// The `__metadata__` string map (empty when absent).
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

 private:
  std::string path_;
  std::vector<uint8_t> bytes_;
  std::size_t data_start_ = 0;
  std::vector<TensorInfo> tensors_;
  std::map<std::string, std::string> metadata_;
};

/// A tensor to write: raw little-endian bytes of `dtype`, `shape` elements.
struct RawTensor {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
};

/// The bytes of a safetensors file of `tensors` (in order), as SafetensorsFile::parse reads them;
/// `label` names it in errors.
std::string safetensors_bytes(const std::vector<RawTensor>& tensors,
                              const std::map<std::string, std::string>& metadata,
                              const std::string& label);

/// Writes `tensors` (in order) to `path` atomically; an interrupted write never leaves a
/// partial file at `path`.
void write_safetensors(const std::string& path, const std::vector<RawTensor>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

}  // namespace pets::model
