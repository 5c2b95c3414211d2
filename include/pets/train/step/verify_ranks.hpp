#pragma once
/// \file
/// PETS_VERIFY_RANKS's check: a digest compared across ranks, to catch ranks that drifted apart.

#include <cstdint>
#include <string>
#include <vector>

namespace pets::comm {
class Communicator;
}
namespace torch::nn {
class Module;
}

namespace pets::train {

class TrainStep;

/// Throws pets::Error on every rank unless each of `digests` is the same on all ranks of `comm`
/// (one collective, host counters; every rank passes as many, each named in `names`). The
/// message reads "<names[i]> on rank R differ from rank 0's", i the first digest that differs
/// and R the lowest rank where it does.
void check_same_on_all_ranks(comm::Communicator& comm, const std::vector<std::uint64_t>& digests,
                             const std::vector<std::string>& names);
/// The same for one digest, named `what`.
void check_same_on_all_ranks(comm::Communicator& comm, std::uint64_t digest,
                             const std::string& what);

/// Throws pets::Error on every rank unless all ranks of `comm` hold the same `model` (a digest
/// of every parameter and buffer) at the evaluation of `epoch` and, given `step`, the same heads
/// of it besides the model's fc (a sweep's heads 1, 2, ...; collective). Returns the line that
/// says they do ("verify: epoch E: all N ranks hold model <digest>", and those heads' number).
std::string check_model_on_all_ranks(comm::Communicator& comm, const torch::nn::Module& model,
                                     std::int64_t epoch, const TrainStep* step = nullptr);

}  // namespace pets::train
