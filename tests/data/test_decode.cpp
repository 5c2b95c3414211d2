#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <sstream>

#include "data_test_util.hpp"
#include "pets/data/decode.hpp"
#include "pets/testdata/encode.hpp"
#include "pets/testdata/synth.hpp"
#include "pets/util/error.hpp"

using namespace pets::data;
using namespace pets::testdata;

namespace {
Image sample(int h = 96, int w = 128) { return render_synthetic_image(3, 11, 1, h, w); }

double mean_abs_diff(const Image& a, const Image& b) {
  EXPECT_EQ(a.height, b.height);
  EXPECT_EQ(a.width, b.width);
  if (a.pixels.size() != b.pixels.size()) return 1e9;
  double s = 0;
  for (std::size_t i = 0; i < a.pixels.size(); ++i) s += std::abs(a.pixels[i] - b.pixels[i]);
  return s / a.pixels.size();
}

DecodeResult decode(const std::vector<std::uint8_t>& bytes, DecodeOptions o = {}) {
  Decoder d;
  return d.decode(bytes.data(), bytes.size(), o);
}
}  // namespace

TEST(Decode, DetectsFormatByMagicBytes) {
  const Image img = sample(8, 8);
  EXPECT_EQ(detect_format(encode_jpeg(img).data(), 100), ImageFormat::kJpeg);
  const auto png = encode_png(img);
  EXPECT_EQ(detect_format(png.data(), png.size()), ImageFormat::kPng);
  const auto gif = encode_gif(img);
  EXPECT_EQ(detect_format(gif.data(), gif.size()), ImageFormat::kGif);
  const std::uint8_t mat[] = "MATLAB 5.0 MAT-file";
  EXPECT_EQ(detect_format(mat, sizeof(mat)), ImageFormat::kUnknown);
  EXPECT_EQ(detect_format(mat, 0), ImageFormat::kUnknown);
}

TEST(Decode, BaselineAndProgressiveJpeg) {
  const Image img = sample();
  for (bool progressive : {false, true}) {
    JpegOptions o;
    o.progressive = progressive;
    o.quality = 95;
    o.subsampling = 0;  // 4:4:4: the synthetic noise is too fine for 4:2:0 at this bound
    const DecodeResult r = decode(encode_jpeg(img, o));
    ASSERT_TRUE(r.ok) << r.reason;
    EXPECT_EQ(r.format, ImageFormat::kJpeg);
    EXPECT_TRUE(r.warnings.empty());
    EXPECT_LT(mean_abs_diff(r.image, img), 6.0) << "progressive=" << progressive;
  }
}

TEST(Decode, GrayscaleJpegBecomesRgb) {
  const Image img = sample();
  JpegOptions o;
  o.grayscale = true;
  o.quality = 95;
  const DecodeResult r = decode(encode_jpeg(img, o));
  ASSERT_TRUE(r.ok) << r.reason;
  ASSERT_EQ(r.image.pixels.size(), img.pixels.size());
  double err = 0;
  for (std::size_t i = 0; i < r.image.pixels.size() / 3; ++i) {
    const std::uint8_t* p = &r.image.pixels[i * 3];
    ASSERT_EQ(p[0], p[1]);
    ASSERT_EQ(p[1], p[2]);
    const std::uint8_t* q = &img.pixels[i * 3];
    err += std::abs(p[0] - (0.299 * q[0] + 0.587 * q[1] + 0.114 * q[2]));
  }
  EXPECT_LT(err / (r.image.pixels.size() / 3), 6.0);
}

TEST(Decode, CmykJpegBecomesRgb) {
  const Image img = sample();
  JpegOptions o;
  o.cmyk = true;
  o.quality = 95;
  const DecodeResult r = decode(encode_jpeg(img, o));
  ASSERT_TRUE(r.ok) << r.reason;
  EXPECT_LT(mean_abs_diff(r.image, img), 8.0);
}

