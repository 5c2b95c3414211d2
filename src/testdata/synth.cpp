#include "pets/testdata/synth.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>

#include "pets/data/rng.hpp"
#include "pets/testdata/encode.hpp"
#include "pets/util/error.hpp"

namespace fs = std::filesystem;

namespace pets::testdata {

using data::Image;
using data::mix_seed;
using data::Rng;

const std::vector<std::string>& pet_breeds() {
  // clang-format off
  static const std::vector<std::string> kBreeds = {
      "Abyssinian", "Bengal", "Birman", "Bombay", "British_Shorthair", "Egyptian_Mau",
      "Maine_Coon", "Persian", "Ragdoll", "Russian_Blue", "Siamese", "Sphynx",
      "american_bulldog", "american_pit_bull_terrier", "basset_hound", "beagle", "boxer",
      "chihuahua", "english_cocker_spaniel", "english_setter", "german_shorthaired",
      "great_pyrenees", "havanese", "japanese_chin", "keeshond", "leonberger",
      "miniature_pinscher", "newfoundland", "pomeranian", "pug", "saint_bernard", "samoyed",
      "scottish_terrier", "shiba_inu", "staffordshire_bull_terrier", "wheaten_terrier",
      "yorkshire_terrier"};
  // clang-format on
  return kBreeds;
}

namespace {

void hsv_to_rgb(double h, double s, double v, double rgb[3]) {
  h = h - std::floor(h);
  const double c = v * s;
  const double hp = h * 6.0;
  const double x = c * (1.0 - std::fabs(std::fmod(hp, 2.0) - 1.0));
  double r = 0, g = 0, b = 0;
  switch (static_cast<int>(hp) % 6) {
    case 0:
      r = c;
      g = x;
      break;
    case 1:
      r = x;
      g = c;
      break;
    case 2:
      g = c;
      b = x;
      break;
    case 3:
      g = x;
      b = c;
      break;
    case 4:
      r = x;
      b = c;
      break;
    default:
      r = c;
      b = x;
      break;
  }
  const double m = v - c;
  rgb[0] = (r + m) * 255.0;
  rgb[1] = (g + m) * 255.0;
  rgb[2] = (b + m) * 255.0;
}

std::uint8_t to_byte(double v) {
  return static_cast<std::uint8_t>(std::clamp(std::lround(v), 0L, 255L));
}

void write_bytes(const fs::path& path, const std::vector<std::uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary);
  PETS_CHECK(out, "cannot create " + path.string());
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
  PETS_CHECK(out, "cannot write " + path.string());
}

/// Inserts `count` zero bytes before the first start-of-scan marker, which libjpeg reports as
/// "Corrupt JPEG data: N extraneous bytes before marker 0xda" and then decodes normally.
std::vector<std::uint8_t> with_extraneous_bytes(std::vector<std::uint8_t> jpeg, int count) {
  std::size_t pos = 2;
  while (pos + 4 <= jpeg.size() && jpeg[pos] == 0xFF) {
    if (jpeg[pos + 1] == 0xDA) {
      jpeg.insert(jpeg.begin() + static_cast<std::ptrdiff_t>(pos), static_cast<std::size_t>(count),
                  0);
      return jpeg;
    }
    pos += 2 + (static_cast<std::size_t>(jpeg[pos + 2]) << 8 | jpeg[pos + 3]);
  }
  PETS_ERROR("no start-of-scan marker found");
}

}  // namespace

std::vector<QuirkFile> quirk_files() {
  return {
      {"Bengal_1001.jpg", true, ""},               // grayscale JPEG
      {"Bombay_1002.jpg", true, ""},               // CMYK JPEG
      {"beagle_1003.jpg", true, ""},               // PNG named .jpg
      {"boxer_1004.jpg", true, ""},                // RGBA PNG named .jpg
      {"keeshond_1005.jpg", true, ""},             // GIF named .jpg
      {"chihuahua_1006.jpg", false, "truncated"},  // cut off mid-scan
      {"havanese_1007.jpg", false, "empty file"},
      {"pug_1008.jpg", false, "corrupt JPEG"},            // garbage after the start marker
      {"leonberger_1009.jpg", true, "extraneous bytes"},  // decoder warning, kept
      {"Abyssinian_1010.mat", false, ""},                 // no image extension: counted, not named
      {"samoyed.jpg", false, "does not match"},
      {"Persian_1011.JPG", true, ""},       // the extension in upper case
      {"newfoundland_1012.jpg", true, ""},  // 4000x3000
      {"pomeranian_1013.jpg", true, ""},    // 7x5
      {"extra", false, "directory"},        // sub-folder with an image inside
  };
}

