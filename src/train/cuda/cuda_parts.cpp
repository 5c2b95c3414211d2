// The backend's CUDA half (pets/train/cuda_parts.hpp), compiled only in builds with a CUDA
// LibTorch: DeviceInput's stream, events and stream guard, and the NCCL communicator for device
// tensors (where the build found NCCL).
#include "pets/train/cuda_parts.hpp"

#include <ATen/ATen.h>
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>

#include <limits>
#include <string>
#include <utility>

#include "pets/comm/communicator.hpp"
#include "pets/train/device_input.hpp"
#include "pets/util/error.hpp"
#include "resize_kernel.hpp"
#if defined(PETS_HAVE_NCCL)
#include "pets/comm/nccl_comm.hpp"
#endif

namespace pets::train {
namespace {

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

 private:
  c10::Device device_;
  c10::cuda::CUDAStream stream_;
};

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
    cuda::OutType type = cuda::OutType::kFloat;
    if (dtype == at::kBFloat16)
      type = cuda::OutType::kBFloat16;
    else if (dtype == at::kHalf)
      type = cuda::OutType::kHalf;
    else
      PETS_CHECK(dtype == at::kFloat,
                 std::string("resize_normalize: unsupported dtype ") + c10::toString(dtype));
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
      PETS_CHECK(s.height > 0 && s.width > 0 && s.offset >= 0 &&
                     s.offset + static_cast<std::int64_t>(s.height) * s.width * 3 <= bytes.numel(),
                 "resize_normalize: a crop slot is empty or runs past the buffer");
      kernel_slots[i] = cuda::KernelSlot{s.offset, s.height, s.width};
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
};

}  // namespace

const CudaParts* cuda_parts() {
  static const Parts parts;
  return &parts;
}

}  // namespace pets::train
