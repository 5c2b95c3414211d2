#include "pets/data/decode.hpp"

#include <gif_lib.h>
#include <png.h>
#include <turbojpeg.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <fstream>

#include "decode_formats.hpp"
#include "pets/util/error.hpp"

namespace pets::data {

using detail::finish;
using detail::over_limit;
using detail::pixel_limit_reason;

ImageFormat detect_format(const std::uint8_t* d, std::size_t n) {
  if (n >= 3 && d[0] == 0xFF && d[1] == 0xD8 && d[2] == 0xFF) return ImageFormat::kJpeg;
  static const std::uint8_t kPng[8] = {0x89, 'P', 'N', 'G', 0x0D, 0x0A, 0x1A, 0x0A};
  if (n >= 8 && std::memcmp(d, kPng, 8) == 0) return ImageFormat::kPng;
  if (n >= 6 && (std::memcmp(d, "GIF87a", 6) == 0 || std::memcmp(d, "GIF89a", 6) == 0))
    return ImageFormat::kGif;
  if (n >= 12 && std::memcmp(d, "RIFF", 4) == 0 && std::memcmp(d + 8, "WEBP", 4) == 0)
    return ImageFormat::kWebp;
  if (n >= 2 && d[0] == 'B' && d[1] == 'M') return ImageFormat::kBmp;
  if (n >= 3 && d[0] == 'P' && (d[1] == '2' || d[1] == '3' || d[1] == '5' || d[1] == '6') &&
      std::isspace(d[2]))
    return ImageFormat::kPnm;
  if (n >= 4 && (std::memcmp(d, "II*\0", 4) == 0 || std::memcmp(d, "MM\0*", 4) == 0))
    return ImageFormat::kTiff;
  return ImageFormat::kUnknown;
}

const char* format_name(ImageFormat f) {
  switch (f) {
    case ImageFormat::kJpeg:
      return "JPEG";
    case ImageFormat::kPng:
      return "PNG";
    case ImageFormat::kGif:
      return "GIF";
    case ImageFormat::kWebp:
      return "WebP";
    case ImageFormat::kBmp:
      return "BMP";
    case ImageFormat::kPnm:
      return "PGM/PPM";
    case ImageFormat::kTiff:
      return "TIFF";
    default:
      return "unknown";
  }
}

std::vector<std::uint8_t> read_file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  PETS_CHECK(in, "cannot open " + path);
  const std::streamoff size = in.tellg();
  PETS_CHECK(size >= 0, "cannot size " + path);
  std::vector<std::uint8_t> bytes(static_cast<std::size_t>(size));
  in.seekg(0);
  if (size > 0) in.read(reinterpret_cast<char*>(bytes.data()), size);
  PETS_CHECK(in, "cannot read " + path);
  return bytes;
}

void Decoder::TjDeleter::operator()(void* handle) const {
  if (handle) tjDestroy(static_cast<tjhandle>(handle));
}

Decoder::Decoder() : tj_(tjInitDecompress()) {
  PETS_CHECK(tj_ != nullptr, std::string("tjInitDecompress failed: ") + tjGetErrorStr2(nullptr));
}
Decoder::~Decoder() = default;
Decoder::Decoder(Decoder&&) noexcept = default;
Decoder& Decoder::operator=(Decoder&&) noexcept = default;

std::string detail::pixel_limit_reason(std::uint64_t w, std::uint64_t h, std::uint64_t limit) {
  return "over the pixel limit (" + std::to_string(w) + "x" + std::to_string(h) + " = " +
         std::to_string(w * h) + " pixels > " + std::to_string(limit) + ")";
}

void detail::finish(DecodeResult& r, const DecodeOptions& opt) {
  int oh = 0;
  int ow = 0;
  fit_max_side(r.image.height, r.image.width, opt.max_side, oh, ow);
  if (oh != r.image.height || ow != r.image.width) r.image = resize_image(r.image, oh, ow);
  r.ok = true;
}

