// pets_fuzz_seeds OUT: writes the seed inputs that the project's programs cannot write small,
// with the project's own writers: safetensors files through pets::model::write_safetensors
// (the checkpoint and final-model writer) and tiny JPEG/PNG/GIF images through the encoders
// of pets_synth (whose own images are 200-500 pixels a side: slow seeds for a fuzzer).
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "pets/model/safetensors.hpp"
#include "pets/testdata/encode.hpp"
#include "pets/testdata/synth.hpp"
#include "pets/util/error.hpp"

namespace fs = std::filesystem;
using pets::model::DType;
using pets::model::RawTensor;

namespace {

RawTensor tensor(const std::string& name, DType dtype, std::vector<std::int64_t> shape) {
  RawTensor t{name, dtype, shape, {}};
  std::size_t n = pets::model::dtype_size(dtype);
  for (const std::int64_t d : shape) n *= static_cast<std::size_t>(d);
  t.bytes.resize(n);
  for (std::size_t i = 0; i < n; ++i) t.bytes[i] = static_cast<std::uint8_t>(i * 37 + 11);
  return t;
}

void write_bytes(const fs::path& path, const std::vector<std::uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
  PETS_CHECK(out.good(), "cannot write " + path.string());
}

void write_safetensors_seeds(const fs::path& dir) {
  // Shaped as what pets_train writes: a head (model.safetensors keys), a checkpoint with
  // Adam's moments and string metadata, every dtype, a scalar and an empty tensor.
  pets::model::write_safetensors(
      (dir / "head.safetensors").string(),
      {tensor("fc.weight", DType::F32, {4, 8}), tensor("fc.bias", DType::F32, {4})});
  pets::model::write_safetensors(
      (dir / "checkpoint.safetensors").string(),
      {tensor("fc.weight", DType::F32, {3, 4}), tensor("fc.bias", DType::F32, {3}),
       tensor("adam.exp_avg.0", DType::F32, {3, 4}), tensor("adam.step", DType::I64, {}),
       tensor("bn1.running_mean", DType::F32, {2})},
      {{"epoch", "1"},
       {"step", "7"},
       {"config", "{\"seed\": 42, \"bn_mode\": \"train\"}"},
       {"digest", "0123456789abcdef"}});
  std::vector<RawTensor> all;
  const DType dtypes[] = {DType::F64, DType::F32, DType::F16, DType::BF16, DType::I64,
                          DType::I32, DType::I16, DType::I8,  DType::U8,   DType::BOOL};
  for (const DType d : dtypes)
    all.push_back(tensor(std::string("t_") + pets::model::dtype_name(d), d, {2, 3}));
  all.push_back(tensor("empty", DType::F32, {0, 5}));
  pets::model::write_safetensors((dir / "dtypes.safetensors").string(), all, {{"format", "pt"}});
}

void write_image_seeds(const fs::path& dir) {
  const pets::data::Image img = pets::testdata::render_synthetic_image(3, 0, 1, 12, 16);
  pets::testdata::JpegOptions baseline;
  pets::testdata::JpegOptions progressive;
  progressive.progressive = true;
  progressive.subsampling = 0;
  pets::testdata::JpegOptions gray;
  gray.grayscale = true;
  pets::testdata::JpegOptions cmyk;
  cmyk.cmyk = true;
  write_bytes(dir / "baseline.jpg", pets::testdata::encode_jpeg(img, baseline));
  write_bytes(dir / "progressive.jpg", pets::testdata::encode_jpeg(img, progressive));
  write_bytes(dir / "gray.jpg", pets::testdata::encode_jpeg(img, gray));
  write_bytes(dir / "cmyk.jpg", pets::testdata::encode_jpeg(img, cmyk));
  write_bytes(dir / "rgb.png", pets::testdata::encode_png(img));
  write_bytes(dir / "rgba.png", pets::testdata::encode_png(img, 256));
  write_bytes(dir / "frame.gif", pets::testdata::encode_gif(img));
  // The formats decoded by our own code: a binary PPM, a 16-bit PGM, a plain PPM, and a 2x1
  // 24-bit BMP (bottom-up, rows padded to 4 bytes).
  const auto bytes = [](const std::string& s) {
    return std::vector<std::uint8_t>(s.begin(), s.end());
  };
  write_bytes(dir / "binary.ppm", bytes(std::string("P6\n2 1\n255\n\xff\0\0\0\xff\0", 17)));
  write_bytes(dir / "wide.pgm", bytes(std::string("P5 2 1 1000\n\x01\xf4\x03\xe8", 16)));
  write_bytes(dir / "plain.ppm", bytes("P3\n# plain\n2 1\n15\n15 0 0  0 15 0\n"));
  std::vector<std::uint8_t> bmp = {'B', 'M', 62, 0, 0, 0, 0, 0, 0, 0, 54, 0, 0, 0,  40,
                                   0,   0,   0,  2, 0, 0, 0, 1, 0, 0, 0,  1, 0, 24, 0};
  bmp.resize(54, 0);
  for (const std::uint8_t b : {255, 0, 0, 255, 255, 255, 0, 0}) bmp.push_back(b);
  write_bytes(dir / "rgb.bmp", bmp);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: pets_fuzz_seeds OUT (writes OUT/safetensors and OUT/images)\n");
    return 2;
  }
  try {
    const fs::path out(argv[1]);
    fs::create_directories(out / "safetensors");
    fs::create_directories(out / "images");
    write_safetensors_seeds(out / "safetensors");
    write_image_seeds(out / "images");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