Image render_synthetic_image(int class_id, std::uint64_t seed, std::int64_t index, int height,
                             int width) {
  Rng rng(
      mix_seed({seed, static_cast<std::uint64_t>(class_id), static_cast<std::uint64_t>(index)}));
  Image img;
  img.height = height > 0 ? height : static_cast<int>(rng.randint(200, 501));
  img.width = width > 0 ? width : static_cast<int>(rng.randint(200, 501));
  img.pixels.resize(static_cast<std::size_t>(img.height) * img.width * 3);

  // Class signal: background and body hues, body shape, stripe period and angle.
  const double golden = 0.6180339887498949;
  const double bg_hue = class_id * golden + rng.uniform(-0.02, 0.02);
  const double fg_hue = bg_hue + 0.35 + 0.1 * (class_id % 3) + rng.uniform(-0.02, 0.02);
  const int shape = class_id % 4;
  const double period = 6.0 + 3.0 * ((class_id / 4) % 5);
  const double angle = 3.14159265358979 * ((class_id * 7) % 12) / 12.0 + rng.uniform(-0.1, 0.1);
  const double brightness = rng.uniform(0.75, 1.0);
  double bg[3], fg[3], fg2[3];
  hsv_to_rgb(bg_hue, 0.35 + 0.1 * (class_id % 4), 0.85 * brightness, bg);
  hsv_to_rgb(fg_hue, 0.8, 0.9 * brightness, fg);
  hsv_to_rgb(fg_hue + 0.5, 0.6, 0.4 * brightness, fg2);
  // Per-image placement and size of the body.
  const double side = std::min(img.height, img.width);
  const double radius = side * rng.uniform(0.25, 0.42);
  const double cy = rng.uniform(radius * 0.6, img.height - radius * 0.6);
  const double cx = rng.uniform(radius * 0.6, img.width - radius * 0.6);
  const double aspect = rng.uniform(0.7, 1.3);
  const double ca = std::cos(angle), sa = std::sin(angle);
  const double noise_level = rng.uniform(4.0, 14.0);
  for (int y = 0; y < img.height; ++y) {
    for (int x = 0; x < img.width; ++x) {
      const double dy = (y - cy) / radius, dx = (x - cx) / (radius * aspect);
      bool inside = false;
      switch (shape) {
        case 0:
          inside = dx * dx + dy * dy < 1.0;
          break;  // disc
        case 1:
          inside = std::fabs(dx) < 0.85 && std::fabs(dy) < 0.85;
          break;  // square
        case 2:
          inside = dy > -0.9 && dy < 0.9 && std::fabs(dx) < (dy + 0.9) * 0.6;
          break;
        default: {
          const double r2 = dx * dx + dy * dy;
          inside = r2 < 1.0 && r2 > 0.3;  // ring
        }
      }
      double c[3];
      if (inside) {
        const double t = (x * ca + y * sa) / period;
        const bool stripe = (t - std::floor(t)) < 0.5;
        for (int k = 0; k < 3; ++k) c[k] = stripe ? fg[k] : fg2[k];
      } else {
        const double shade = 0.85 + 0.15 * std::sin((x + y) * 0.02 + class_id);
        for (int k = 0; k < 3; ++k) c[k] = bg[k] * shade;
      }
      std::uint8_t* p = &img.pixels[(static_cast<std::size_t>(y) * img.width + x) * 3];
      const double n = (rng.uniform() - 0.5) * 2.0 * noise_level;
      for (int k = 0; k < 3; ++k) p[k] = to_byte(c[k] + n + (rng.uniform() - 0.5) * noise_level);
    }
  }
  return img;
}