TEST(Decode, PngExactAndRgbaDropsAlpha) {
  const Image img = sample(33, 47);
  const DecodeResult rgb = decode(encode_png(img));
  ASSERT_TRUE(rgb.ok) << rgb.reason;
  EXPECT_EQ(rgb.image.pixels, img.pixels);
  // A gradient alpha: compositing on any background would change the colours.
  const DecodeResult rgba = decode(encode_png(img, 256));
  ASSERT_TRUE(rgba.ok) << rgba.reason;
  EXPECT_EQ(rgba.format, ImageFormat::kPng);
  EXPECT_EQ(rgba.image.pixels, img.pixels);
}

TEST(Decode, GifFirstFrame) {
  const Image img = sample(20, 30);
  const DecodeResult r = decode(encode_gif(img));
  ASSERT_TRUE(r.ok) << r.reason;
  ASSERT_EQ(r.image.height, 20);
  ASSERT_EQ(r.image.width, 30);
  for (std::size_t i = 0; i < img.pixels.size() / 3; ++i) {
    std::uint8_t want[3];
    gif_palette_colour(&img.pixels[i * 3], want);
    ASSERT_EQ(0, std::memcmp(want, &r.image.pixels[i * 3], 3)) << "pixel " << i;
  }
}

// A GIF whose first frame's read fails without giflib setting an error code (GifErrorString(0)
// is null): found by fuzz/fuzz_decode.cpp, it crashed the reason's text.
TEST(Decode, GifFailingWithoutAnErrorCodeIsAReason) {
  const std::vector<std::uint8_t> bytes = {71, 73, 70, 56, 55, 97, 16, 0,   12, 0,   71, 73,
                                           70, 44, 0,  0,  51, 50, 50, 114, 51, 102, 14};
  const DecodeResult r = decode(bytes);
  EXPECT_FALSE(r.ok);
  EXPECT_EQ(r.reason.rfind("corrupt GIF: ", 0), 0u) << r.reason;
}

TEST(Decode, BadFilesAreReasonsNotExceptions) {
  const auto jpeg = encode_jpeg(sample());
  EXPECT_EQ(decode({}).reason, "empty file");
  std::vector<std::uint8_t> cut(jpeg.begin(), jpeg.begin() + jpeg.size() / 2);
  DecodeResult r = decode(cut);
  EXPECT_FALSE(r.ok);
  EXPECT_NE(r.reason.find("truncated"), std::string::npos) << r.reason;
  std::vector<std::uint8_t> junk = {0xFF, 0xD8, 0xFF};
  for (int i = 0; i < 500; ++i) junk.push_back(static_cast<std::uint8_t>((i * 37) & 0x7F));
  r = decode(junk);
  EXPECT_FALSE(r.ok);
  EXPECT_NE(r.reason.find("corrupt JPEG"), std::string::npos) << r.reason;
  const std::vector<std::uint8_t> text = {'h', 'e', 'l', 'l', 'o'};
  r = decode(text);
  EXPECT_FALSE(r.ok);
  EXPECT_NE(r.reason.find("unknown image format (starts with 0x68656c6c)"), std::string::npos)
      << r.reason;
  const auto png = encode_png(sample(10, 10));
  r = decode(std::vector<std::uint8_t>(png.begin(), png.begin() + 40));
  EXPECT_FALSE(r.ok);
  EXPECT_NE(r.reason.find("corrupt PNG"), std::string::npos) << r.reason;
}

TEST(Decode, DecoderRecoversAfterACorruptFile) {
  // libjpeg-turbo 2.1 keeps stale state after an error; the next good file must still decode.
  Decoder d;
  std::vector<std::uint8_t> junk = {0xFF, 0xD8, 0xFF, 0x61, 0x62, 0x63, 0x64};
  EXPECT_FALSE(d.decode(junk.data(), junk.size()).ok);
  const auto good = encode_jpeg(sample());
  const DecodeResult r = d.decode(good.data(), good.size());
  EXPECT_TRUE(r.ok) << r.reason;
}

