/// \file
/// The stored images device_input_bench measures on (harness.hpp).

#include "harness.hpp"

#include <cmath>

#include "pets/testdata/synth.hpp"

namespace pets::device_input_bench {

using pets::data::Image;

std::vector<Image> stored_images(int side, int n) {
  const double aspects[] = {0.75, 2.0 / 3.0, 4.0 / 3.0, 0.75};
  std::vector<Image> out;
  for (int i = 0; i < n; ++i) {
    const double a = aspects[i % 4];  // height / width
    const int h = a <= 1 ? static_cast<int>(std::lround(side * a)) : side;
    const int w = a <= 1 ? side : static_cast<int>(std::lround(side / a));
    out.push_back(pets::testdata::render_synthetic_image(i % 37, 11, i, h, w));
  }
  return out;
}

}  // namespace pets::device_input_bench
