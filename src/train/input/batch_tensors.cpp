#include "pets/train/input/batch_tensors.hpp"

#include <torch/torch.h>

#include "pets/data/loader.hpp"
#include "pets/util/error.hpp"

namespace pets::train {

at::Tensor batch_images(data::Batch& batch, const c10::Device& device) {
  const int64_t n = batch.n, h = batch.h, w = batch.w;
  PETS_CHECK(static_cast<int64_t>(batch.pixels.size()) == n * h * w * 3,
             "batch of " + std::to_string(n) + " images of " + std::to_string(h) + "x" +
                 std::to_string(w) + " holds " + std::to_string(batch.pixels.size()) +
                 " pixel values");
  // NHWC memory seen as NCHW: the strides of channels-last, oneDNN's (and cuDNN's) fastest
  // convolution layout.
  return torch::from_blob(batch.pixels.data(), {n, 3, h, w}, {h * w * 3, 1, w * 3, 3},
                          torch::kFloat32)
      .to(device);
}

at::Tensor batch_labels(data::Batch& batch, const c10::Device& device) {
  const torch::Tensor labels = torch::from_blob(batch.labels.data(), {batch.n}, torch::kInt64);
  if (device.is_cpu()) return labels.to(device);
  // Through page-locked memory, so that the copy is queued without waiting for the device; the
  // pinned allocator keeps the block until the copy has read it.
  return labels.pin_memory().to(device, /*non_blocking=*/true);
}

}  // namespace pets::train
