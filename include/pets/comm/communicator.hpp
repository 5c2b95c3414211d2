#pragma once
/// \file
/// The one communicator interface the trainer uses: in-place allreduce (sum, average) and
/// broadcast of tensors, a barrier, and sums of host integer counters. Two backends: MPI for CPU
/// tensors (here) and NCCL for CUDA tensors (pets/comm/nccl_comm.hpp, with a CUDA LibTorch).
/// LibTorch stays out of this header: tensors are forward-declared.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace at {
class Tensor;
}
namespace torch::nn {
class Module;
}
namespace pets {
class Digest;
}

namespace pets::comm {

class MpiComm;

/// How allreduce combines the ranks' tensors.
enum class ReduceOp {
  kSum,      ///< element-wise sum
  kAverage,  ///< element-wise sum divided by size(); floating-point tensors only
};

/// What a communicator's collectives were handed since it was made: the payload this rank passed
/// to them (the tensors' bytes, 8 bytes a counter; what goes on the wire follows from it and the
/// algorithm, about twice that for a ring allreduce) and the host seconds spent in the calls
/// (what those seconds cover: Communicator::times_completion).
struct Traffic {
  std::int64_t collectives = 0;
  std::int64_t bytes = 0;
  double seconds = 0.0;

  /// What happened between an earlier reading `before` and this one.
  Traffic since(const Traffic& before) const {
    return {collectives - before.collectives, bytes - before.bytes, seconds - before.seconds};
  }
};

/// Collectives over a fixed group of ranks. Every call is collective: all ranks call it in the
/// same order with tensors of the same shape and dtype. Errors throw pets::Error. Each call is
/// counted (traffic()); the backends implement the do_ functions.
class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  /// "mpi" or "nccl".
  virtual std::string backend() const = 0;
  /// Whether traffic().seconds is the collectives' whole time: true where a call returns once
  /// its collective is complete (MPI, including the wait for the other ranks); false where it
  /// returns once the collective is enqueued on a device stream (NCCL), so that the seconds are
  /// only the enqueueing and say nothing of the time the collectives take.
  virtual bool times_completion() const = 0;

  /// Combines `tensor` across ranks in place; every rank ends with the same values.
  void allreduce(at::Tensor& tensor, ReduceOp op);
  /// Overwrites `tensor` on every rank with root's values.
  void broadcast(at::Tensor& tensor, int root);
  /// Returns when every rank has called it (after this rank's queued device work, for NCCL).
  virtual void barrier() = 0;
  /// Sums `count` host counters in place across ranks (exact: int64, not float).
  void allreduce_counters(std::int64_t* values, std::size_t count);

  void allreduce_sum(at::Tensor& tensor) { allreduce(tensor, ReduceOp::kSum); }
  void allreduce_average(at::Tensor& tensor) { allreduce(tensor, ReduceOp::kAverage); }
  /// The sum of one counter over all ranks.
  std::int64_t sum_counter(std::int64_t value) {
    allreduce_counters(&value, 1);
    return value;
  }
  void allreduce_counters(std::vector<std::int64_t>& values) {
    allreduce_counters(values.data(), values.size());
  }

  /// What this rank's collectives carried so far.
  const Traffic& traffic() const { return traffic_; }

 private:
  virtual void do_allreduce(at::Tensor& tensor, ReduceOp op) = 0;
  virtual void do_broadcast(at::Tensor& tensor, int root) = 0;
  virtual void do_allreduce_counters(std::int64_t* values, std::size_t count) = 0;

  Traffic traffic_;
};

/// MPI backend for CPU tensors. Keeps a pointer to `comm`, which must outlive it.
/// Supports float, double, int8/16/32/64 and uint8 tensors directly, half and bfloat16 through a
/// float copy; non-contiguous tensors through a contiguous copy.
class MpiCommunicator final : public Communicator {
 public:
  explicit MpiCommunicator(const MpiComm& comm);

  int rank() const override;
  int size() const override;
  std::string backend() const override { return "mpi"; }
  bool times_completion() const override { return true; }
  void barrier() override;

 private:
  void do_allreduce(at::Tensor& tensor, ReduceOp op) override;
  void do_broadcast(at::Tensor& tensor, int root) override;
  void do_allreduce_counters(std::int64_t* values, std::size_t count) override;

  const MpiComm* comm_;
};

/// Copies root's parameters and buffers of `module` (all of them, recursively, in registration
/// order) to every rank, so all ranks start identical. First checks that every rank has the same
/// names, shapes and dtypes; if not, every rank throws pets::Error (no mismatched collectives).
void broadcast_module(Communicator& comm, torch::nn::Module& module, int root = 0);

/// Adds `tensor` to `digest`: its name, dtype, shape and values (an undefined tensor: its name
/// and a marker). The one tensor digest of the project: module_digest, tensors_digest and the
/// checkpoints' digest are made of it.
void add_tensor_to_digest(Digest& digest, const std::string& name, const at::Tensor& tensor);

/// A 64-bit digest (pets::Digest, XXH3-64) of the names, shapes, dtypes and values of
/// `module`'s parameters and buffers: equal on two ranks iff (barring collisions) their modules
/// are identical.
std::uint64_t module_digest(const torch::nn::Module& module);

/// The same digest over `tensors` in order (shape, dtype and values; an undefined one counts).
std::uint64_t tensors_digest(const std::vector<at::Tensor>& tensors);

}  // namespace pets::comm
