#pragma once
/// \file
/// The backend's CUDA half behind one function, cuda_parts(): defined by
/// src/train/device/cuda/*.cpp in builds with a CUDA LibTorch (CMake adds those sources only there)
/// and by src/train/device/cuda_absent.cpp elsewhere, where there are no CUDA parts. make_backend
/// (backend.hpp) and DeviceInput (device_input.hpp) ask it; nothing else knows whether the build
/// has CUDA.

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace pets::comm {
class Communicator;
class MpiComm;
}  // namespace pets::comm

namespace pets::train {

class PendingImages;
struct CropSlot;

/// DeviceInput's work on a CUDA device: a stream of its own, each batch's images marked ready by
/// an event that the consumer's stream waits for (PendingImages::get).
class InputStream {
 public:
  virtual ~InputStream() = default;
  /// The stream's device, with its index.
  virtual const c10::Device& device() const = 0;
  /// On the stream: uploads `host` (a flat uint8 host buffer, page-locked) without blocking the
  /// host, runs `work` on the uploaded bytes, and returns its result with the event after it.
  virtual PendingImages submit(const at::Tensor& host,
                               const std::function<at::Tensor(const at::Tensor&)>& work) = 0;
  /// On the stream: runs `work` on `source` (bytes already on the device: ResidentImages) and
  /// returns its result with the event after it. `source`'s memory is marked as in use on the
  /// stream, so that freeing it waits for the work.
  virtual PendingImages run(const at::Tensor& source, const std::function<at::Tensor()>& work) = 0;
};

/// The most memory LibTorch's caching allocator has held on a CUDA device, in bytes.
struct MemoryPeaks {
  std::int64_t allocated = 0;  ///< in tensors (torch.cuda.max_memory_allocated's figure)
  std::int64_t reserved = 0;   ///< taken from the driver (torch.cuda.max_memory_reserved's)
};

/// What only a CUDA build can make.
class CudaParts {
 public:
  virtual ~CudaParts() = default;
  /// The Communicator for tensors on CUDA device `index` (NCCL), or null where the build has no
  /// NCCL. `mpi` (host values: barrier, counters) must outlive it.
  virtual std::unique_ptr<comm::Communicator> device_comm(const comm::MpiComm& mpi,
                                                          int index) const = 0;
  /// A high-priority stream of the pool of `device` (a CUDA device; without an index, the
  /// current one).
  virtual std::unique_ptr<InputStream> input_stream(const c10::Device& device) const = 0;
  /// The name of CUDA device `index` ("NVIDIA H200"), or empty when the driver does not say.
  virtual std::string device_name(int index) const = 0;
  /// "1.20 GiB of 139.81 GiB free" on CUDA device `index`, once LibTorch's cache of freed
  /// blocks is given back to the driver; empty when the driver does not say.
  virtual std::string memory_text(int index) const = 0;
  /// The bytes free on CUDA device `index` once LibTorch's cache of freed blocks is given back to
  /// the driver (what memory_text names), or -1 when the driver does not say.
  virtual std::int64_t free_memory(int index) const = 0;
  /// The peaks of LibTorch's caching allocator on CUDA device `index` since the process started
  /// (a cache given back to the driver lowers no peak).
  virtual MemoryPeaks memory_peaks(int index) const = 0;
  /// Runs `work` and returns how often it made the host wait for a CUDA device through
  /// LibTorch (item(), a copy to the host, a copy from pageable host memory, a stream
  /// synchronisation), as LibTorch's sync debug mode counts them. Not reentrant.
  virtual std::int64_t device_waits(const std::function<void()>& work) const = 0;
  /// resize_normalize's result (batch_resize.hpp; the same contract and errors, `bytes` on a
  /// CUDA device) from one kernel on the current stream: each output pixel computed from the crop
  /// with data::bilinear_taps' taps in data::resize_crop_bilinear's order, the slots the only
  /// upload. The batched tensor path is what it is checked against.
  virtual at::Tensor resize_normalize(const at::Tensor& bytes, const std::vector<CropSlot>& slots,
                                      int size, const at::Tensor& scale, const at::Tensor& shift,
                                      c10::ScalarType dtype) const = 0;
  /// Train-mode BatchNorm of `x` (4-d on a CUDA device; float, bf16 or fp16; channels a multiple
  /// of 8) as at::batch_norm(training=true) computes it: normalised by the batch's per-channel
  /// mean and biased variance, then `weight` and `bias`; `running_mean` and `running_var` updated
  /// in place with `momentum` and the unbiased variance (all four fp32, one value per channel).
  /// Then `residual` (x's shape and type) added when defined, then ReLU when `relu`, each
  /// rounded to x's type as the separate operations would. The result is channels-last, of x's
  /// type. Three kernels on the current stream (partial sums, statistics, one elementwise pass),
  /// reduced in a fixed order without atomics: the same result run to run. Throws pets::Error on
  /// arguments it does not take.
  virtual at::Tensor batch_norm_train(const at::Tensor& x, const at::Tensor& weight,
                                      const at::Tensor& bias, const at::Tensor& running_mean,
                                      const at::Tensor& running_var, double momentum, double eps,
                                      const at::Tensor& residual, bool relu) const = 0;
  /// ReLU(conv(x, weight) + bias [+ residual]) by cuDNN's fused convolution
  /// (at::cudnn_convolution_relu, or at::cudnn_convolution_add_relu when `residual` is defined):
  /// one pass over the output instead of three, the sums kept in float until the one rounding to
  /// x's type. Square kernel, `stride` and `padding` on both sides, no dilation, one group. x,
  /// weight, bias (and residual) on one CUDA device, of one type. Throws pets::Error on arguments
  /// it does not take, c10::Error where cuDNN has no fused engine for them.
  virtual at::Tensor conv_bias_relu(const at::Tensor& x, const at::Tensor& weight,
                                    const at::Tensor& bias, std::int64_t stride,
                                    std::int64_t padding, const at::Tensor& residual) const = 0;
};

/// The CUDA parts of this build, or null when it has none (a CPU LibTorch).
const CudaParts* cuda_parts();

}  // namespace pets::train
