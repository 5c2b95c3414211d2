#pragma once
/// \file
/// Images a device is still computing, and how they are handed to the thread that uses them.

#include <ATen/core/Tensor.h>

#include <memory>
#include <utility>

namespace pets::train {

/// When the images of a submitted batch are ready: on CUDA, the event after the batch's last
/// kernel on the input stream (pets/train/device/cuda_parts.hpp).
class ImagesReady {
 public:
  virtual ~ImagesReady() = default;
  /// Makes `images` safe to use on the calling thread's current stream: that stream waits (on
  /// the device, not the host) for the input stream's work, and the tensor's memory is recorded
  /// as in use there.
  virtual void hand_over(at::Tensor& images) = 0;
};

/// The images of a submitted batch, possibly still being computed on the input stream.
class PendingImages {
 public:
  PendingImages() = default;
  /// `images`, ready when `ready` says so (null: already done, as on the CPU).
  explicit PendingImages(at::Tensor images, std::shared_ptr<ImagesReady> ready = nullptr)
      : images_(std::move(images)), ready_(std::move(ready)) {}
  /// The [n, 3, size, size] images, safe to use on the calling thread's current stream
  /// (ImagesReady::hand_over). On the CPU the work is already done.
  at::Tensor get();

 private:
  at::Tensor images_;
  std::shared_ptr<ImagesReady> ready_;
};

}  // namespace pets::train