namespace {

void decode_jpeg(tjhandle tj, const std::uint8_t* data, std::size_t size, const DecodeOptions& opt,
                 DecodeResult& r) {
  int w = 0, h = 0, subsamp = 0, colorspace = 0;
  if (tjDecompressHeader3(tj, data, static_cast<unsigned long>(size), &w, &h, &subsamp,
                          &colorspace) != 0) {
    // A warning while reading the markers (extraneous bytes before one) still yields a header;
    // the decompression below reports it again and records it.
    if (tjGetErrorCode(tj) != TJERR_WARNING || w <= 0 || h <= 0) {
      r.reason = std::string("corrupt JPEG header: ") + tjGetErrorStr2(tj);
      return;
    }
  }
  r.source_height = h;
  r.source_width = w;
  if (w <= 0 || h <= 0) {
    r.reason = "corrupt JPEG: no frame size in the header";
    return;
  }
  if (over_limit(static_cast<std::uint64_t>(w), static_cast<std::uint64_t>(h), opt.max_pixels)) {
    r.reason = pixel_limit_reason(static_cast<std::uint64_t>(w), static_cast<std::uint64_t>(h),
                                  opt.max_pixels);
    return;
  }
  // Let the DCT do the first halvings: the smallest 1/2, 1/4, 1/8 that still covers max_side.
  int sw = w, sh = h;
  if (opt.max_side > 0) {
    for (int denom : {8, 4, 2}) {
      const int cw = (w + denom - 1) / denom, ch = (h + denom - 1) / denom;
      if (std::max(cw, ch) >= opt.max_side) {
        sw = cw;
        sh = ch;
        break;
      }
    }
  }
  const bool cmyk = colorspace == TJCS_CMYK || colorspace == TJCS_YCCK;
  const int pf = cmyk ? TJPF_CMYK : TJPF_RGB;
  const int channels = tjPixelSize[pf];
  std::vector<std::uint8_t> buf(static_cast<std::size_t>(sw) * sh * channels);
  int flags = TJFLAG_ACCURATEDCT;
  if (opt.limit_scans) flags |= TJFLAG_LIMITSCANS;
  if (tjDecompress2(tj, data, static_cast<unsigned long>(size), buf.data(), sw, 0, sh, pf, flags) !=
      0) {
    const std::string msg = tjGetErrorStr2(tj);
    if (tjGetErrorCode(tj) != TJERR_WARNING) {
      // TJFLAG_LIMITSCANS fails a valid file too; "corrupt" would send the user looking for
      // damage that is not there.
      const bool scan_limit =
          opt.limit_scans && msg.find("more than 500 scans") != std::string::npos;
      r.reason = (scan_limit ? "over the scan limit: " : "corrupt JPEG: ") + msg;
      return;
    }
    // libjpeg reports a cut-off file as a warning and pads it with grey; that is not an image.
    if (msg.find("Premature end") != std::string::npos) {
      r.reason = "truncated JPEG: " + msg;
      return;
    }
    r.warnings.push_back(msg);
  }
  r.image.height = sh;
  r.image.width = sw;
  if (cmyk) {
    // Adobe-style inverted CMYK, as libjpeg hands it out: R = C * K / 255 (PIL does the same).
    r.image.pixels.resize(static_cast<std::size_t>(sw) * sh * 3);
    for (std::size_t i = 0, n = static_cast<std::size_t>(sw) * sh; i < n; ++i) {
      const unsigned k = buf[i * 4 + 3];
      for (int c = 0; c < 3; ++c)
        r.image.pixels[i * 3 + c] = static_cast<std::uint8_t>((buf[i * 4 + c] * k + 127) / 255);
    }
  } else {
    r.image.pixels = std::move(buf);
  }
  finish(r, opt);
}

void decode_png(const std::uint8_t* data, std::size_t size, const DecodeOptions& opt,
                DecodeResult& r) {
  png_image img;
  std::memset(&img, 0, sizeof(img));
  img.version = PNG_IMAGE_VERSION;
  if (!png_image_begin_read_from_memory(&img, data, size)) {
    r.reason = std::string("corrupt PNG: ") + img.message;
    png_image_free(&img);
    return;
  }
  r.source_height = static_cast<int>(img.height);
  r.source_width = static_cast<int>(img.width);
  if (over_limit(img.width, img.height, opt.max_pixels)) {
    r.reason = pixel_limit_reason(img.width, img.height, opt.max_pixels);
    png_image_free(&img);
    return;
  }
  // Read with alpha and drop it ourselves: PIL's convert("RGB") discards alpha, whereas
  // libpng's RGB output would composite onto a background.
  img.format = PNG_FORMAT_RGBA;
  std::vector<std::uint8_t> rgba(PNG_IMAGE_SIZE(img));
  if (!png_image_finish_read(&img, nullptr, rgba.data(), 0, nullptr)) {
    r.reason = std::string("corrupt PNG: ") + img.message;
    png_image_free(&img);
    return;
  }
  if (img.warning_or_error & PNG_IMAGE_WARNING) r.warnings.push_back(img.message);
  const std::size_t n = static_cast<std::size_t>(img.width) * img.height;
  r.image.height = static_cast<int>(img.height);
  r.image.width = static_cast<int>(img.width);
  r.image.pixels.resize(n * 3);
  for (std::size_t i = 0; i < n; ++i)
    for (int c = 0; c < 3; ++c) r.image.pixels[i * 3 + c] = rgba[i * 4 + c];
  png_image_free(&img);
  finish(r, opt);
}

struct GifSource {
  const std::uint8_t* data;
  std::size_t size;
  std::size_t pos;
};

int gif_read(GifFileType* gif, GifByteType* out, int len) {
  auto* src = static_cast<GifSource*>(gif->UserData);
  const std::size_t n = std::min(static_cast<std::size_t>(len), src->size - src->pos);
  std::memcpy(out, src->data + src->pos, n);
  src->pos += n;
  return static_cast<int>(n);
}

/// giflib's text for error `code`; GifErrorString returns null for 0 (a read that failed without
/// setting a code) and for codes it does not know.
std::string gif_error_text(int code) {
  const char* text = GifErrorString(code);
  return text != nullptr ? text : "giflib error " + std::to_string(code);
}

void decode_gif(const std::uint8_t* data, std::size_t size, const DecodeOptions& opt,
                DecodeResult& r) {
  GifSource src{data, size, 0};
  int err = 0;
  GifFileType* gif = DGifOpen(&src, gif_read, &err);
  if (!gif) {
    r.reason = "corrupt GIF: " + gif_error_text(err);
    return;
  }
  struct Closer {
    GifFileType* g;
    ~Closer() {
      int e = 0;
      DGifCloseFile(g, &e);
    }
  } closer{gif};
  const auto w = static_cast<std::uint64_t>(std::max(gif->SWidth, 0));
  const auto h = static_cast<std::uint64_t>(std::max(gif->SHeight, 0));
  r.source_height = static_cast<int>(h);
  r.source_width = static_cast<int>(w);
  if (w == 0 || h == 0) {
    r.reason = "GIF with an empty size";
    return;
  }
  if (over_limit(w, h, opt.max_pixels)) {
    r.reason = pixel_limit_reason(w, h, opt.max_pixels);
    return;
  }
  if (DGifSlurp(gif) != GIF_OK && gif->ImageCount < 1) {
    r.reason = "corrupt GIF: " + gif_error_text(gif->Error);
    return;
  }
  if (gif->ImageCount < 1) {
    r.reason = "GIF without frames";
    return;
  }
  const SavedImage& frame = gif->SavedImages[0];
  const ColorMapObject* map = frame.ImageDesc.ColorMap ? frame.ImageDesc.ColorMap : gif->SColorMap;
  if (!map || !frame.RasterBits) {
    r.reason = "GIF without a colour map";
    return;
  }
  r.image.height = static_cast<int>(h);
  r.image.width = static_cast<int>(w);
  r.image.pixels.assign(w * h * 3, 0);
  auto put = [&](std::size_t at, int index) {
    if (index < 0 || index >= map->ColorCount) return;
    r.image.pixels[at * 3 + 0] = map->Colors[index].Red;
    r.image.pixels[at * 3 + 1] = map->Colors[index].Green;
    r.image.pixels[at * 3 + 2] = map->Colors[index].Blue;
  };
  for (std::size_t i = 0; i < w * h; ++i) put(i, gif->SBackGroundColor);
  const GifImageDesc& d = frame.ImageDesc;
  for (int y = 0; y < d.Height; ++y) {
    const int yy = d.Top + y;
    if (yy < 0 || yy >= static_cast<int>(h)) continue;
    for (int x = 0; x < d.Width; ++x) {
      const int xx = d.Left + x;
      if (xx < 0 || xx >= static_cast<int>(w)) continue;
      put(static_cast<std::size_t>(yy) * w + xx,
          frame.RasterBits[static_cast<std::size_t>(y) * d.Width + x]);
    }
  }
  finish(r, opt);
}

}  // namespace

