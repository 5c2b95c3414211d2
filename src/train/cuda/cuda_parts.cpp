// The backend's CUDA half (pets/train/cuda_parts.hpp), compiled only in builds with a CUDA
// LibTorch: DeviceInput's stream, events and stream guard, and the NCCL communicator for device
// tensors (where the build found NCCL).
#include "pets/train/cuda_parts.hpp"

#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>

#include <utility>

#include "pets/comm/communicator.hpp"
#include "pets/train/device_input.hpp"
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
};

}  // namespace

const CudaParts* cuda_parts() {
  static const Parts parts;
  return &parts;
}

}  // namespace pets::train
