#include "pets/train/step/verify_ranks.hpp"

#include <cstdio>
#include <cstring>
#include <vector>

#include "pets/comm/communicator.hpp"
#include "pets/util/error.hpp"

namespace pets::train {

void check_same_on_all_ranks(comm::Communicator& comm, std::uint64_t digest,
                             const std::string& what) {
  // An allgather as a sum: each rank fills its own slot, so the int64 sum is exact.
  std::vector<std::int64_t> all(static_cast<std::size_t>(comm.size()), 0);
  std::memcpy(&all[static_cast<std::size_t>(comm.rank())], &digest, sizeof digest);
  comm.allreduce_counters(all);
  for (std::size_t r = 1; r < all.size(); ++r)
    PETS_CHECK(all[r] == all[0], what + " on rank " + std::to_string(r) + " differ from rank 0's");
}

std::string check_model_on_all_ranks(comm::Communicator& comm, const torch::nn::Module& model,
                                     std::int64_t epoch) {
  const std::uint64_t digest = comm::module_digest(model);
  check_same_on_all_ranks(comm, digest,
                          "epoch " + std::to_string(epoch) + ": the parameters and buffers");
  char text[64];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(digest));
  return "verify: epoch " + std::to_string(epoch) + ": all " + std::to_string(comm.size()) +
         " ranks hold model " + text;
}

}  // namespace pets::train
