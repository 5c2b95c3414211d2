#pragma once
/// \file
/// The project's one digest: XXH3-64 (xxHash) over a stream of byte ranges. Checkpoints use it
/// to detect damage, the ranks to compare their models and gradients. Not cryptographic: it
/// catches accidents (a flipped byte, a rank that diverged), not an adversary.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

namespace pets {

/// A streaming XXH3-64 digest (seed 0). Adding ranges one after another gives the digest of
/// their concatenation. Movable, not copyable.
class Digest {
 public:
  /// The algorithm's name, as stored beside a digest in files ("xxh3-64").
  static constexpr const char* kAlgorithm = "xxh3-64";

  Digest();
  ~Digest();
  Digest(Digest&&) noexcept;
  Digest& operator=(Digest&&) noexcept;
  Digest(const Digest&) = delete;
  Digest& operator=(const Digest&) = delete;

  /// Adds `size` bytes at `data` (may be null when size is 0).
  Digest& add(const void* data, std::size_t size);
  /// Adds the 8 bytes of `value` (this machine's byte order).
  Digest& add_int(std::int64_t value);
  /// Adds a string's length, then its bytes, so that consecutive strings cannot run together
  /// ("ab", "c" differs from "a", "bc").
  Digest& add_string(std::string_view text);

  /// The digest of everything added so far; adding may continue after it.
  std::uint64_t value() const;
  /// value() as 16 lowercase hex digits.
  std::string hex() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

/// `value` as 16 lowercase hex digits.
std::string to_hex(std::uint64_t value);

}  // namespace pets
