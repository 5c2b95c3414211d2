// GradScaler against torch.cuda.amp.GradScaler's documented behaviour with its defaults (scale
// 65536, x2 after 2000 good steps, x0.5 and skip on inf/NaN). The scaler's arithmetic is the same
// on every device, so the CPU checks it here; fp16 itself runs on CUDA only.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <limits>

#include "pets/train/step/grad_scaler.hpp"
#include "pets/util/error.hpp"

namespace {

using pets::train::GradScaler;
using pets::train::GradScalerOptions;

TEST(GradScaler, DefaultsArePyTorchs) {
  GradScaler s;
  EXPECT_EQ(s.scale(), 65536.0);
  for (int i = 0; i < 1999; ++i) s.update(false);
  EXPECT_EQ(s.scale(), 65536.0);
  EXPECT_EQ(s.growth_tracker(), 1999);
  s.update(false);  // the 2000th good step in a row
  EXPECT_EQ(s.scale(), 131072.0);
  EXPECT_EQ(s.growth_tracker(), 0);
}

TEST(GradScaler, InfOrNanBacksOffAndRestartsTheCount) {
  GradScalerOptions o;
  o.growth_interval = 3;
  GradScaler s(o);
  // ok ok inf ok ok ok inf inf: the inf interrupts the first run of good steps.
  const bool found_inf[] = {false, false, true, false, false, false, true, true};
  const double expected[] = {65536, 65536, 32768, 32768, 32768, 65536, 32768, 16384};
  for (std::size_t i = 0; i < std::size(found_inf); ++i) {
    s.update(found_inf[i]);
    EXPECT_EQ(s.scale(), expected[i]) << "after update " << i;
  }
  EXPECT_EQ(s.growth_tracker(), 0);
}

TEST(GradScaler, UnscaleRecoversTheGradientsAndFindsNonFinite) {
  // The scaled loss's gradients, unscaled, are the plain loss's (exactly: the scale is a power of
  // 2).
  torch::manual_seed(0);
  const auto w = torch::randn({4, 3}, torch::requires_grad());
  const auto x = torch::randn({5, 3});
  (x.matmul(w.t()).pow(2).sum()).backward();
  const auto plain = w.grad().clone();
  w.mutable_grad().zero_();
  GradScaler s;
  s.scale_loss(x.matmul(w.t()).pow(2).sum()).backward();
  EXPECT_FALSE(torch::equal(w.grad(), plain));
  EXPECT_TRUE(s.unscale({w.grad(), torch::Tensor()}));  // undefined gradients are skipped
  EXPECT_TRUE(torch::equal(w.grad(), plain));

  for (const float bad : {std::numeric_limits<float>::infinity(), std::nanf("")}) {
    auto g = torch::ones({3});
    g[1] = bad;
    EXPECT_FALSE(s.unscale({torch::ones({2}), g})) << bad;
  }
}

TEST(GradScaler, RestoreChecksTheState) {
  GradScaler s;
  s.restore(1024.0, 17);
  EXPECT_EQ(s.scale(), 1024.0);
  EXPECT_EQ(s.growth_tracker(), 17);
  EXPECT_THROW(s.restore(0.0, 0), pets::UsageError);
  EXPECT_THROW(s.restore(1.0, 2000), pets::UsageError);
  EXPECT_THROW(s.restore(std::nan(""), 0), pets::UsageError);
}

}  // namespace
