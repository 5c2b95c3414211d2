#pragma once
/// \file
/// Where a crop lies in a flat uint8 buffer: the layout the input's resize (its ATen path and the
/// CUDA kernel behind pets/train/device/cuda_parts.hpp) reads.

#include <cstdint>
#include <string>
#include <vector>

namespace pets::train {

/// Where one crop lies in a flat uint8 buffer: `height` rows of width * 3 bytes (HWC), the first
/// from `offset`, each `stride` bytes after the one before. A HostCrops buffer packs its crops
/// (stride width * 3); a crop cut straight out of a whole stored image (ResidentImages) has the
/// image's row, its width * 3, as its stride.
struct CropSlot {
  std::int64_t offset = 0;
  int height = 0;
  int width = 0;
  std::int64_t stride = 0;  ///< bytes from one row's start to the next's; 0: width * 3 (packed)
};

/// `slot`'s bytes from one row to the next (its stride, or width * 3 when that is 0).
inline std::int64_t row_stride(const CropSlot& slot) {
  return slot.stride != 0 ? slot.stride : static_cast<std::int64_t>(slot.width) * 3;
}

/// One past `slot`'s last byte: where its last row ends.
inline std::int64_t slot_end(const CropSlot& slot) {
  return slot.offset + static_cast<std::int64_t>(slot.height - 1) * row_stride(slot) +
         static_cast<std::int64_t>(slot.width) * 3;
}

/// Whether `slot` is a non-empty crop lying inside `total` bytes, its rows no narrower than its
/// stride allows (stride >= width * 3).
inline bool slot_inside(const CropSlot& slot, std::int64_t total) {
  return slot.height > 0 && slot.width > 0 && slot.offset >= 0 &&
         row_stride(slot) >= static_cast<std::int64_t>(slot.width) * 3 && slot_end(slot) <= total;
}

/// Throws pets::Error "WHO: a crop slot is empty, narrower than its rows or runs past WHERE"
/// unless every slot is slot_inside `total` bytes (`where` names them: "the staged bytes").
void check_slots(const std::vector<CropSlot>& slots, std::int64_t total, const std::string& who,
                 const std::string& where);

}  // namespace pets::train
