#pragma once
/// \file
/// Image decoding by content, not by name: JPEG through TurboJPEG, PNG through libpng, GIF
/// (first frame) through giflib, WebP through libwebp, BMP and Netpbm (PGM, PPM) by our own code
/// (decode_formats.cpp); always to 8-bit RGB (grayscale and CMYK converted, alpha dropped as
/// PIL's `convert("RGB")`). TIFF is recognised and refused with that reason. A bad file is a
/// result, not an exception.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "pets/data/image.hpp"

namespace pets::data {

/// The container format, from the first bytes.
enum class ImageFormat { kUnknown, kJpeg, kPng, kGif, kWebp, kBmp, kPnm, kTiff };

/// Detects JPEG (FF D8 FF), PNG (89 'PNG' 0D 0A 1A 0A), GIF ("GIF87a"/"GIF89a"), WebP ("RIFF"
/// size "WEBP"), BMP ("BM"), PGM/PPM ("P2", "P3", "P5", "P6" and a space) and TIFF ("II*\0",
/// "MM\0*").
ImageFormat detect_format(const std::uint8_t* data, std::size_t size);

/// "JPEG", "PNG", "GIF", "WebP", "BMP", "PGM/PPM", "TIFF" or "unknown".
const char* format_name(ImageFormat format);

/// Limits and output size of a decode.
struct DecodeOptions {
  /// Images with more pixels than this (from the header, before any allocation) are refused.
  std::uint64_t max_pixels = 100'000'000;
  /// Longer side after decoding, downscaled with aspect kept and antialiasing; 0 keeps the size.
  int max_side = 0;
  /// Refuse progressive JPEGs with more than 500 scans (TJFLAG_LIMITSCANS, a CPU-time bomb).
  bool limit_scans = true;
};

/// The outcome of decoding one file.
struct DecodeResult {
  bool ok = false;  ///< an image was produced
  ImageFormat format = ImageFormat::kUnknown;
  Image image;                        ///< valid when ok
  std::string reason;                 ///< why not, when !ok
  std::vector<std::string> warnings;  ///< decoder warnings of a kept image
  int source_height = 0;              ///< size in the file's header (0 if unknown)
  int source_width = 0;
};

/// A decoder owns one TurboJPEG handle: use one per thread.
class Decoder {
 public:
  Decoder();
  ~Decoder();
  Decoder(const Decoder&) = delete;
  Decoder& operator=(const Decoder&) = delete;
  Decoder(Decoder&&) noexcept;
  Decoder& operator=(Decoder&&) noexcept;

  /// Decodes an in-memory file; never throws for bad data (only for resource failures).
  DecodeResult decode(const std::uint8_t* data, std::size_t size,
                      const DecodeOptions& options = {});
  /// Reads and decodes a file; an unreadable file is a failed result.
  DecodeResult decode_file(const std::string& path, const DecodeOptions& options = {});

 private:
  struct TjDeleter {
    void operator()(void* handle) const;
  };
  std::unique_ptr<void, TjDeleter> tj_;
};

/// The whole file as bytes; throws pets::Error when it cannot be read.
std::vector<std::uint8_t> read_file_bytes(const std::string& path);

}  // namespace pets::data