DecodeResult Decoder::decode(const std::uint8_t* data, std::size_t size,
                             const DecodeOptions& options) {
  DecodeResult r;
  if (size == 0) {
    r.reason = "empty file";
    return r;
  }
  r.format = detect_format(data, size);
  switch (r.format) {
    case ImageFormat::kJpeg:
      decode_jpeg(static_cast<tjhandle>(tj_.get()), data, size, options, r);
      // After a failure libjpeg-turbo 2.1 can keep stale state in the handle (later files then
      // fail with the same message): start each file after a bad one on a fresh handle.
      if (!r.ok || !r.warnings.empty()) {
        tj_.reset(tjInitDecompress());
        PETS_CHECK(tj_ != nullptr,
                   std::string("tjInitDecompress failed: ") + tjGetErrorStr2(nullptr));
      }
      break;
    case ImageFormat::kPng:
      decode_png(data, size, options, r);
      break;
    case ImageFormat::kGif:
      decode_gif(data, size, options, r);
      break;
    case ImageFormat::kWebp:
      detail::decode_webp(data, size, options, r);
      break;
    case ImageFormat::kBmp:
      detail::decode_bmp(data, size, options, r);
      break;
    case ImageFormat::kPnm:
      detail::decode_pnm(data, size, options, r);
      break;
    case ImageFormat::kTiff:
      r.reason = "TIFF: not decoded (convert it to PNG, which keeps every pixel)";
      break;
    default: {
      char hex[8];
      std::string first;
      for (std::size_t i = 0; i < std::min<std::size_t>(size, 4); ++i) {
        std::snprintf(hex, sizeof(hex), "%02x", data[i]);
        first += hex;
      }
      r.reason = "unknown image format (starts with 0x" + first + ")";
    }
  }
  if (!r.ok) r.image = Image{};
  return r;
}

DecodeResult Decoder::decode_file(const std::string& path, const DecodeOptions& options) {
  std::vector<std::uint8_t> bytes;
  try {
    bytes = read_file_bytes(path);
  } catch (const Error&) {
    DecodeResult r;
    r.reason = "unreadable file";
    return r;
  }
  return decode(bytes.data(), bytes.size(), options);
}

}  // namespace pets::data
