#pragma once
/// \file
/// The input pipeline's device half, for a GPU that a CPU loader cannot keep busy. The loader
/// side only copies bytes: each image's RandomResizedCrop box (data::random_resized_crop_box,
/// the CPU path's rule) is copied row by row out of the stored uint8 image into one host buffer
/// per batch, page-locked when the device is CUDA. DeviceInput uploads that buffer with one
/// non-blocking copy on its own CUDA stream and, on that stream, resizes all crops at once (on
/// CUDA one kernel, CudaParts::resize_normalize; on the CPU device pets/train/input/batch_resize, a
/// fixed number of ATen calls per batch, which the kernel is checked against) to size x size
/// (antialiased bilinear: the triangle filter with its support scaled by the reduction factor, the
/// rule of PIL and of data::resize_crop_bilinear) and normalises with data::kMean / data::kStd. The
/// result is the [n, 3, size, size] channels-last tensor the model takes, in float32 or a requested
/// bf16 / fp16. The same code runs on the CPU device, where the tests compare it with
/// data::transform_train / transform_eval.
///
/// Why the crop is a host-side byte copy and not an index on the device: the stored image has to
/// be copied into pinned memory anyway (the store reads into ordinary memory), so copying only the
/// box costs nothing extra and uploads a quarter fewer bytes on average (the box is 50-100 % of
/// the area); the device then sees one packed buffer and per-crop offsets.

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "pets/data/image.hpp"
#include "pets/train/device/crop_slot.hpp"
#include "pets/train/device/pending_images.hpp"

namespace pets::train {

class ResidentImages;

/// The device path's stated tolerance against the CPU path (data::transform_train /
/// transform_eval of the same boxes), in normalised units, where one grey level is 0.0153 to
/// 0.0175. The bounds were set for LibTorch's antialiased interpolate (its own float taps; max
/// |diff| 7.1e-5, mean 1.9e-6, per crop at most 5.3e-6 over 80 crops of 60 to 1203 px, LibTorch
/// 1.13, CPU) and are kept for the batched resize (pets/train/input/batch_resize), which applies
/// the CPU path's own taps and weights and differs from it only in the order of the float sums: max
/// |diff| 1.7e-6, mean 1.1e-7 over 76 random crops of 1 to 1203 px
/// (tests/train/input/test_device_input.cpp).
inline constexpr double kInputMaxAbsDiff = 1.5e-4;     ///< any value
inline constexpr double kInputCropMeanAbsDiff = 1e-5;  ///< mean over one image
inline constexpr double kInputMeanAbsDiff = 4e-6;      ///< mean over many images

/// One crop to stage: `box` of `*image` (which must outlive the call).
struct CropSource {
  const data::Image* image = nullptr;
  data::CropBox box;
};

/// A batch of uint8 RGB crops packed one after another in one host buffer. stage_crops and the
/// loader leave one row of the widest crop (its width * 3 bytes) unused after the last crop:
/// resize_normalize reads every row as wide as the widest, and with that room it reads each crop
/// from its own first byte, as it reads crops cut out of whole images (ResidentImages), so that
/// both give the same result bit for bit.
struct HostCrops {
  at::Tensor bytes;             ///< uint8 [total bytes] on the CPU; pinned when staged for CUDA
  std::vector<CropSlot> slots;  ///< one per image, in batch order

  std::int64_t size() const { return static_cast<std::int64_t>(slots.size()); }
};

/// Bytes of `box` as packed HWC uint8.
std::int64_t crop_bytes(const data::CropBox& box);

/// Copies `box` of `image` to `dst` (crop_bytes(box) bytes), one memcpy per row. Throws
/// pets::Error when the box does not lie inside the image.
void copy_crop(const data::Image& image, const data::CropBox& box, std::uint8_t* dst);

/// Packs the crops into one new host buffer, page-locked when `pinned` (which needs CUDA), with
/// the widest crop's row unused after them (HostCrops).
HostCrops stage_crops(const std::vector<CropSource>& crops, bool pinned);

/// Uploads, resizes and normalises staged crops on one device (or cuts them out of the images it
/// holds: pets/train/input/resident_images.hpp).
class DeviceInput {
 public:
  /// `size`: output side in pixels; `dtype`: float32, bfloat16 or float16 (the arithmetic is
  /// float32 throughout, converted once at the end). On a CUDA device, takes a stream of its
  /// own from LibTorch's pool (pets/train/device/cuda_parts.hpp); throws pets::Error where the
  /// build or the machine has no CUDA.
  DeviceInput(const c10::Device& device, int size, c10::ScalarType dtype = c10::ScalarType::Float);
  ~DeviceInput();
  DeviceInput(DeviceInput&&) noexcept;
  DeviceInput& operator=(DeviceInput&&) noexcept;
  DeviceInput(const DeviceInput&) = delete;
  DeviceInput& operator=(const DeviceInput&) = delete;

  const c10::Device& device() const { return device_; }
  int size() const { return size_; }
  c10::ScalarType dtype() const { return dtype_; }
  /// Whether staging for this device is page-locked (a CUDA device with CUDA available).
  bool pinned() const { return pinned_; }

  /// stage_crops(crops, pinned()): the loader side; any thread.
  HostCrops stage(const std::vector<CropSource>& crops) const;

  /// Enqueues the upload, the resizes and the normalisation (on CUDA on the input stream; the
  /// host returns as soon as the kernels are queued) and returns the images to come. `crops`
  /// may be released right after: a pinned buffer is not reused before its copy completes.
  PendingImages submit(const HostCrops& crops);

  /// submit(crops).get().
  at::Tensor operator()(const HostCrops& crops) { return submit(crops).get(); }

  /// The same for crops already on this device: `slots` of `images` (ResidentImages::slot), cut
  /// and resized there, nothing uploaded but the slots. Throws pets::Error when `images` are on
  /// another device or a slot lies outside them.
  PendingImages submit(const ResidentImages& images, const std::vector<CropSlot>& slots);

 private:
  struct Impl;
  c10::Device device_;
  int size_;
  c10::ScalarType dtype_;
  bool pinned_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace pets::train
