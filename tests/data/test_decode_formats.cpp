// The decoders of WebP (libwebp), BMP and PGM/PPM (decode_formats.cpp) on files encoded here,
// each against the pixels it was made from; TIFF's stated refusal; truncated and corrupt files
// as reasons.
#include <gtest/gtest.h>
#include <webp/encode.h>

#include <cstring>
#include <string>
#include <vector>

#include "pets/data/decode.hpp"
#include "pets/testdata/synth.hpp"

using namespace pets::data;

namespace {

using Bytes = std::vector<std::uint8_t>;

Image sample(int h, int w) { return pets::testdata::render_synthetic_image(5, 3, 1, h, w); }

DecodeResult decode(const Bytes& bytes, DecodeOptions o = {}) {
  Decoder d;
  return d.decode(bytes.data(), bytes.size(), o);
}

void put16(Bytes& b, unsigned v) { b.insert(b.end(), {std::uint8_t(v), std::uint8_t(v >> 8)}); }
void put32(Bytes& b, std::uint32_t v) {
  for (int k = 0; k < 4; ++k) b.push_back(static_cast<std::uint8_t>(v >> (8 * k)));
}

/// A BMP of `img`: 24 or 32 bits a pixel (32 with BI_BITFIELDS masks for X8R8G8B8), rows
/// bottom-up unless `top_down`.
Bytes encode_bmp(const Image& img, int bpp, bool top_down) {
  const std::uint32_t stride = (static_cast<std::uint32_t>(img.width) * bpp + 31) / 32 * 4;
  const std::uint32_t header = 40, masks = bpp == 32 ? 12 : 0;
  const std::uint32_t offset = 14 + header + masks;
  Bytes b = {'B', 'M'};
  put32(b, offset + stride * img.height);
  put32(b, 0);
  put32(b, offset);
  put32(b, header);
  put32(b, static_cast<std::uint32_t>(img.width));
  put32(b, static_cast<std::uint32_t>(top_down ? -img.height : img.height));
  put16(b, 1);
  put16(b, static_cast<unsigned>(bpp));
  put32(b, bpp == 32 ? 3 : 0);
  for (int k = 0; k < 5; ++k) put32(b, 0);
  if (bpp == 32) {
    put32(b, 0xFF0000);
    put32(b, 0xFF00);
    put32(b, 0xFF);
  }
  for (int r = 0; r < img.height; ++r) {
    const int y = top_down ? r : img.height - 1 - r;
    Bytes row;
    for (int x = 0; x < img.width; ++x) {
      const std::uint8_t* p = &img.pixels[(static_cast<std::size_t>(y) * img.width + x) * 3];
      row.insert(row.end(), {p[2], p[1], p[0]});
      if (bpp == 32) row.push_back(0x7F);  // the unused byte: not alpha, not a colour
    }
    row.resize(stride, 0);
    b.insert(b.end(), row.begin(), row.end());
  }
  return b;
}

Bytes text(const std::string& s) { return Bytes(s.begin(), s.end()); }

}  // namespace

TEST(DecodeFormats, DetectedByTheirMagicBytes) {
  // (each literal's bytes without the final '\0': they hold '\0's of their own)
  const auto format = [](const auto& literal) {
    return detect_format(reinterpret_cast<const std::uint8_t*>(literal), sizeof(literal) - 1);
  };
  EXPECT_EQ(format("RIFF\x10\0\0\0WEBPVP8 "), ImageFormat::kWebp);
  EXPECT_EQ(format("RIFF\x10\0\0\0WAVEfmt "), ImageFormat::kUnknown);
  EXPECT_EQ(format("BM\x46\0\0\0"), ImageFormat::kBmp);
  EXPECT_EQ(format("P6\n2 2\n255\n"), ImageFormat::kPnm);
  EXPECT_EQ(format("P5 2 2 255 "), ImageFormat::kPnm);
  EXPECT_EQ(format("P4\n2 2\n"), ImageFormat::kUnknown);  // PBM bitmaps are not read
  EXPECT_EQ(format("Pxx"), ImageFormat::kUnknown);
  EXPECT_EQ(format("II*\0"), ImageFormat::kTiff);
  EXPECT_EQ(format("MM\0*"), ImageFormat::kTiff);
}

