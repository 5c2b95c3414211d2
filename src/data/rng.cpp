#include "pets/data/rng.hpp"

#include "pets/util/error.hpp"

namespace pets::data {

std::uint64_t splitmix64(std::uint64_t& state) {
  std::uint64_t z = (state += 0x9E3779B97F4A7C15ULL);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

std::uint64_t mix_seed(std::initializer_list<std::uint64_t> parts) {
  std::uint64_t state = 0x5EED5EED5EED5EEDULL;
  std::uint64_t out = 0;
  for (std::uint64_t p : parts) {
    state ^= p;
    out = splitmix64(state);
    state = out;
  }
  return out;
}

namespace {
inline std::uint64_t rotl(std::uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
}  // namespace

Rng::Rng(std::uint64_t seed) {
  std::uint64_t state = seed;
  for (auto& s : s_) s = splitmix64(state);
}

std::uint64_t Rng::next() {
  const std::uint64_t result = rotl(s_[1] * 5, 7) * 9;
  const std::uint64_t t = s_[1] << 17;
  s_[2] ^= s_[0];
  s_[3] ^= s_[1];
  s_[1] ^= s_[2];
  s_[0] ^= s_[3];
  s_[2] ^= t;
  s_[3] = rotl(s_[3], 45);
  return result;
}

double Rng::uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }

std::int64_t Rng::randint(std::int64_t lo, std::int64_t hi) {
  PETS_CHECK(lo < hi, "Rng::randint needs lo < hi");
  const std::uint64_t range = static_cast<std::uint64_t>(hi - lo);
  // Rejection of the top partial block keeps every value equally likely.
  const std::uint64_t limit = UINT64_MAX - UINT64_MAX % range;
  std::uint64_t x = next();
  while (x >= limit) x = next();
  return lo + static_cast<std::int64_t>(x % range);
}

std::vector<std::int64_t> permutation(std::int64_t n, std::uint64_t seed) {
  std::vector<std::int64_t> p(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) p[static_cast<std::size_t>(i)] = i;
  Rng rng(seed);
  for (std::int64_t i = n - 1; i > 0; --i) {
    const std::int64_t j = rng.randint(0, i + 1);
    std::swap(p[static_cast<std::size_t>(i)], p[static_cast<std::size_t>(j)]);
  }
  return p;
}

}  // namespace pets::data
