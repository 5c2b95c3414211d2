#pragma once
/// \file
/// The decoders of decode.cpp's formats other than JPEG, PNG and GIF, and the helpers all of them
/// share; private to src/data. Each fills a DecodeResult (reason on failure) and never throws for
/// bad data.

#include <cstdint>
#include <string>

#include "pets/data/decode.hpp"

namespace pets::data::detail {

/// "over the pixel limit (WxH = N pixels > LIMIT)".
std::string pixel_limit_reason(std::uint64_t w, std::uint64_t h, std::uint64_t limit);

/// True when a w x h image has more than `limit` pixels.
inline bool over_limit(std::uint64_t w, std::uint64_t h, std::uint64_t limit) {
  return w * h > limit;
}

/// Scales the decoded image to the options' --max-side and marks the result ok.
void finish(DecodeResult& r, const DecodeOptions& opt);

/// Netpbm PGM and PPM, binary (P5, P6) and plain (P2, P3), 8 or 16 bits a sample.
void decode_pnm(const std::uint8_t* data, std::size_t size, const DecodeOptions& opt,
                DecodeResult& r);

/// Windows BMP with a BITMAPINFOHEADER or later: 1, 4 and 8 bits a pixel with a palette, 24 bits,
/// and 16 and 32 bits (channel masks as given, 5-5-5 and 8-8-8 when none); rows bottom-up or
/// top-down. RLE and embedded JPEG or PNG are refused.
void decode_bmp(const std::uint8_t* data, std::size_t size, const DecodeOptions& opt,
                DecodeResult& r);

/// WebP (lossy or lossless, still images) through libwebp; alpha dropped.
void decode_webp(const std::uint8_t* data, std::size_t size, const DecodeOptions& opt,
                 DecodeResult& r);

}  // namespace pets::data::detail
