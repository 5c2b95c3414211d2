#pragma once
/// \file
/// Encoders used to make test data: JPEG (RGB, grayscale, CMYK; baseline or progressive)
/// through TurboJPEG, PNG (RGB or RGBA) through libpng, GIF through giflib.

#include <cstdint>
#include <vector>

#include "pets/data/image.hpp"

namespace pets::testdata {

/// How a JPEG is written.
struct JpegOptions {
  int quality = 90;
  bool progressive = false;
  bool grayscale = false;  ///< one-component JPEG from the image's luma
  bool cmyk = false;       ///< four-component (YCCK) JPEG, Adobe-style inverted CMYK
  int subsampling = 2;     ///< TJSAMP_420 by default (0 = 4:4:4, 1 = 4:2:2, 2 = 4:2:0)
};

/// Encodes an RGB image as JPEG.
std::vector<std::uint8_t> encode_jpeg(const data::Image& image, const JpegOptions& options = {});

/// Encodes an RGB image as PNG; with `alpha_value` >= 0 an alpha channel of that value (or a
/// horizontal gradient when alpha_value == 256) is added.
std::vector<std::uint8_t> encode_png(const data::Image& image, int alpha_value = -1);

/// Encodes an RGB image as a one-frame GIF with a 6x6x6 colour cube palette.
std::vector<std::uint8_t> encode_gif(const data::Image& image);

/// Quantises a colour to the palette encode_gif uses (for checking a decoded GIF).
void gif_palette_colour(const std::uint8_t rgb_in[3], std::uint8_t rgb_out[3]);

}  // namespace pets::testdata
