#include "pets/comm/communicator.hpp"

#include <ATen/core/Tensor.h>

#include <chrono>

namespace pets::comm {
namespace {

using Clock = std::chrono::steady_clock;

/// Counts one collective of `bytes` into `traffic`, with the time `call` takes, also when it
/// throws.
template <typename Call>
void counted(Traffic& traffic, std::int64_t bytes, Call&& call) {
  const auto start = Clock::now();
  struct Count {
    Traffic& traffic;
    std::int64_t bytes;
    Clock::time_point start;
    ~Count() {
      ++traffic.collectives;
      traffic.bytes += bytes;
      traffic.seconds += std::chrono::duration<double>(Clock::now() - start).count();
    }
  } count{traffic, bytes, start};
  call();
}

/// A tensor's bytes (none for an undefined one, which the backends refuse).
std::int64_t bytes_of(const at::Tensor& tensor) {
  return tensor.defined() ? static_cast<std::int64_t>(tensor.nbytes()) : 0;
}

}  // namespace

void Communicator::allreduce(at::Tensor& tensor, ReduceOp op) {
  counted(traffic_, bytes_of(tensor), [&] { do_allreduce(tensor, op); });
}

void Communicator::broadcast(at::Tensor& tensor, int root) {
  counted(traffic_, bytes_of(tensor), [&] { do_broadcast(tensor, root); });
}

void Communicator::allreduce_counters(std::int64_t* values, std::size_t count) {
  counted(traffic_, static_cast<std::int64_t>(count * sizeof(std::int64_t)),
          [&] { do_allreduce_counters(values, count); });
}

}  // namespace pets::comm
