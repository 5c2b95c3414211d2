// libFuzzer target: pets::data::Decoder, the JPEG/PNG/GIF-to-RGB wrapper of pets_preprocess.
// Any bytes must give a result, never an exception or a crash; a kept image must be RGB of the
// size it claims and within the limits asked for.
#include <algorithm>
#include <cstdint>

#include "fuzz_util.hpp"
#include "pets/data/decode.hpp"

namespace {

// A pixel limit far below pets_preprocess's default (100 M): a mutated header claiming a huge
// image would otherwise spend each input allocating and decoding hundreds of megabytes. The
// refusal path itself is exercised the same way at any limit.
constexpr std::uint64_t kMaxPixels = std::uint64_t{1} << 22;

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  // One decoder for the whole run, as a pets_preprocess thread keeps one for all its files:
  // a bad input must not spoil the handle for the next one.
  static pets::data::Decoder decoder;
  pets::data::DecodeOptions options;
  options.max_pixels = kMaxPixels;
  // Both paths of pets_preprocess: kept at the decoded size, and downscaled (DCT scaling and
  // the antialiased resize); the choice is a function of the input, so a crash reproduces.
  options.max_side = size % 2 == 0 ? 0 : 48;
  const pets::data::DecodeResult r = decoder.decode(data, size, options);
  if (r.ok) {
    FUZZ_CHECK(r.reason.empty());
    FUZZ_CHECK(r.image.height > 0 && r.image.width > 0);
    FUZZ_CHECK(r.image.pixels.size() ==
               static_cast<std::size_t>(r.image.height) * r.image.width * 3);
    FUZZ_CHECK(static_cast<std::uint64_t>(r.image.height) * r.image.width <= kMaxPixels);
    if (options.max_side > 0)
      FUZZ_CHECK(std::max(r.image.height, r.image.width) <= options.max_side);
    FUZZ_CHECK(r.format != pets::data::ImageFormat::kUnknown);
  } else {
    FUZZ_CHECK(!r.reason.empty());
    FUZZ_CHECK(r.image.pixels.empty());
  }
  return 0;
}
