#include "pets/train/verify_ranks.hpp"

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

}  // namespace pets::train
