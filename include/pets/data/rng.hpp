#pragma once
/// \file
/// A small, portable random generator. The standard library's distributions and std::shuffle
/// are implementation-defined; splits and augmentations must be identical on every platform and
/// every rank, so the data path uses these instead.

#include <cstdint>
#include <initializer_list>
#include <vector>

namespace pets::data {

/// One step of SplitMix64: a good 64-bit mixer and seed expander.
std::uint64_t splitmix64(std::uint64_t& state);

/// Mixes several values (seed, rank, epoch, index, ...) into one well-spread seed.
std::uint64_t mix_seed(std::initializer_list<std::uint64_t> parts);

/// xoshiro256** seeded through SplitMix64.
class Rng {
 public:
  explicit Rng(std::uint64_t seed);
  /// Next raw 64-bit value.
  std::uint64_t next();
  /// Uniform double in [0, 1) with 53 random bits.
  double uniform();
  /// Uniform double in [lo, hi).
  double uniform(double lo, double hi) { return lo + (hi - lo) * uniform(); }
  /// Uniform integer in [lo, hi) without modulo bias; requires lo < hi.
  std::int64_t randint(std::int64_t lo, std::int64_t hi);

 private:
  std::uint64_t s_[4];
};

/// A seeded permutation of 0..n-1 (Fisher-Yates with Rng).
std::vector<std::int64_t> permutation(std::int64_t n, std::uint64_t seed);

}  // namespace pets::data