TEST(Decode, ExtraneousBytesWarningKeepsTheImage) {
  auto jpeg = encode_jpeg(sample());
  // Insert 3 bytes before the start-of-scan marker (walk the marker segments).
  std::size_t pos = 2;
  while (!(jpeg[pos] == 0xFF && jpeg[pos + 1] == 0xDA))
    pos += 2 + (jpeg[pos + 2] << 8 | jpeg[pos + 3]);
  jpeg.insert(jpeg.begin() + static_cast<std::ptrdiff_t>(pos), 3, 0);
  const DecodeResult r = decode(jpeg);
  ASSERT_TRUE(r.ok) << r.reason;
  ASSERT_EQ(r.warnings.size(), 1u);
  EXPECT_NE(r.warnings[0].find("extraneous bytes"), std::string::npos) << r.warnings[0];
}

TEST(Decode, PixelLimitFromTheHeaderBeforeAllocation) {
  auto jpeg = encode_jpeg(sample(16, 16));
  // Rewrite the SOF0 frame size to 60000 x 60000 (3.6 GP, 10.8 GB as RGB): refused from the
  // header alone, so this test neither allocates nor decodes.
  std::size_t pos = 2;
  while (!(jpeg[pos] == 0xFF && jpeg[pos + 1] == 0xC0))
    pos += 2 + (jpeg[pos + 2] << 8 | jpeg[pos + 3]);
  jpeg[pos + 5] = 0xEA;
  jpeg[pos + 6] = 0x60;
  jpeg[pos + 7] = 0xEA;
  jpeg[pos + 8] = 0x60;
  DecodeResult r = decode(jpeg);
  EXPECT_FALSE(r.ok);
  EXPECT_EQ(r.source_width, 60000);
  EXPECT_NE(r.reason.find("pixel limit"), std::string::npos) << r.reason;
  DecodeOptions tight;
  tight.max_pixels = 16 * 16 - 1;
  r = decode(encode_png(sample(16, 16)), tight);
  EXPECT_FALSE(r.ok);
  EXPECT_NE(r.reason.find("pixel limit"), std::string::npos) << r.reason;
  tight.max_pixels = 16 * 16;
  EXPECT_TRUE(decode(encode_png(sample(16, 16)), tight).ok);
}

namespace {
/// A field of /proc/self/status in kB (VmRSS, VmHWM), or -1 where there is none.
long proc_status_kb(const std::string& field) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(field + ":", 0) != 0) continue;
    std::istringstream rest(line.substr(field.size() + 1));
    long kb = -1;
    rest >> kb;
    return kb;
  }
  return -1;
}

/// Peak growth of the resident set (MB) while `f` runs: VmHWM is reset to the current RSS first
/// (clear_refs 5), so peaks of earlier tests do not hide this one's. -1 where Linux lacks it.
template <typename F>
double peak_rss_growth_mb(F&& f) {
  {
    std::ofstream clear("/proc/self/clear_refs");
    clear << "5";
    clear.flush();
    if (!clear) return -1;
  }
  const long before = proc_status_kb("VmRSS");
  if (before < 0 || proc_status_kb("VmHWM") > before + 1024) return -1;  // reset did not work
  f();
  return (proc_status_kb("VmHWM") - before) / 1024.0;
}
}  // namespace

TEST(Decode, HeaderClaiming65500SquaredIsRefusedWithBoundedMemory) {
  // 65500 x 65500 is the largest frame JPEG can declare: 4.3 GP, 12.9 GB as RGB.
  const auto huge = pets::data::testing::jpeg_claiming_size(65500, 65500);
  // The measurement must see an allocation of the size that matters: a 4096 x 4096 claim with
  // no pixel limit makes the decoder allocate (and libjpeg fill) 48 MB.
  DecodeOptions unlimited;
  unlimited.max_pixels = UINT64_MAX;
  const double control = peak_rss_growth_mb(
      [&] { decode(pets::data::testing::jpeg_claiming_size(4096, 4096), unlimited); });
  if (control < 0) GTEST_SKIP() << "SKIPPED: /proc/self/clear_refs cannot reset VmHWM here";
  ASSERT_GT(control, 40.0) << "the RSS measurement does not see a 48 MB buffer";

  DecodeResult r;
  const double growth = peak_rss_growth_mb([&] { r = decode(huge); });
  EXPECT_FALSE(r.ok);
  EXPECT_EQ(r.source_width, 65500);
  EXPECT_EQ(r.source_height, 65500);
  EXPECT_NE(r.reason.find("pixel limit (65500x65500 = 4290250000 pixels"), std::string::npos)
      << r.reason;
  EXPECT_LT(growth, 16.0) << "decoding a refused header grew the resident set by " << growth
                          << " MB";
}

