#pragma once
/// \file
/// Every image of a store held in the model device's memory, so that the loader's batches carry
/// only crop boxes (data::LoaderOutput::kBoxes) and the device cuts each crop straight out of
/// the stored image: no pixel copy on the host per batch, no upload per batch. The images are
/// read once at start-up through the store's reads (Store::read_crop: each pixel chunk's
/// Fletcher32 sum checked as on every read) into a bounded page-locked staging buffer and
/// uploaded from it, chunk after chunk, into one uint8 tensor: each image packed HWC as stored,
/// the training split's images first, then the evaluation split's. A crop is then a CropSlot
/// with the image's row as its stride, and DeviceInput resizes it with the same taps and
/// arithmetic as the same crop staged: the same images, bit for bit.

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <cstdint>
#include <vector>

#include "pets/data/image.hpp"
#include "pets/data/store_reader.hpp"
#include "pets/train/device/crop_slot.hpp"

namespace pets::train {

/// The staging buffer's default size: large enough that each upload moves tens of megabytes at
/// the copy engine's speed, small enough to leave the host's page-locked memory alone.
inline constexpr std::int64_t kResidentStagingBytes = std::int64_t{32} << 20;

/// Every image of one store on one device.
class ResidentImages {
 public:
  /// The bytes the images of `store` take (both splits): what ResidentImages holds.
  static std::int64_t bytes_of(const data::Store& store);

  /// Reads every image of `store` (which need not outlive this) with `threads` threads into a
  /// staging buffer of `staging_bytes` (at least the largest image; page-locked when `device` is
  /// CUDA) and uploads each fill to `device`. On the CPU device the images are read straight
  /// into the tensor. Throws what the store's reads throw (pets::UsageError for damaged pixels),
  /// and c10::OutOfMemoryError when the device has no room.
  ResidentImages(const data::Store& store, const c10::Device& device, int threads = 4,
                 std::int64_t staging_bytes = kResidentStagingBytes);

  /// The images: a flat uint8 tensor on the device (the images' bytes, then one unused row of
  /// the widest image, as HostCrops has after its crops).
  const at::Tensor& bytes() const { return bytes_; }
  /// The images' bytes: bytes_of(the store).
  std::int64_t size_bytes() const { return images_bytes_; }

  /// Where `box` of image `index` of split `kind` lies in bytes(): the box's top-left pixel, its
  /// sides, and the image's row (width * 3) as the stride. Throws pets::Error for an index or a
  /// box outside the store's images.
  CropSlot slot(data::SplitKind kind, std::int64_t index, const data::CropBox& box) const;

 private:
  struct Placed {
    std::int64_t offset = 0;
    int height = 0;
    int width = 0;
  };
  const std::vector<Placed>& placed(data::SplitKind kind) const {
    return kind == data::SplitKind::kTrain ? train_ : eval_;
  }

  at::Tensor bytes_;
  std::int64_t images_bytes_ = 0;
  std::vector<Placed> train_;
  std::vector<Placed> eval_;
};

}  // namespace pets::train
