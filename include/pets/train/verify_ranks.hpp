#pragma once
/// \file
/// PETS_VERIFY_RANKS's check: a digest compared across ranks, to catch ranks that drifted apart.

#include <cstdint>
#include <string>

namespace pets::comm {
class Communicator;
}

namespace pets::train {

/// Throws pets::Error on every rank unless `digest` is the same on all ranks of `comm`
/// (collective, host counters). The message reads "<what> on rank R differ from rank 0's", R the
/// lowest rank that differs.
void check_same_on_all_ranks(comm::Communicator& comm, std::uint64_t digest,
                             const std::string& what);

}  // namespace pets::train
