#include "pets/util/digest.hpp"

#include <cstdio>

// xxHash compiled into this file only (all functions static inline): no library to link.
#define XXH_INLINE_ALL
#include <xxhash.h>

#include "pets/util/error.hpp"

namespace pets {

struct Digest::State {
  XXH3_state_t xxh;  // 64-byte aligned; C++17's new honours it
};

Digest::Digest() : state_(std::make_unique<State>()) {
  PETS_CHECK(XXH3_64bits_reset(&state_->xxh) == XXH_OK, "XXH3_64bits_reset failed");
}

Digest::~Digest() = default;
Digest::Digest(Digest&&) noexcept = default;
Digest& Digest::operator=(Digest&&) noexcept = default;

Digest& Digest::add(const void* data, std::size_t size) {
  PETS_CHECK(state_ != nullptr, "Digest used after a move");
  if (size == 0) return *this;
  PETS_CHECK(XXH3_64bits_update(&state_->xxh, data, size) == XXH_OK, "XXH3_64bits_update failed");
  return *this;
}

Digest& Digest::add_int(std::int64_t value) { return add(&value, sizeof value); }

Digest& Digest::add_string(std::string_view text) {
  add_int(static_cast<std::int64_t>(text.size()));
  return add(text.data(), text.size());
}

std::uint64_t Digest::value() const {
  PETS_CHECK(state_ != nullptr, "Digest used after a move");
  return XXH3_64bits_digest(&state_->xxh);
}

std::string Digest::hex() const { return to_hex(value()); }

std::string to_hex(std::uint64_t value) {
  char text[17];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(value));
  return text;
}

}  // namespace pets
