#include "decode_formats.hpp"

#include <webp/decode.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <limits>
#include <vector>

namespace pets::data::detail {

namespace {

// ---- Netpbm ---------------------------------------------------------------------------------

/// Reads the header's and a plain raster's decimal numbers, passing over whitespace and
/// '#' comments.
class PnmReader {
 public:
  PnmReader(const std::uint8_t* data, std::size_t size) : d_(data), n_(size) {}
  /// The next number, or -1 when there is none (end of file, another character, overflow).
  long long number() {
    skip_space();
    if (at_ >= n_ || !std::isdigit(d_[at_])) return -1;
    long long v = 0;
    while (at_ < n_ && std::isdigit(d_[at_])) {
      v = v * 10 + (d_[at_++] - '0');
      if (v > (1LL << 40)) return -1;
    }
    return v;
  }
  std::size_t at() const { return at_; }
  void advance(std::size_t k) { at_ += k; }

 private:
  void skip_space() {
    while (at_ < n_) {
      if (d_[at_] == '#') {
        while (at_ < n_ && d_[at_] != '\n' && d_[at_] != '\r') ++at_;
      } else if (std::isspace(d_[at_])) {
        ++at_;
      } else {
        break;
      }
    }
  }
  const std::uint8_t* d_;
  std::size_t n_;
  std::size_t at_ = 2;  // after the magic number
};

}  // namespace

void decode_pnm(const std::uint8_t* data, std::size_t size, const DecodeOptions& opt,
                DecodeResult& r) {
  const char kind = static_cast<char>(data[1]);
  const bool plain = kind == '2' || kind == '3';
  const int channels = kind == '3' || kind == '6' ? 3 : 1;
  const char* what = channels == 3 ? "PPM" : "PGM";
  PnmReader in(data, size);
  const long long w = in.number(), h = in.number(), maxval = in.number();
  if (w <= 0 || h <= 0 || maxval <= 0 || maxval > 65535) {
    r.reason = std::string("corrupt ") + what + ": bad header (width, height, maximum value)";
    return;
  }
  r.source_height = static_cast<int>(std::min<long long>(h, std::numeric_limits<int>::max()));
  r.source_width = static_cast<int>(std::min<long long>(w, std::numeric_limits<int>::max()));
  const auto uw = static_cast<std::uint64_t>(w), uh = static_cast<std::uint64_t>(h);
  if (over_limit(uw, uh, opt.max_pixels)) {
    r.reason = pixel_limit_reason(uw, uh, opt.max_pixels);
    return;
  }
  const std::size_t samples = uw * uh * static_cast<std::size_t>(channels);
  // The file must be able to hold its samples before they are allocated: a plain sample takes
  // two bytes at least (a digit and a space), a binary one its bytes.
  const std::size_t bytes = maxval > 255 ? 2 : 1;
  const std::size_t room = in.at() + 1 >= size ? 0 : size - in.at() - 1;
  if ((plain ? (room + 1) / 2 : room / bytes) < samples) {
    r.reason = std::string("truncated ") + what + ": " + std::to_string(room) + " bytes for " +
               std::to_string(samples) + " samples";
    return;
  }
  std::vector<std::uint32_t> values(samples);
  if (plain) {
    for (std::size_t i = 0; i < samples; ++i) {
      const long long v = in.number();
      if (v < 0 || v > maxval) {
        r.reason = std::string(v < 0 ? "truncated " : "corrupt ") + what + ": sample " +
                   std::to_string(i) + " of " + std::to_string(samples) +
                   (v < 0 ? " missing" : " over the maximum value");
        return;
      }
      values[i] = static_cast<std::uint32_t>(v);
    }
  } else {
    in.advance(1);  // the one whitespace character after the maximum value
    const std::uint8_t* p = data + in.at();
    for (std::size_t i = 0; i < samples; ++i)
      values[i] = bytes == 2 ? (std::uint32_t{p[2 * i]} << 8) | p[2 * i + 1] : p[i];
  }
  r.image.height = static_cast<int>(h);
  r.image.width = static_cast<int>(w);
  r.image.pixels.resize(uw * uh * 3);
  const auto m = static_cast<std::uint32_t>(maxval);
  for (std::size_t i = 0; i < uw * uh; ++i)
    for (int c = 0; c < 3; ++c) {
      std::uint32_t v = values[i * static_cast<std::size_t>(channels) +
                               static_cast<std::size_t>(channels == 3 ? c : 0)];
      v = std::min(v, m);
      r.image.pixels[i * 3 + static_cast<std::size_t>(c)] =
          static_cast<std::uint8_t>((v * 255 + m / 2) / m);
    }
  finish(r, opt);
}

// ---- BMP ------------------------------------------------------------------------------------

namespace {

std::uint32_t le32(const std::uint8_t* p) {
  return std::uint32_t{p[0]} | std::uint32_t{p[1]} << 8 | std::uint32_t{p[2]} << 16 |
         std::uint32_t{p[3]} << 24;
}
std::uint16_t le16(const std::uint8_t* p) { return static_cast<std::uint16_t>(p[0] | p[1] << 8); }

/// A channel of a 16- or 32-bit pixel under `mask`, scaled to 0..255 (0 for an empty mask).
std::uint8_t masked(std::uint32_t pixel, std::uint32_t mask) {
  if (mask == 0) return 0;
  int shift = 0;
  while (!((mask >> shift) & 1)) ++shift;
  const std::uint32_t max = mask >> shift;
  const std::uint32_t v = (pixel & mask) >> shift;
  return static_cast<std::uint8_t>((std::uint64_t{v} * 255 + max / 2) / max);
}

}  // namespace

void decode_bmp(const std::uint8_t* d, std::size_t size, const DecodeOptions& opt,
                DecodeResult& r) {
  if (size < 14 + 16) {
    r.reason = "truncated BMP: " + std::to_string(size) + " bytes, less than its headers";
    return;
  }
  const std::uint32_t offset = le32(d + 10), header = le32(d + 14);
  if (header < 40 || 14 + std::uint64_t{header} > size) {
    r.reason = header == 12 ? "BMP with an OS/2 header: not decoded"
                            : "corrupt BMP: header of " + std::to_string(header) + " bytes";
    return;
  }
  const auto w = static_cast<std::int32_t>(le32(d + 18));
  const auto raw_h = static_cast<std::int32_t>(le32(d + 22));
  const int bpp = le16(d + 28);
  const std::uint32_t compression = le32(d + 30), colours_used = le32(d + 46);
  if (w <= 0 || raw_h == 0 || raw_h == std::numeric_limits<std::int32_t>::min()) {
    r.reason = "corrupt BMP: size " + std::to_string(w) + "x" + std::to_string(raw_h);
    return;
  }
  const bool top_down = raw_h < 0;
  const auto h = static_cast<std::uint64_t>(top_down ? -std::int64_t{raw_h} : raw_h);
  const auto uw = static_cast<std::uint64_t>(w);
  r.source_height = static_cast<int>(h);
  r.source_width = w;
  if (over_limit(uw, h, opt.max_pixels)) {
    r.reason = pixel_limit_reason(uw, h, opt.max_pixels);
    return;
  }
  const bool bitfields = compression == 3 || compression == 6;
  if (!(compression == 0 || (bitfields && (bpp == 16 || bpp == 32)))) {
    r.reason = "BMP with compression " + std::to_string(compression) +
               " (RLE, JPEG or PNG inside): not decoded";
    return;
  }
  if (bpp != 1 && bpp != 4 && bpp != 8 && bpp != 16 && bpp != 24 && bpp != 32) {
    r.reason = "corrupt BMP: " + std::to_string(bpp) + " bits a pixel";
    return;
  }
  // Channel masks: in the header (V2 and later, 52+ bytes) or after a 40-byte one; the defaults
  // without BI_BITFIELDS.
  std::uint32_t masks[3] = {0x7C00, 0x03E0, 0x001F};
  if (bpp == 32) masks[0] = 0xFF0000, masks[1] = 0xFF00, masks[2] = 0xFF;
  if (bitfields) {
    if (14 + std::uint64_t{std::max<std::uint32_t>(header, 40)} + 12 > size) {
      r.reason = "truncated BMP: no channel masks";
      return;
    }
    for (int c = 0; c < 3; ++c) masks[c] = le32(d + 14 + 40 + 4 * c);
  }
  std::vector<std::uint8_t> palette;  // RGB per entry
  if (bpp <= 8) {
    const std::uint64_t entries =
        colours_used == 0 ? (std::uint64_t{1} << bpp) : std::min<std::uint64_t>(colours_used, 256);
    const std::uint64_t at = 14 + std::uint64_t{header};
    if (at + entries * 4 > size) {
      r.reason = "truncated BMP: the palette";
      return;
    }
    for (std::uint64_t i = 0; i < entries; ++i)
      palette.insert(palette.end(), {d[at + 4 * i + 2], d[at + 4 * i + 1], d[at + 4 * i]});
  }
  const std::uint64_t stride = (uw * static_cast<std::uint64_t>(bpp) + 31) / 32 * 4;
  if (offset > size || (size - offset) / stride < h) {
    r.reason = "truncated BMP: " + std::to_string(offset > size ? 0 : size - offset) + " of " +
               std::to_string(stride * h) + " pixel bytes";
    return;
  }
  r.image.height = static_cast<int>(h);
  r.image.width = w;
  r.image.pixels.resize(uw * h * 3);
  for (std::uint64_t y = 0; y < h; ++y) {
    const std::uint8_t* row = d + offset + stride * (top_down ? y : h - 1 - y);
    std::uint8_t* out = r.image.pixels.data() + y * uw * 3;
    for (std::uint64_t x = 0; x < uw; ++x, out += 3) {
      if (bpp <= 8) {
        const std::uint64_t bit = x * static_cast<std::uint64_t>(bpp);
        const unsigned index =
            (row[bit / 8] >> (8 - bpp - static_cast<int>(bit % 8))) & ((1u << bpp) - 1);
        if (3 * std::size_t{index} + 2 < palette.size())
          std::memcpy(out, &palette[3 * std::size_t{index}], 3);
        else
          out[0] = out[1] = out[2] = 0;
      } else if (bpp == 24) {
        out[0] = row[3 * x + 2], out[1] = row[3 * x + 1], out[2] = row[3 * x];
      } else {
        const std::uint32_t pixel = bpp == 16 ? le16(row + 2 * x) : le32(row + 4 * x);
        for (int c = 0; c < 3; ++c) out[c] = masked(pixel, masks[c]);
      }
    }
  }
  finish(r, opt);
}

// ---- WebP -----------------------------------------------------------------------------------

void decode_webp(const std::uint8_t* data, std::size_t size, const DecodeOptions& opt,
                 DecodeResult& r) {
  WebPBitstreamFeatures features;
  const VP8StatusCode status = WebPGetFeatures(data, size, &features);
  if (status != VP8_STATUS_OK) {
    r.reason = status == VP8_STATUS_NOT_ENOUGH_DATA ? "truncated WebP" : "corrupt WebP";
    return;
  }
  if (features.has_animation) {
    r.reason = "animated WebP: not decoded";
    return;
  }
  const auto w = static_cast<std::uint64_t>(features.width);
  const auto h = static_cast<std::uint64_t>(features.height);
  r.source_height = features.height;
  r.source_width = features.width;
  if (over_limit(w, h, opt.max_pixels)) {
    r.reason = pixel_limit_reason(w, h, opt.max_pixels);
    return;
  }
  r.image.height = features.height;
  r.image.width = features.width;
  r.image.pixels.resize(w * h * 3);
  if (WebPDecodeRGBInto(data, size, r.image.pixels.data(), r.image.pixels.size(),
                        static_cast<int>(w * 3)) == nullptr) {
    r.reason = "corrupt WebP: the image data cannot be decoded";
    return;
  }
  finish(r, opt);
}

}  // namespace pets::data::detail
