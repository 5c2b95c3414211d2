// The backend's CUDA half (pets/train/device/cuda_parts.hpp), compiled only in builds with a CUDA
// LibTorch: DeviceInput's stream, events and stream guard, the NCCL communicator for device
// tensors (where the build found NCCL), and the launches of the kernels of this folder.
#include "pets/train/device/cuda_parts.hpp"

#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/util/Exception.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "batchnorm_kernel.hpp"
#include "pets/comm/communicator.hpp"
#include "pets/train/device/crop_slot.hpp"
#include "pets/train/device/pending_images.hpp"
#include "pets/util/error.hpp"
#include "pets/util/number_text.hpp"
#include "resize_kernel.hpp"
#if defined(PETS_HAVE_NCCL)
#include "pets/comm/nccl_comm.hpp"
#endif

namespace pets::train {
namespace {

/// The kernels' element type for `dtype` (float, bf16 or fp16); `what` names the caller.
cuda::ElementType element_type(c10::ScalarType dtype, const char* what) {
  if (dtype == at::kBFloat16) return cuda::ElementType::kBFloat16;
  if (dtype == at::kHalf) return cuda::ElementType::kHalf;
  PETS_CHECK(dtype == at::kFloat,
             std::string(what) + ": unsupported dtype " + c10::toString(dtype));
  return cuda::ElementType::kFloat;
}

/// `t` channels-last and dense, starting on a 16-byte boundary (the kernels' vector loads):
/// itself when it is, else a copy.
at::Tensor packed_channels_last(const at::Tensor& t) {
  at::Tensor out = t.contiguous(at::MemoryFormat::ChannelsLast);
  if (reinterpret_cast<std::uintptr_t>(out.data_ptr()) % 16 != 0)
    out = out.clone(at::MemoryFormat::ChannelsLast);
  return out;
}

/// The input stream's event after a batch's last kernel.
class CudaImagesReady final : public ImagesReady {
 public:
  explicit CudaImagesReady(const c10::cuda::CUDAStream& stream) { event_.record(stream); }

  void hand_over(at::Tensor& images) override {
    if (!images.is_cuda()) return;
    const c10::cuda::CUDAStream current = c10::cuda::getCurrentCUDAStream(images.device().index());
    event_.block(current);
    // The images were allocated on the input stream; without this the allocator could hand
    // their memory to the next batch while the step still reads them.
    images.record_stream(current);
  }

 private:
  at::cuda::CUDAEvent event_;
};

class CudaInputStream final : public InputStream {
 public:
  explicit CudaInputStream(const c10::Device& device)
      : device_(device.has_index() ? device : c10::Device(c10::kCUDA, c10::cuda::current_device())),
        // High priority: the input kernels are short and should slot in between the step's.
        stream_(c10::cuda::getStreamFromPool(/*isHighPriority=*/true, device_.index())) {}

  const c10::Device& device() const override { return device_; }

  PendingImages submit(const at::Tensor& host,
                       const std::function<at::Tensor(const at::Tensor&)>& work) override {
    const c10::cuda::CUDAStreamGuard guard(stream_);
    // From pinned memory this copy is asynchronous; LibTorch's pinned allocator records it on
    // the stream, so the host buffer is not handed out again before the copy has read it.
    const at::Tensor on_device = host.to(device_, at::kByte, /*non_blocking=*/true);
    at::Tensor images = work(on_device);
    return PendingImages(std::move(images), std::make_shared<CudaImagesReady>(stream_));
  }

  PendingImages run(const at::Tensor& source, const std::function<at::Tensor()>& work) override {
    const c10::cuda::CUDAStreamGuard guard(stream_);
    at::Tensor images = work();
    c10::cuda::CUDACachingAllocator::recordStream(source.storage().data_ptr(), stream_);
    return PendingImages(std::move(images), std::make_shared<CudaImagesReady>(stream_));
  }

 private:
  c10::Device device_;
  c10::cuda::CUDAStream stream_;
};

/// The free and total bytes of CUDA device `index` once LibTorch's cache is given back to the
/// driver; false when the driver does not say.
bool memory_info(int index, std::size_t* free, std::size_t* total) {
  const c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(index));
  c10::cuda::CUDACachingAllocator::emptyCache();
  return cudaMemGetInfo(free, total) == cudaSuccess;
}

class Parts final : public CudaParts {
 public:
  std::unique_ptr<comm::Communicator> device_comm(const comm::MpiComm& mpi,
                                                  int index) const override {
#if defined(PETS_HAVE_NCCL)
    return comm::make_nccl_communicator(mpi, index);
#else
    (void)mpi;
    (void)index;
    return nullptr;
#endif
  }

  std::unique_ptr<InputStream> input_stream(const c10::Device& device) const override {
    return std::make_unique<CudaInputStream>(device);
  }

  std::string device_name(int index) const override {
    cudaDeviceProp properties{};
    if (cudaGetDeviceProperties(&properties, index) != cudaSuccess) return "";
    return properties.name;
  }

