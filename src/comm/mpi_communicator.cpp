#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <algorithm>
#include <climits>

#include "pets/comm/communicator.hpp"
#include "pets/comm/mpi_comm.hpp"
#include "pets/util/error.hpp"

namespace pets::comm {

namespace {

/// MPI counts are int: larger buffers go in pieces of at most this many elements.
constexpr std::int64_t kMaxChunk = INT_MAX / 2;

template <typename Fn>
void for_each_chunk(void* data, std::int64_t count, std::size_t element_size, Fn&& fn) {
  auto* bytes = static_cast<char*>(data);
  for (std::int64_t done = 0; done < count;) {
    const std::int64_t n = std::min(kMaxChunk, count - done);
    fn(bytes + done * static_cast<std::int64_t>(element_size), static_cast<int>(n));
    done += n;
  }
}

MPI_Datatype mpi_type(at::ScalarType type) {
  switch (type) {
    case at::kFloat:
      return MPI_FLOAT;
    case at::kDouble:
      return MPI_DOUBLE;
    case at::kChar:
      return MPI_INT8_T;
    case at::kShort:
      return MPI_INT16_T;
    case at::kInt:
      return MPI_INT32_T;
    case at::kLong:
      return MPI_INT64_T;
    case at::kByte:
      return MPI_UINT8_T;
    default:
      return MPI_DATATYPE_NULL;
  }
}

void check_cpu(const at::Tensor& tensor, const char* what) {
  PETS_CHECK(tensor.defined(), std::string(what) + " of an undefined tensor");
  PETS_CHECK(
      tensor.device().is_cpu(),
      std::string(what) + ": the MPI backend takes CPU tensors, got " + tensor.device().str());
}

}  // namespace

MpiCommunicator::MpiCommunicator(const MpiComm& comm) : comm_(&comm) {}

int MpiCommunicator::rank() const { return comm_->rank(); }
int MpiCommunicator::size() const { return comm_->size(); }

void MpiCommunicator::do_allreduce(at::Tensor& tensor, ReduceOp op) {
  check_cpu(tensor, "allreduce");
  const at::ScalarType type = tensor.scalar_type();
  const bool floating = at::isFloatingType(type);
  PETS_CHECK(
      op != ReduceOp::kAverage || floating,
      std::string("allreduce average needs a floating-point tensor, got ") + c10::toString(type));
  const bool reduced_precision = type == at::kHalf || type == at::kBFloat16;
  PETS_CHECK(reduced_precision || mpi_type(type) != MPI_DATATYPE_NULL,
             std::string("allreduce: unsupported dtype ") + c10::toString(type));

  // Parameters are leaves that require grad; writing into them must bypass autograd.
  at::NoGradGuard no_grad;
  at::Tensor work = reduced_precision ? tensor.to(at::kFloat).contiguous() : tensor.contiguous();
  const MPI_Datatype datatype = mpi_type(work.scalar_type());
  const std::size_t element_size = work.element_size();
  const MPI_Comm comm = comm_->get();
  if (floating) {
    // Reduce to rank 0, then broadcast: every rank gets the very same bits. A plain
    // MPI_Allreduce may combine floats in a different order on different ranks (recursive
    // doubling), and ranks whose weights drift apart by one ulp no longer train the same model.
    const bool root = comm_->rank() == 0;
    for_each_chunk(work.data_ptr(), work.numel(), element_size, [&](char* p, int n) {
      PETS_MPI_CHECK(
          MPI_Reduce(root ? MPI_IN_PLACE : p, root ? p : nullptr, n, datatype, MPI_SUM, 0, comm));
      PETS_MPI_CHECK(MPI_Bcast(p, n, datatype, 0, comm));
    });
    if (op == ReduceOp::kAverage) work.div_(static_cast<double>(comm_->size()));
  } else {
    for_each_chunk(work.data_ptr(), work.numel(), element_size, [&](char* p, int n) {
      PETS_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, p, n, datatype, MPI_SUM, comm));
    });
  }
  if (!work.is_same(tensor)) tensor.copy_(work);
}

void MpiCommunicator::do_broadcast(at::Tensor& tensor, int root) {
  check_cpu(tensor, "broadcast");
  PETS_CHECK(root >= 0 && root < comm_->size(), "broadcast: root " + std::to_string(root) +
                                                    " outside 0.." +
                                                    std::to_string(comm_->size() - 1));
  const MPI_Comm comm = comm_->get();
  // A size or dtype mismatch would make MPI truncate or read past the buffer: compare first.
  std::int64_t header[2] = {tensor.numel(), static_cast<std::int64_t>(tensor.scalar_type())};
  std::int64_t root_header[2] = {header[0], header[1]};
  PETS_MPI_CHECK(MPI_Bcast(root_header, 2, MPI_INT64_T, root, comm));
  // Every rank learns whether any rank mismatched, so all throw rather than some waiting for a
  // payload broadcast the others skip.
  const int match_here = header[0] == root_header[0] && header[1] == root_header[1] ? 1 : 0;
  int match_all = 0;
  PETS_MPI_CHECK(MPI_Allreduce(&match_here, &match_all, 1, MPI_INT, MPI_MIN, comm));
  if (!match_all) {
    PETS_ERROR(
        match_here
            ? std::string("broadcast: another rank's tensor differs from root's in size or dtype")
            : "broadcast: this rank's tensor has " + std::to_string(header[0]) + " elements of " +
                  c10::toString(tensor.scalar_type()) + ", root's has " +
                  std::to_string(root_header[0]) + " of " +
                  c10::toString(static_cast<at::ScalarType>(root_header[1])));
  }

  at::NoGradGuard no_grad;
  at::Tensor work = tensor.contiguous();
  // Bytes, not typed elements: every dtype (half, bfloat16, bool) travels unchanged.
  for_each_chunk(work.data_ptr(), static_cast<std::int64_t>(work.nbytes()), 1,
                 [&](char* p, int n) { PETS_MPI_CHECK(MPI_Bcast(p, n, MPI_BYTE, root, comm)); });
  if (!work.is_same(tensor)) tensor.copy_(work);
}

void MpiCommunicator::barrier() { PETS_MPI_CHECK(MPI_Barrier(comm_->get())); }

void MpiCommunicator::do_allreduce_counters(std::int64_t* values, std::size_t count) {
  if (count == 0) return;
  for_each_chunk(
      values, static_cast<std::int64_t>(count), sizeof(std::int64_t), [&](char* p, int n) {
        PETS_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, p, n, MPI_INT64_T, MPI_SUM, comm_->get()));
      });
}

}  // namespace pets::comm