TEST(Decode, ProgressiveJpegOverTheScanLimitIsRefused) {
  const auto bomb = pets::data::testing::jpeg_with_scans(600);
  ASSERT_GE(pets::data::testing::count_jpeg_scans(bomb), 600);
  const DecodeResult r = decode(bomb);
  EXPECT_FALSE(r.ok);
  EXPECT_NE(r.reason.find("scan limit"), std::string::npos) << r.reason;
  EXPECT_NE(r.reason.find("more than 500 scans"), std::string::npos) << r.reason;
  // Only the limit refuses it: without it libjpeg decodes the file (warning about the
  // repeated refinement scans), so the test above is about the scan count, not damage.
  DecodeOptions no_limit;
  no_limit.limit_scans = false;
  const DecodeResult unlimited = decode(bomb, no_limit);
  EXPECT_TRUE(unlimited.ok) << unlimited.reason;
  // Up to the limit a file is an image.
  const DecodeResult fine = decode(pets::data::testing::jpeg_with_scans(400));
  EXPECT_TRUE(fine.ok) << fine.reason;
}

TEST(Decode, MaxSideDownscalesKeepingAspect) {
  const Image big = sample(1500, 2000);
  DecodeOptions o;
  o.max_side = 512;
  const DecodeResult r = decode(encode_jpeg(big), o);
  ASSERT_TRUE(r.ok) << r.reason;
  EXPECT_EQ(r.image.width, 512);
  EXPECT_EQ(r.image.height, 384);
  EXPECT_EQ(r.source_width, 2000);
  // Against a full decode resized the same way: DCT scaling is only the first step.
  const DecodeResult full = decode(encode_jpeg(big));
  const Image ref = resize_image(full.image, 384, 512);
  EXPECT_LT(mean_abs_diff(r.image, ref), 4.0);
  const DecodeResult small = decode(encode_png(sample(7, 5)), o);
  EXPECT_EQ(small.image.width, 5);
  EXPECT_EQ(small.image.height, 7);
}

TEST(Resize, MatchesPilTriangleFilterWeights) {
  // 1x4 -> 1x2: PIL's taps for a factor-2 reduction are (0.75, 0.75, 0.25) / 1.75.
  Image row;
  row.height = 1;
  row.width = 4;
  for (int v : {0, 60, 120, 180})
    row.pixels.insert(row.pixels.end(), {std::uint8_t(v), std::uint8_t(v), std::uint8_t(v)});
  float out[6];
  resize_crop_bilinear(row.pixels.data(), 1, 4, CropBox{0, 0, 1, 4}, 1, 2, out);
  EXPECT_NEAR(out[0], (60 * 0.75 + 120 * 0.25) / 1.75, 1e-3);
  EXPECT_NEAR(out[3], (60 * 0.25 + 120 * 0.75 + 180 * 0.75) / 1.75, 1e-3);
  // Upscaling interpolates linearly, clamped at the edges.
  float up[12];
  resize_crop_bilinear(row.pixels.data(), 1, 4, CropBox{0, 1, 1, 2}, 1, 4, up);
  EXPECT_NEAR(up[0], 60, 1e-3);
  EXPECT_NEAR(up[3], 75, 1e-3);
  EXPECT_NEAR(up[6], 105, 1e-3);
  EXPECT_NEAR(up[9], 120, 1e-3);
  EXPECT_THROW(resize_crop_bilinear(row.pixels.data(), 1, 4, CropBox{0, 3, 1, 2}, 1, 2, out),
               pets::Error);
}
