#pragma once
/// \file
/// PETS_VERIFY_RANKS's check: a digest compared across ranks, to catch ranks that drifted apart.

#include <cstdint>
#include <string>

namespace pets::comm {
class Communicator;
}
namespace torch::nn {
class Module;
}

namespace pets::train {

/// Throws pets::Error on every rank unless `digest` is the same on all ranks of `comm`
/// (collective, host counters). The message reads "<what> on rank R differ from rank 0's", R the
/// lowest rank that differs.
void check_same_on_all_ranks(comm::Communicator& comm, std::uint64_t digest,
                             const std::string& what);

/// Throws pets::Error on every rank unless all ranks of `comm` hold the same `model` (a digest
/// of every parameter and buffer; collective) at the evaluation of `epoch`; returns the line
/// that says they do ("verify: epoch E: all N ranks hold model <digest>").
std::string check_model_on_all_ranks(comm::Communicator& comm, const torch::nn::Module& model,
                                     std::int64_t epoch);

}  // namespace pets::train
