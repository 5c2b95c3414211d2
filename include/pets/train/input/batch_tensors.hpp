#pragma once
/// \file
/// A loader batch as the tensors the model takes. The loader writes pixels channels-last (NHWC),
/// the layout the model's convolutions run in, so the images need no transposition: on the CPU
/// they are a view of the batch's memory.

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

namespace pets::data {
struct Batch;
}

namespace pets::train {

/// The batch's pixels as an [n, 3, h, w] float tensor in channels-last memory format on
/// `device`: on the CPU a view of batch.pixels (no copy: the batch must outlive it), on a GPU one
/// copy that keeps the layout. Throws pets::Error when the pixel count is not n * h * w * 3.
at::Tensor batch_images(data::Batch& batch, const c10::Device& device);

/// The batch's labels as an [n] int64 tensor on `device`: on the CPU a view of batch.labels, on
/// a GPU a copy queued on the current stream without waiting for the device.
at::Tensor batch_labels(data::Batch& batch, const c10::Device& device);

}  // namespace pets::train