TEST(DecodeFormats, BmpOf24And32BitsEitherRowOrder) {
  const Image img = sample(5, 7);  // 7 * 3 = 21 bytes a row: padded to 24
  for (const int bpp : {24, 32})
    for (const bool top_down : {false, true}) {
      const DecodeResult r = decode(encode_bmp(img, bpp, top_down));
      ASSERT_TRUE(r.ok) << bpp << " bits: " << r.reason;
      EXPECT_EQ(r.format, ImageFormat::kBmp);
      EXPECT_EQ(r.image.height, 5);
      EXPECT_EQ(r.image.width, 7);
      EXPECT_EQ(r.image.pixels, img.pixels) << bpp << " bits, top_down " << top_down;
    }
}

TEST(DecodeFormats, BmpWithAPalette) {
  // 4 bits a pixel, 3x2, bottom-up; palette entries are B, G, R, 0.
  Bytes b = {'B', 'M'};
  const std::uint32_t offset = 14 + 40 + 16 * 4;
  put32(b, offset + 2 * 4);
  put32(b, 0);
  put32(b, offset);
  put32(b, 40);
  put32(b, 3);
  put32(b, 2);
  put16(b, 1);
  put16(b, 4);
  for (int k = 0; k < 6; ++k) put32(b, 0);
  for (int i = 0; i < 16; ++i) b.insert(b.end(), {std::uint8_t(i), std::uint8_t(10 * i), 200, 0});
  b.insert(b.end(), {0x45, 0x60, 0, 0});  // the bottom row: indices 4, 5, 6
  b.insert(b.end(), {0x12, 0x30, 0, 0});  // the top row: 1, 2, 3
  const DecodeResult r = decode(b);
  ASSERT_TRUE(r.ok) << r.reason;
  const Bytes want = {200, 10, 1, 200, 20, 2, 200, 30, 3, 200, 40, 4, 200, 50, 5, 200, 60, 6};
  EXPECT_EQ(r.image.pixels, want);
}

TEST(DecodeFormats, BadBmpsAreReasons) {
  Bytes bmp = encode_bmp(sample(4, 4), 24, false);
  Bytes cut(bmp.begin(), bmp.end() - 10);
  EXPECT_EQ(decode(cut).reason.rfind("truncated BMP: ", 0), 0u) << decode(cut).reason;
  Bytes rle = bmp;
  rle[30] = 1;  // BI_RLE8
  EXPECT_NE(decode(rle).reason.find("compression 1"), std::string::npos) << decode(rle).reason;
  Bytes huge = bmp;
  huge[18 + 3] = 0x7F;  // width 2^31 - 1 ...
  EXPECT_NE(decode(huge).reason.find("pixel limit"), std::string::npos) << decode(huge).reason;
  EXPECT_EQ(decode(Bytes(bmp.begin(), bmp.begin() + 20)).reason.rfind("truncated BMP", 0), 0u);
}

TEST(DecodeFormats, PpmAndPgmBinaryAndPlain) {
  // P6 8 bits: exact.
  const Image img = sample(3, 4);
  Bytes p6 = text("P6\n# a comment\n4 3\n255\n");
  p6.insert(p6.end(), img.pixels.begin(), img.pixels.end());
  DecodeResult r = decode(p6);
  ASSERT_TRUE(r.ok) << r.reason;
  EXPECT_EQ(r.format, ImageFormat::kPnm);
  EXPECT_EQ(r.image.pixels, img.pixels);
  // P5 16 bits (big-endian), maximum 1000: gray to RGB, scaled to 0..255.
  Bytes p5 = text("P5 2 1 1000\n");
  p5.insert(p5.end(), {0x01, 0xF4, 0x03, 0xE8});  // 500, 1000
  r = decode(p5);
  ASSERT_TRUE(r.ok) << r.reason;
  EXPECT_EQ(r.image.pixels, (Bytes{128, 128, 128, 255, 255, 255}));
  // P3 and P2, plain text.
  r = decode(text("P3\n2 1\n15\n15 0 0  0 15 0\n"));
  ASSERT_TRUE(r.ok) << r.reason;
  EXPECT_EQ(r.image.pixels, (Bytes{255, 0, 0, 0, 255, 0}));
  r = decode(text("P2 2 1 255 7 250"));
  ASSERT_TRUE(r.ok) << r.reason;
  EXPECT_EQ(r.image.pixels, (Bytes{7, 7, 7, 250, 250, 250}));
}

