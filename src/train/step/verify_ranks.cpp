#include "pets/train/step/verify_ranks.hpp"

#include <cstdio>
#include <cstring>
#include <vector>

#include "pets/comm/communicator.hpp"
#include "pets/train/step/train_step.hpp"
#include "pets/util/error.hpp"

namespace pets::train {

void check_same_on_all_ranks(comm::Communicator& comm, const std::vector<std::uint64_t>& digests,
                             const std::vector<std::string>& names) {
  PETS_CHECK(names.size() == digests.size(), "one name per digest");
  // An allgather as a sum: each rank fills its own slots, so the int64 sum is exact.
  const std::size_t n = digests.size();
  std::vector<std::int64_t> all(static_cast<std::size_t>(comm.size()) * n, 0);
  std::memcpy(&all[static_cast<std::size_t>(comm.rank()) * n], digests.data(),
              n * sizeof(std::uint64_t));
  comm.allreduce_counters(all);
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t r = 1; r < static_cast<std::size_t>(comm.size()); ++r)
      PETS_CHECK(all[r * n + i] == all[i],
                 names[i] + " on rank " + std::to_string(r) + " differ from rank 0's");
}

void check_same_on_all_ranks(comm::Communicator& comm, std::uint64_t digest,
                             const std::string& what) {
  check_same_on_all_ranks(comm, std::vector<std::uint64_t>{digest}, std::vector<std::string>{what});
}

std::string check_model_on_all_ranks(comm::Communicator& comm, const torch::nn::Module& model,
                                     std::int64_t epoch, const TrainStep* step) {
  const std::string at_epoch = "epoch " + std::to_string(epoch) + ": ";
  std::vector<std::uint64_t> digests = {comm::module_digest(model)};
  std::vector<std::string> names = {at_epoch + "the parameters and buffers"};
  const int heads = step ? step->heads() : 1;
  for (int k = 1; k < heads; ++k) {
    digests.push_back(comm::tensors_digest({step->head_weight(k), step->head_bias(k)}));
    names.push_back(at_epoch + "head " + std::to_string(k) + "'s weight and bias");
  }
  check_same_on_all_ranks(comm, digests, names);
  char text[64];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(digests[0]));
  std::string line =
      "verify: " + at_epoch + "all " + std::to_string(comm.size()) + " ranks hold model " + text;
  if (heads > 1) line += " and the sweep's " + std::to_string(heads - 1) + " other heads";
  return line;
}

}  // namespace pets::train
