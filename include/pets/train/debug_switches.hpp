#pragma once
/// \file
/// The environment variables pets_train reads for tests and comparisons, all read here, once.
/// None changes what a normal run computes; each is described in the README.

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

namespace pets::train {

/// PETS_INJECT_FAULT="KIND:RANK:STEP": rank RANK meets fault KIND at global step STEP, just before
/// that step's allreduce (so its peers wait inside a collective). KIND is sigkill, abort, exit1,
/// exit0 (exit before MPI_Finalize), throw (a pets::Error), or skew: this rank's reduced
/// gradients are altered after the allreduce (a collective that delivered different results),
/// which PETS_VERIFY_RANKS must catch. Another KIND is announced and does nothing.
struct FaultSpec {
  std::string kind;
  int rank = -1;
  std::int64_t step = -1;
};

/// The switches, read once.
struct DebugSwitches {
  std::optional<FaultSpec> inject_fault;  ///< PETS_INJECT_FAULT (unset or malformed: none)
  bool unfolded = false;        ///< PETS_UNFOLDED: BatchNorm never folded, no evaluation cache
  bool verify_ranks = false;    ///< PETS_VERIFY_RANKS: digests of gradients and model compared
  bool default_malloc = false;  ///< PETS_DEFAULT_MALLOC: glibc's allocator settings kept

  /// From this process's environment; a switch is on when its variable is set (to anything).
  static DebugSwitches from_environment();
  /// From `lookup(name)`, which returns a variable's value or nullptr when it is unset.
  static DebugSwitches from(const std::function<const char*(const char*)>& lookup);
};

/// "KIND:RANK:STEP" (KIND of [a-z0-9], at most 15 characters), or nothing when malformed.
std::optional<FaultSpec> parse_fault_spec(const std::string& text);

/// When `fault` names this `rank` and global `step`: announces it on stderr and applies it (the
/// process dies, exits, or this throws pets::Error). Returns true for "skew", which the caller
/// applies; false otherwise.
bool inject_fault(const std::optional<FaultSpec>& fault, int rank, std::int64_t step);

}  // namespace pets::train
