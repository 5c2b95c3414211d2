// A loader batch as the model's input: NHWC pixels seen as a channels-last NCHW tensor, on the
// CPU without a copy; what the transforms write lands at the element the model reads.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "pets/data/augment.hpp"
#include "pets/data/loader.hpp"
#include "pets/train/input/batch_tensors.hpp"
#include "pets/util/error.hpp"

namespace {

pets::data::Batch numbered_batch(int64_t n, int h, int w) {
  pets::data::Batch b;
  b.n = n;
  b.h = h;
  b.w = w;
  b.pixels.resize(static_cast<std::size_t>(n * h * w * 3));
  for (std::size_t i = 0; i < b.pixels.size(); ++i) b.pixels[i] = static_cast<float>(i);
  for (int64_t i = 0; i < n; ++i) b.labels.push_back(10 + i);
  return b;
}

TEST(BatchTensors, NhwcPixelsAreAChannelsLastViewWithoutACopy) {
  pets::data::Batch b = numbered_batch(2, 3, 4);
  const torch::Tensor images = pets::train::batch_images(b, torch::kCPU);
  EXPECT_EQ(images.sizes(), (std::vector<int64_t>{2, 3, 3, 4}));
  EXPECT_EQ(images.scalar_type(), torch::kFloat32);
  EXPECT_TRUE(images.is_contiguous(torch::MemoryFormat::ChannelsLast));
  EXPECT_EQ(images.data_ptr<float>(), b.pixels.data());
  // Element (n, c, y, x) is the loader's pixel (n, y, x) channel c.
  const auto a = images.accessor<float, 4>();
  for (int n = 0; n < 2; ++n)
    for (int c = 0; c < 3; ++c)
      for (int y = 0; y < 3; ++y)
        for (int x = 0; x < 4; ++x)
          ASSERT_EQ(a[n][c][y][x], static_cast<float>(((n * 3 + y) * 4 + x) * 3 + c))
              << n << c << y << x;
  // As the old NCHW path handed it over: the same tensor after .contiguous(ChannelsLast).
  const torch::Tensor nchw = images.contiguous();
  EXPECT_TRUE(torch::equal(nchw.contiguous(torch::MemoryFormat::ChannelsLast), images));
  EXPECT_EQ(nchw.contiguous(torch::MemoryFormat::ChannelsLast).strides(), images.strides());

  const torch::Tensor labels = pets::train::batch_labels(b, torch::kCPU);
  EXPECT_EQ(labels.data_ptr<int64_t>(), b.labels.data());
  EXPECT_EQ(labels[1].item<int64_t>(), 11);
}

TEST(BatchTensors, TransformedImageReachesTheModelsChannels) {
  // A red-left, blue-right image through the eval transform into a batch of one.
  pets::data::Image img;
  img.height = 8;
  img.width = 8;
  for (int y = 0; y < 8; ++y)
    for (int x = 0; x < 8; ++x) {
      const bool left = x < 4;
      img.pixels.insert(img.pixels.end(), {static_cast<std::uint8_t>(left ? 255 : 0), 0,
                                           static_cast<std::uint8_t>(left ? 0 : 255)});
    }
  pets::data::Batch b;
  b.n = 1;
  b.h = b.w = 8;
  b.pixels.resize(8 * 8 * 3);
  pets::data::transform_eval(img, 8, b.pixels.data());
  const torch::Tensor images = pets::train::batch_images(b, torch::kCPU);
  const auto norm = [](float v, int c) {
    return (v / 255.0f - pets::data::kMean[c]) / pets::data::kStd[c];
  };
  EXPECT_NEAR(images[0][0][3][0].item<float>(), norm(255, 0), 1e-4);  // red, left
  EXPECT_NEAR(images[0][0][3][7].item<float>(), norm(0, 0), 1e-4);
  EXPECT_NEAR(images[0][2][3][0].item<float>(), norm(0, 2), 1e-4);
  EXPECT_NEAR(images[0][2][3][7].item<float>(), norm(255, 2), 1e-4);  // blue, right
  EXPECT_NEAR(images[0][1].abs().max().item<float>(), std::abs(norm(0, 1)), 1e-4);
}

TEST(BatchTensors, WrongPixelCountIsAnError) {
  pets::data::Batch b = numbered_batch(2, 3, 4);
  b.pixels.pop_back();
  EXPECT_THROW(pets::train::batch_images(b, torch::kCPU), pets::Error);
}

}  // namespace
