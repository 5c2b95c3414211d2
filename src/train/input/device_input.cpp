#include "pets/train/input/device_input.hpp"

#include <torch/torch.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>

#include "pets/train/device/cuda_parts.hpp"
#include "pets/train/input/batch_resize.hpp"
#include "pets/train/input/resident_images.hpp"
#include "pets/util/error.hpp"

namespace pets::train {

std::int64_t crop_bytes(const data::CropBox& box) {
  return static_cast<std::int64_t>(box.height) * box.width * 3;
}

void copy_crop(const data::Image& image, const data::CropBox& box, std::uint8_t* dst) {
  PETS_CHECK(box.height > 0 && box.width > 0 && box.top >= 0 && box.left >= 0 &&
                 box.top + box.height <= image.height && box.left + box.width <= image.width,
             "copy_crop: crop box outside the " + std::to_string(image.height) + "x" +
                 std::to_string(image.width) + " image");
  PETS_CHECK(image.pixels.size() == static_cast<std::size_t>(image.height) * image.width * 3,
             "copy_crop: image pixel count does not match its size");
  const std::size_t row = static_cast<std::size_t>(box.width) * 3;
  const std::uint8_t* src =
      image.pixels.data() + (static_cast<std::size_t>(box.top) * image.width + box.left) * 3;
  const std::size_t src_stride = static_cast<std::size_t>(image.width) * 3;
  for (int y = 0; y < box.height; ++y, src += src_stride, dst += row) std::memcpy(dst, src, row);
}

HostCrops stage_crops(const std::vector<CropSource>& crops, bool pinned) {
  HostCrops out;
  out.slots.reserve(crops.size());
  std::int64_t total = 0, widest = 0;
  for (const CropSource& c : crops) {
    PETS_CHECK(c.image != nullptr, "stage_crops: no image");
    out.slots.push_back(CropSlot{total, c.box.height, c.box.width});
    total += crop_bytes(c.box);
    widest = std::max<std::int64_t>(widest, c.box.width);
  }
  out.bytes =
      at::empty({total + widest * 3}, at::TensorOptions().dtype(at::kByte).pinned_memory(pinned));
  std::uint8_t* base = out.bytes.data_ptr<std::uint8_t>();
  for (std::size_t i = 0; i < crops.size(); ++i)
    copy_crop(*crops[i].image, crops[i].box, base + out.slots[i].offset);
  return out;
}

struct DeviceInput::Impl {
  at::Tensor scale;  ///< [1, 3, 1, 1] on the device
  at::Tensor shift;
  std::unique_ptr<InputStream> stream;  ///< CUDA only
  const CudaParts* cuda = nullptr;      ///< CUDA only: the resize kernel
};

DeviceInput::DeviceInput(const c10::Device& device, int size, c10::ScalarType dtype)
    : device_(device), size_(size), dtype_(dtype), pinned_(false), impl_(std::make_unique<Impl>()) {
  PETS_CHECK(size > 0, "device input: image size must be positive");
  PETS_CHECK(dtype == at::kFloat || dtype == at::kBFloat16 || dtype == at::kHalf,
             std::string("device input: unsupported dtype ") + c10::toString(dtype));
  if (device_.is_cuda()) {
    const CudaParts* cuda = cuda_parts();
    PETS_CHECK(cuda != nullptr, "device input: this LibTorch was built without CUDA");
    PETS_CHECK(torch::cuda::is_available(), "device input: CUDA device requested, none available");
    impl_->stream = cuda->input_stream(device_);
    impl_->cuda = cuda;
    device_ = impl_->stream->device();
    pinned_ = true;
  } else {
    PETS_CHECK(device_.is_cpu(), "device input: unsupported device " + device_.str());
  }
  InputNormalization norm = input_normalization(device_);
  impl_->scale = std::move(norm.scale);
  impl_->shift = std::move(norm.shift);
}

DeviceInput::~DeviceInput() = default;
DeviceInput::DeviceInput(DeviceInput&&) noexcept = default;
DeviceInput& DeviceInput::operator=(DeviceInput&&) noexcept = default;

HostCrops DeviceInput::stage(const std::vector<CropSource>& crops) const {
  return stage_crops(crops, pinned_);
}

PendingImages DeviceInput::submit(const HostCrops& crops) {
  torch::NoGradGuard no_grad;
  PETS_CHECK(crops.bytes.defined() && crops.bytes.device().is_cpu() &&
                 crops.bytes.scalar_type() == at::kByte && crops.bytes.dim() == 1,
             "device input: staged crops must be a flat uint8 host buffer");
  check_slots(crops.slots, crops.bytes.numel(), "device input", "the staged bytes");
  if (!impl_->stream)
    return PendingImages(
        resize_normalize(crops.bytes, crops.slots, size_, impl_->scale, impl_->shift, dtype_));
  return impl_->stream->submit(crops.bytes, [&](const at::Tensor& on_device) {
    return impl_->cuda->resize_normalize(on_device, crops.slots, size_, impl_->scale, impl_->shift,
                                         dtype_);
  });
}

PendingImages DeviceInput::submit(const ResidentImages& images,
                                  const std::vector<CropSlot>& slots) {
  torch::NoGradGuard no_grad;
  const at::Tensor& bytes = images.bytes();
  PETS_CHECK(bytes.device() == device_, "device input: the resident images are on " +
                                            bytes.device().str() + ", the input on " +
                                            device_.str());
  check_slots(slots, bytes.numel(), "device input", "the resident images");
  if (!impl_->stream)
    return PendingImages(resize_normalize(bytes, slots, size_, impl_->scale, impl_->shift, dtype_));
  return impl_->stream->run(bytes, [&] {
    return impl_->cuda->resize_normalize(bytes, slots, size_, impl_->scale, impl_->shift, dtype_);
  });
}

}  // namespace pets::train
