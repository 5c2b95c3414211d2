#include "pets/testdata/encode.hpp"

#include <gif_lib.h>
#include <png.h>
#include <turbojpeg.h>

#include <algorithm>
#include <cstring>
#include <memory>

#include "pets/util/error.hpp"

namespace pets::testdata {

using data::Image;

namespace {
struct TjHandleDeleter {
  void operator()(void* h) const {
    if (h) tjDestroy(static_cast<tjhandle>(h));
  }
};
using TjHandle = std::unique_ptr<void, TjHandleDeleter>;

int cube_level(std::uint8_t v) { return (v * 5 + 127) / 255; }
}  // namespace

std::vector<std::uint8_t> encode_jpeg(const Image& image, const JpegOptions& o) {
  TjHandle tj(tjInitCompress());
  PETS_CHECK(tj != nullptr, "tjInitCompress failed");
  const std::size_t n = static_cast<std::size_t>(image.width) * image.height;
  std::vector<std::uint8_t> src;
  int pf = TJPF_RGB;
  int subsamp = o.subsampling;
  const std::uint8_t* pixels = image.pixels.data();
  if (o.grayscale) {
    src.resize(n);
    for (std::size_t i = 0; i < n; ++i) {
      const std::uint8_t* p = &image.pixels[i * 3];
      src[i] = static_cast<std::uint8_t>((299 * p[0] + 587 * p[1] + 114 * p[2] + 500) / 1000);
    }
    pf = TJPF_GRAY;
    subsamp = TJSAMP_GRAY;
    pixels = src.data();
  } else if (o.cmyk) {
    // Inverted CMYK with K' = max(R, G, B): then R = C' * K' / 255 recovers the colour.
    src.resize(n * 4);
    for (std::size_t i = 0; i < n; ++i) {
      const std::uint8_t* p = &image.pixels[i * 3];
      const int k = std::max({p[0], p[1], p[2]});
      for (int c = 0; c < 3; ++c)
        src[i * 4 + c] = static_cast<std::uint8_t>(k == 0 ? 0 : (p[c] * 255 + k / 2) / k);
      src[i * 4 + 3] = static_cast<std::uint8_t>(k);
    }
    pf = TJPF_CMYK;
    pixels = src.data();
  }
  unsigned char* out = nullptr;
  unsigned long out_size = 0;
  const int flags = TJFLAG_ACCURATEDCT | (o.progressive ? TJFLAG_PROGRESSIVE : 0);
  PETS_TJ_CHECK(tj.get(),
                tjCompress2(static_cast<tjhandle>(tj.get()), pixels, image.width, 0, image.height,
                            pf, &out, &out_size, subsamp, o.quality, flags));
  std::vector<std::uint8_t> bytes(out, out + out_size);
  tjFree(out);
  return bytes;
}

std::vector<std::uint8_t> encode_png(const Image& image, int alpha_value) {
  png_image img;
  std::memset(&img, 0, sizeof(img));
  img.version = PNG_IMAGE_VERSION;
  img.width = static_cast<png_uint_32>(image.width);
  img.height = static_cast<png_uint_32>(image.height);
  std::vector<std::uint8_t> src;
  const void* pixels = image.pixels.data();
  if (alpha_value >= 0) {
    img.format = PNG_FORMAT_RGBA;
    const std::size_t n = static_cast<std::size_t>(image.width) * image.height;
    src.resize(n * 4);
    for (std::size_t i = 0; i < n; ++i) {
      std::memcpy(&src[i * 4], &image.pixels[i * 3], 3);
      const int x = static_cast<int>(i % static_cast<std::size_t>(image.width));
      src[i * 4 + 3] = static_cast<std::uint8_t>(
          alpha_value == 256 ? x * 255 / std::max(1, image.width - 1) : alpha_value);
    }
    pixels = src.data();
  } else {
    img.format = PNG_FORMAT_RGB;
  }
  png_alloc_size_t size = 0;
  PETS_CHECK(png_image_write_to_memory(&img, nullptr, &size, 0, pixels, 0, nullptr),
             std::string("png_image_write_to_memory failed: ") + img.message);
  std::vector<std::uint8_t> bytes(size);
  PETS_CHECK(png_image_write_to_memory(&img, bytes.data(), &size, 0, pixels, 0, nullptr),
             std::string("png_image_write_to_memory failed: ") + img.message);
  bytes.resize(size);
  return bytes;
}

void gif_palette_colour(const std::uint8_t in[3], std::uint8_t out[3]) {
  for (int c = 0; c < 3; ++c) out[c] = static_cast<std::uint8_t>(cube_level(in[c]) * 51);
}

namespace {
int gif_write(GifFileType* gif, const GifByteType* data, int len) {
  auto* out = static_cast<std::vector<std::uint8_t>*>(gif->UserData);
  out->insert(out->end(), data, data + len);
  return len;
}
}  // namespace

std::vector<std::uint8_t> encode_gif(const Image& image) {
  std::vector<std::uint8_t> bytes;
  int err = 0;
  GifFileType* gif = EGifOpen(&bytes, gif_write, &err);
  PETS_CHECK(gif != nullptr, std::string("EGifOpen failed: ") + GifErrorString(err));
  GifColorType colours[256];
  std::memset(colours, 0, sizeof(colours));
  for (int i = 0; i < 216; ++i) {
    colours[i].Red = static_cast<GifByteType>((i / 36) * 51);
    colours[i].Green = static_cast<GifByteType>(((i / 6) % 6) * 51);
    colours[i].Blue = static_cast<GifByteType>((i % 6) * 51);
  }
  ColorMapObject* map = GifMakeMapObject(256, colours);
  bool ok = map && EGifPutScreenDesc(gif, image.width, image.height, 8, 0, map) == GIF_OK &&
            EGifPutImageDesc(gif, 0, 0, image.width, image.height, false, nullptr) == GIF_OK;
  std::vector<GifPixelType> line(static_cast<std::size_t>(image.width));
  for (int y = 0; ok && y < image.height; ++y) {
    for (int x = 0; x < image.width; ++x) {
      const std::uint8_t* p = &image.pixels[(static_cast<std::size_t>(y) * image.width + x) * 3];
      line[static_cast<std::size_t>(x)] = static_cast<GifPixelType>(
          cube_level(p[0]) * 36 + cube_level(p[1]) * 6 + cube_level(p[2]));
    }
    ok = EGifPutLine(gif, line.data(), image.width) == GIF_OK;
  }
  const int gif_error = gif->Error;
  EGifCloseFile(gif, &err);
  if (map) GifFreeMapObject(map);
  PETS_CHECK(ok, std::string("GIF encoding failed: ") + GifErrorString(gif_error));
  return bytes;
}

}  // namespace pets::testdata