  std::int64_t device_waits(const std::function<void()>& work) const override {
    // LibTorch's sync debug mode warns at each of its waits (c10::cuda::memcpy_and_sync and
    // stream_synchronize: item(), a copy to the host, a copy from pageable memory); the handler
    // counts those warnings and passes on any other.
    class Counter final : public c10::WarningHandler {
     public:
      explicit Counter(c10::WarningHandler* next) : next_(next) {}
      void process(const c10::Warning& warning) override {
        if (warning.msg().find("called a synchronizing CUDA operation") != std::string::npos)
          ++waits_;
        else if (next_ != nullptr)
          next_->process(warning);
      }
      std::int64_t waits() const { return waits_; }

     private:
      c10::WarningHandler* next_;
      std::int64_t waits_ = 0;
    };
    Counter counter(c10::WarningUtils::get_warning_handler());
    const c10::WarningUtils::WarningHandlerGuard handler(&counter);
    c10::cuda::WarningState& state = c10::cuda::warning_state();
    struct ModeGuard {
      c10::cuda::WarningState& state;
      c10::cuda::SyncDebugMode before = state.get_sync_debug_mode();
      ~ModeGuard() { state.set_sync_debug_mode(before); }
    } mode{state};
    state.set_sync_debug_mode(c10::cuda::SyncDebugMode::L_WARN);
    work();
    return counter.waits();
  }

  std::int64_t free_memory(int index) const override {
    std::size_t free = 0, total = 0;
    if (!memory_info(index, &free, &total)) return -1;
    return static_cast<std::int64_t>(free);
  }

  MemoryPeaks memory_peaks(int index) const override {
    const c10::cuda::CUDACachingAllocator::DeviceStats stats =
        c10::cuda::CUDACachingAllocator::getDeviceStats(static_cast<c10::DeviceIndex>(index));
    // Each statistic's first entry is the aggregate over the allocator's pools.
    return {stats.allocated_bytes.front().peak, stats.reserved_bytes.front().peak};
  }

  std::string memory_text(int index) const override {
    std::size_t free = 0, total = 0;
    if (!memory_info(index, &free, &total)) return "";
    return byte_size_text(static_cast<std::int64_t>(free)) + " of " +
           byte_size_text(static_cast<std::int64_t>(total)) + " free";
  }

  at::Tensor resize_normalize(const at::Tensor& bytes, const std::vector<CropSlot>& slots, int size,
                              const at::Tensor& scale, const at::Tensor& shift,
                              c10::ScalarType dtype) const override {
    PETS_CHECK(bytes.defined() && bytes.is_cuda() && bytes.scalar_type() == at::kByte &&
                   bytes.dim() == 1 && bytes.is_contiguous(),
               "resize_normalize: the crops must be a flat uint8 buffer on a CUDA device");
    PETS_CHECK(size > 0 && size <= 65535, "resize_normalize: size must be 1 to 65535");
    for (const at::Tensor* t : {&scale, &shift})
      PETS_CHECK(t->device() == bytes.device() && t->scalar_type() == at::kFloat &&
                     t->numel() == 3 && t->is_contiguous(),
                 "resize_normalize: scale and shift must be 3 floats on the crops' device");
    const cuda::ElementType type = element_type(dtype, "resize_normalize");
    const auto n = static_cast<std::int64_t>(slots.size());
    PETS_CHECK(n <= 65535, "resize_normalize: at most 65535 crops per batch");
    at::Tensor out =
        at::empty({n, 3, size, size}, bytes.options().dtype(dtype), at::MemoryFormat::ChannelsLast);
    if (n == 0) return out;
    // The slots: the one upload, from page-locked memory, whose reuse LibTorch's allocator defers
    // until the copy has read it.
    at::Tensor host = at::empty({n * static_cast<std::int64_t>(sizeof(cuda::KernelSlot))},
                                at::TensorOptions().dtype(at::kByte).pinned_memory(true));
    auto* kernel_slots = reinterpret_cast<cuda::KernelSlot*>(host.data_ptr<std::uint8_t>());
    for (std::int64_t i = 0; i < n; ++i) {
      const CropSlot& s = slots[static_cast<std::size_t>(i)];
      PETS_CHECK(slot_inside(s, bytes.numel()),
                 "resize_normalize: a crop slot is empty, narrower than its rows or runs past "
                 "the buffer");
      kernel_slots[i] = cuda::KernelSlot{s.offset, row_stride(s), s.height, s.width};
    }
    const at::Tensor on_device = host.to(bytes.device(), at::kByte, /*non_blocking=*/true);
    const cudaError_t error = cuda::launch_resize_normalize(
        bytes.data_ptr<std::uint8_t>(),
        reinterpret_cast<const cuda::KernelSlot*>(on_device.data_ptr<std::uint8_t>()),
        static_cast<int>(n), size, scale.data_ptr<float>(), shift.data_ptr<float>(), out.data_ptr(),
        type, c10::cuda::getCurrentCUDAStream(bytes.device().index()).stream());
    PETS_CHECK(error == cudaSuccess, std::string("resize_normalize: the kernel's launch failed: ") +
                                         cudaGetErrorString(error));
    return out;
  }

