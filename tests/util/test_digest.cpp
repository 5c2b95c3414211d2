// pets::Digest: XXH3-64 itself (the reference values of xxHash's own sanity checks), streaming
// equal to one pass, and the string framing that keeps fields apart.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "pets/util/digest.hpp"

namespace {

TEST(Digest, MatchesXxh3ReferenceValues) {
  EXPECT_EQ(pets::Digest().value(), 0x2D06800538D394C2ull);  // the empty input
  EXPECT_EQ(pets::Digest().add("abc", 3).value(), 0x78AF5F94892F3950ull);
  EXPECT_EQ(pets::Digest().hex(), "2d06800538d394c2");
  EXPECT_EQ(pets::to_hex(0xABCull), "0000000000000abc");
}

TEST(Digest, StreamingEqualsOnePass) {
  std::vector<std::uint8_t> bytes(100'000);
  for (std::size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<std::uint8_t>(i * 31 + 7);
  pets::Digest whole;
  whole.add(bytes.data(), bytes.size());
  pets::Digest pieces;
  for (std::size_t at = 0, step = 1; at < bytes.size(); at += step, step = step * 2 + 1)
    pieces.add(bytes.data() + at, std::min(step, bytes.size() - at));
  EXPECT_EQ(pieces.value(), whole.value());
  // value() does not end the stream.
  pieces.add(nullptr, 0);
  EXPECT_EQ(pieces.value(), whole.value());
  pieces.add("x", 1);
  EXPECT_NE(pieces.value(), whole.value());
}

TEST(Digest, EveryByteCounts) {
  std::vector<std::uint8_t> bytes(4096, 0);
  const std::uint64_t before = pets::Digest().add(bytes.data(), bytes.size()).value();
  bytes[2049] ^= 0x10;
  EXPECT_NE(pets::Digest().add(bytes.data(), bytes.size()).value(), before);
}

TEST(Digest, StringsAreFramedByTheirLength) {
  EXPECT_NE(pets::Digest().add_string("ab").add_string("c").value(),
            pets::Digest().add_string("a").add_string("bc").value());
  EXPECT_NE(pets::Digest().add_string("").value(), pets::Digest().value());
  EXPECT_EQ(pets::Digest().add_string("fc.weight").value(),
            pets::Digest().add_int(9).add("fc.weight", 9).value());
}

TEST(Digest, MovedDigestContinues) {
  pets::Digest a;
  a.add("abc", 3);
  pets::Digest b = std::move(a);
  EXPECT_EQ(b.value(), 0x78AF5F94892F3950ull);
}

}  // namespace