std::int64_t write_synthetic_dataset(const SynthOptions& o) {
  const auto& breeds = pet_breeds();
  if (o.out_dir.empty()) throw UsageError("pets_synth: --out is required");
  if (o.per_class < 1) throw UsageError("pets_synth: --per-class must be at least 1");
  if (o.classes < 1 || o.classes > static_cast<int>(breeds.size()))
    throw UsageError("pets_synth: --classes must be in [1, 37]");
  std::error_code ec;
  fs::create_directories(o.out_dir, ec);
  if (ec || !fs::is_directory(o.out_dir))
    throw UsageError("pets_synth: cannot create folder " + o.out_dir + ": " + ec.message());
  // Its images mixed with a folder's earlier files would be another data set than asked for.
  if (!fs::is_empty(o.out_dir, ec))
    throw UsageError("pets_synth: --out " + o.out_dir +
                     " is not empty; name a new or empty folder (its files would be mixed with "
                     "the synthetic images)");
  const fs::path dir(o.out_dir);
  static const int kQualities[] = {75, 85, 90, 95};
  std::int64_t written = 0;
  for (int c = 0; c < o.classes; ++c) {
    for (int n = 1; n <= o.per_class; ++n) {
      const Image img = render_synthetic_image(c, o.seed, n);
      JpegOptions jo;
      jo.quality = kQualities[(c + n) % 4];
      jo.progressive = (n % 2) == 0;
      jo.subsampling = (n % 3 == 0) ? 0 : 2;
      write_bytes(dir / (breeds[static_cast<std::size_t>(c)] + "_" + std::to_string(n) + ".jpg"),
                  encode_jpeg(img, jo));
      ++written;
    }
  }
  if (!o.quirks) return written;

  auto breed_id = [&](const std::string& b) {
    return static_cast<int>(std::find(breeds.begin(), breeds.end(), b) - breeds.begin());
  };
  auto render = [&](const std::string& breed, int h = 0, int w = 0) {
    return render_synthetic_image(breed_id(breed), o.seed, 1000, h, w);
  };
  JpegOptions gray;
  gray.grayscale = true;
  write_bytes(dir / "Bengal_1001.jpg", encode_jpeg(render("Bengal"), gray));
  JpegOptions cmyk;
  cmyk.cmyk = true;
  write_bytes(dir / "Bombay_1002.jpg", encode_jpeg(render("Bombay"), cmyk));
  write_bytes(dir / "beagle_1003.jpg", encode_png(render("beagle")));
  write_bytes(dir / "boxer_1004.jpg", encode_png(render("boxer"), 256));
  write_bytes(dir / "keeshond_1005.jpg", encode_gif(render("keeshond")));
  {
    std::vector<std::uint8_t> jpeg = encode_jpeg(render("chihuahua"));
    jpeg.resize(jpeg.size() * 6 / 10);
    write_bytes(dir / "chihuahua_1006.jpg", jpeg);
  }
  write_bytes(dir / "havanese_1007.jpg", {});
  {
    std::vector<std::uint8_t> junk = {0xFF, 0xD8, 0xFF};
    Rng rng(mix_seed({o.seed, 1008}));
    for (int i = 0; i < 4096; ++i) junk.push_back(static_cast<std::uint8_t>(rng.next() & 0x7F));
    write_bytes(dir / "pug_1008.jpg", junk);
  }
  write_bytes(dir / "leonberger_1009.jpg",
              with_extraneous_bytes(encode_jpeg(render("leonberger")), 3));
  {
    // MATLAB 5 header, as the real folder's stray .mat files.
    std::string head = "MATLAB 5.0 MAT-file, Platform: GLNXA64, Created on: synthetic";
    head.resize(128, ' ');
    write_bytes(dir / "Abyssinian_1010.mat", std::vector<std::uint8_t>(head.begin(), head.end()));
  }
  write_bytes(dir / "samoyed.jpg", encode_jpeg(render("samoyed")));
  write_bytes(dir / "Persian_1011.JPG", encode_jpeg(render("Persian")));
  write_bytes(dir / "newfoundland_1012.jpg", encode_jpeg(render("newfoundland", 3000, 4000)));
  write_bytes(dir / "pomeranian_1013.jpg", encode_jpeg(render("pomeranian", 5, 7)));
  fs::create_directories(dir / "extra");
  write_bytes(dir / "extra" / "Sphynx_1014.jpg", encode_jpeg(render("Sphynx")));
  return written + 16;
}

}  // namespace pets::testdata