  at::Tensor batch_norm_train(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias,
                              const at::Tensor& running_mean, const at::Tensor& running_var,
                              double momentum, double eps, const at::Tensor& residual,
                              bool relu) const override {
    PETS_CHECK(x.defined() && x.is_cuda() && x.dim() == 4,
               "batch_norm_train: the input must be a 4-d tensor on a CUDA device");
    const cuda::ElementType type = element_type(x.scalar_type(), "batch_norm_train");
    const std::int64_t channels = x.size(1);
    const std::int64_t rows = x.numel() / std::max<std::int64_t>(channels, 1);
    PETS_CHECK(channels > 0 && channels % cuda::kBatchNormChannelMultiple == 0 &&
                   channels <= std::numeric_limits<int>::max(),
               "batch_norm_train: the channels must be a multiple of " +
                   std::to_string(cuda::kBatchNormChannelMultiple));
    // at::batch_norm's own condition in training.
    PETS_CHECK(rows > 1, "batch_norm_train: expected more than 1 value per channel");
    for (const at::Tensor* t : {&weight, &bias, &running_mean, &running_var})
      PETS_CHECK(t->defined() && t->device() == x.device() && t->scalar_type() == at::kFloat &&
                     t->numel() == channels && t->is_contiguous(),
                 "batch_norm_train: weight, bias and running statistics must be fp32, one "
                 "value per channel, on the input's device");
    const c10::cuda::CUDAGuard guard(x.device());
    const at::Tensor input = packed_channels_last(x);
    at::Tensor added;
    if (residual.defined()) {
      PETS_CHECK(residual.sizes() == x.sizes() && residual.scalar_type() == x.scalar_type() &&
                     residual.device() == x.device(),
                 "batch_norm_train: the residual must have the input's shape, type and device");
      added = packed_channels_last(residual);
    }
    at::Tensor out = at::empty_like(input, at::MemoryFormat::ChannelsLast);
    const int multiprocessors =
        at::cuda::getDeviceProperties(x.device().index())->multiProcessorCount;
    cuda::BatchNormTrain args;
    args.groups = cuda::batch_norm_groups(rows, static_cast<int>(channels), multiprocessors);
    const at::Tensor workspace =
        at::empty({cuda::batch_norm_workspace_bytes(static_cast<int>(channels), args.groups)},
                  x.options().dtype(at::kByte));
    args.x = input.data_ptr();
    args.y = out.data_ptr();
    args.residual = added.defined() ? added.data_ptr() : nullptr;
    args.relu = relu;
    args.type = type;
    args.rows = rows;
    args.channels = static_cast<int>(channels);
    args.weight = weight.data_ptr<float>();
    args.bias = bias.data_ptr<float>();
    args.running_mean = running_mean.data_ptr<float>();
    args.running_var = running_var.data_ptr<float>();
    args.momentum = static_cast<float>(momentum);
    args.eps = static_cast<float>(eps);
    args.workspace = workspace.data_ptr();
    const cudaError_t error = cuda::launch_batch_norm_train(
        args, c10::cuda::getCurrentCUDAStream(x.device().index()).stream());
    PETS_CHECK(error == cudaSuccess, std::string("batch_norm_train: a kernel's launch failed: ") +
                                         cudaGetErrorString(error));
    return out;
  }

  at::Tensor conv_bias_relu(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias,
                            std::int64_t stride, std::int64_t padding,
                            const at::Tensor& residual) const override {
    PETS_CHECK(x.is_cuda() && x.dim() == 4 && weight.dim() == 4 && bias.dim() == 1,
               "conv_bias_relu: expected a 4-d input on a CUDA device, a 4-d weight and a bias");
    for (const at::Tensor* t : {&weight, &bias, &residual})
      PETS_CHECK(
          !t->defined() || (t->device() == x.device() && t->scalar_type() == x.scalar_type()),
          "conv_bias_relu: the input, weight, bias and residual must share one type and "
          "device");
    const c10::cuda::CUDAGuard guard(x.device());
    const std::vector<std::int64_t> strides{stride, stride}, paddings{padding, padding},
        dilation{1, 1};
    if (residual.defined())
      return at::cudnn_convolution_add_relu(x, weight, residual, at::Scalar(1.0), bias, strides,
                                            paddings, dilation, 1);
    return at::cudnn_convolution_relu(x, weight, bias, strides, paddings, dilation, 1);
  }
};

}  // namespace

const CudaParts* cuda_parts() {
  static const Parts parts;
  return &parts;
}

}  // namespace pets::train