TEST(DecodeFormats, BadPnmsAreReasons) {
  EXPECT_EQ(decode(text("P6\n4 3\n255\nabc")).reason, "truncated PPM: 3 bytes for 36 samples");
  EXPECT_EQ(decode(text("P3 1 1 255 1 2")).reason, "truncated PPM: 3 bytes for 3 samples");
  EXPECT_EQ(decode(text("P3 1 1 255 1 2    ")).reason, "truncated PPM: sample 2 of 3 missing");
  // A header that claims 10^8 pixels in a file of 20 bytes: refused before the samples are
  // allocated.
  EXPECT_EQ(decode(text("P6 10000 10000 255 ")).reason,
            "truncated PPM: 0 bytes for 300000000 samples");
  EXPECT_EQ(decode(text("P2 1 1 9 10")).reason,
            "corrupt PGM: sample 0 of 1 over the maximum value");
  EXPECT_EQ(decode(text("P5 0 1 255 ")).reason,
            "corrupt PGM: bad header (width, height, maximum value)");
  EXPECT_EQ(decode(text("P6 2 2 70000 ")).reason,
            "corrupt PPM: bad header (width, height, maximum value)");
  DecodeOptions tight;
  tight.max_pixels = 5;
  EXPECT_NE(decode(text("P6 3 2 255 "), tight).reason.find("pixel limit"), std::string::npos);
}

TEST(DecodeFormats, WebpLosslessIsExactAndLossyClose) {
  const Image img = sample(24, 32);
  std::uint8_t* out = nullptr;
  std::size_t n =
      WebPEncodeLosslessRGB(img.pixels.data(), img.width, img.height, img.width * 3, &out);
  ASSERT_GT(n, 0u);
  const Bytes lossless(out, out + n);
  WebPFree(out);
  DecodeResult r = decode(lossless);
  ASSERT_TRUE(r.ok) << r.reason;
  EXPECT_EQ(r.format, ImageFormat::kWebp);
  EXPECT_EQ(r.image.pixels, img.pixels);
  n = WebPEncodeRGB(img.pixels.data(), img.width, img.height, img.width * 3, 90, &out);
  ASSERT_GT(n, 0u);
  const Bytes lossy(out, out + n);
  WebPFree(out);
  r = decode(lossy);
  ASSERT_TRUE(r.ok) << r.reason;
  double diff = 0;
  for (std::size_t i = 0; i < img.pixels.size(); ++i)
    diff += std::abs(int(r.image.pixels[i]) - int(img.pixels[i]));
  EXPECT_LT(diff / img.pixels.size(), 12.0);
  EXPECT_EQ(decode(Bytes(lossless.begin(), lossless.begin() + 20)).reason, "truncated WebP");
  DecodeOptions tight;
  tight.max_pixels = 24 * 32 - 1;
  EXPECT_NE(decode(lossless, tight).reason.find("pixel limit"), std::string::npos);
}

TEST(DecodeFormats, TiffIsRefusedWithItsReason) {
  const DecodeResult r = decode(Bytes{'I', 'I', '*', 0, 8, 0, 0, 0});
  EXPECT_FALSE(r.ok);
  EXPECT_EQ(r.format, ImageFormat::kTiff);
  EXPECT_EQ(r.reason, "TIFF: not decoded (convert it to PNG, which keeps every pixel)");
}
