// The Communicator for CUDA tensors. Needs NCCL and a CUDA build of LibTorch (current stream,
// device data pointers): CMake compiles this file only where both are found.

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <c10/cuda/CUDAStream.h>

#include <climits>

#include "pets/comm/mpi_comm.hpp"
#include "pets/comm/nccl_comm.hpp"
#include "pets/util/error.hpp"

namespace pets::comm {

namespace {

ncclDataType_t nccl_type(at::ScalarType type) {
  switch (type) {
    case at::kFloat:
      return ncclFloat32;
    case at::kDouble:
      return ncclFloat64;
    case at::kHalf:
      return ncclFloat16;
    case at::kBFloat16:
      return ncclBfloat16;
    case at::kChar:
      return ncclInt8;
    case at::kByte:
      return ncclUint8;
    case at::kInt:
      return ncclInt32;
    case at::kLong:
      return ncclInt64;
    default:
      PETS_ERROR(std::string("NCCL backend: unsupported dtype ") + c10::toString(type));
  }
}

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(const MpiComm& mpi, int device) : mpi_(&mpi), nccl_(mpi, device) {}

  int rank() const override { return nccl_.rank(); }
  int size() const override { return nccl_.size(); }
  std::string backend() const override { return "nccl"; }
  bool times_completion() const override { return false; }  // the work runs on the stream

  void barrier() override {
    PETS_CUDA_CHECK(
        cudaStreamSynchronize(c10::cuda::getCurrentCUDAStream(nccl_.device()).stream()));
    nccl_.check_async_error();
    PETS_MPI_CHECK(MPI_Barrier(mpi_->get()));
  }

 private:
  void do_allreduce(at::Tensor& tensor, ReduceOp op) override {
    check_device(tensor, "allreduce");
    PETS_CHECK(op != ReduceOp::kAverage || at::isFloatingType(tensor.scalar_type()),
               "allreduce average needs a floating-point tensor");
    at::NoGradGuard no_grad;
    at::Tensor work = tensor.contiguous();
    // NCCL reduces in a fixed ring/tree order that is the same on every rank: identical bits.
    nccl_.all_reduce(work.data_ptr(), work.data_ptr(), work.numel(), nccl_type(work.scalar_type()),
                     op == ReduceOp::kAverage ? ncclAvg : ncclSum, stream(work));
    if (!work.is_same(tensor)) tensor.copy_(work);
  }

  void do_broadcast(at::Tensor& tensor, int root) override {
    check_device(tensor, "broadcast");
    at::NoGradGuard no_grad;
    at::Tensor work = tensor.contiguous();
    nccl_.broadcast(work.data_ptr(), work.data_ptr(), work.nbytes(), ncclUint8, root, stream(work));
    if (!work.is_same(tensor)) tensor.copy_(work);
  }

  void do_allreduce_counters(std::int64_t* values, std::size_t count) override {
    PETS_CHECK(count <= static_cast<std::size_t>(INT_MAX), "too many counters");
    PETS_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, values, static_cast<int>(count), MPI_INT64_T,
                                 MPI_SUM, mpi_->get()));
  }

  void check_device(const at::Tensor& tensor, const char* what) const {
    PETS_CHECK(tensor.defined() && tensor.is_cuda() && tensor.get_device() == nccl_.device(),
               std::string(what) +
                   ": the NCCL backend takes tensors on cuda:" + std::to_string(nccl_.device()));
  }
  static cudaStream_t stream(const at::Tensor& tensor) {
    return c10::cuda::getCurrentCUDAStream(tensor.get_device()).stream();
  }

  const MpiComm* mpi_;
  NcclComm nccl_;
};

}  // namespace

std::unique_ptr<Communicator> make_nccl_communicator(const MpiComm& mpi, int device) {
  return std::make_unique<NcclCommunicator>(mpi, device);
}

}  // namespace pets::comm
