// encode_webp OUT.webp [HEIGHT WIDTH]: a synthetic image (pets::testdata) as a lossless WebP, for
// the script tests (no WebP encoder is installed as a program).
#include <webp/encode.h>

#include <cstdio>
#include <fstream>
#include <iostream>
#include <string>

#include "pets/testdata/synth.hpp"

int main(int argc, char** argv) {
  if (argc != 2 && argc != 4) {
    std::cerr << "usage: encode_webp OUT.webp [HEIGHT WIDTH]\n";
    return 2;
  }
  const int h = argc == 4 ? std::stoi(argv[2]) : 24, w = argc == 4 ? std::stoi(argv[3]) : 32;
  const pets::data::Image img = pets::testdata::render_synthetic_image(7, 2, 1, h, w);
  std::uint8_t* out = nullptr;
  const std::size_t n = WebPEncodeLosslessRGB(img.pixels.data(), w, h, w * 3, &out);
  if (n == 0) {
    std::cerr << "encode_webp: libwebp could not encode\n";
    return 1;
  }
  std::ofstream(argv[1], std::ios::binary)
      .write(reinterpret_cast<const char*>(out), static_cast<std::streamsize>(n));
  WebPFree(out);
  return 0;
}
