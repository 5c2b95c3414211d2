// What rank 0 shows of a running job: the start-up line's text, the progress line's (epoch of the
// total, evaluation images) and the run's time left from the steps and batches timed so far.
#include <gtest/gtest.h>

#include <cmath>

#include "pets/train/report/run_report.hpp"

namespace {

using pets::train::RunProgress;
using pets::train::StartupFacts;
using std::chrono::milliseconds;
using std::chrono::seconds;

TEST(RunReport, StartupLineOfACpuRun) {
  StartupFacts f;
  f.ranks = 2;
  f.hosts = 1;
  f.device = "cpu";
  f.threads = 1;
  f.data = "work/pets.h5";
  f.store_id = "0123456789abcdef0123456789abcdef";
  f.train_images = 592;
  f.eval_images = 148;
  f.steps_per_epoch = 5;
  f.epochs = 5;
  f.out = "runs/demo";
  EXPECT_EQ(pets::train::startup_text(f),
            "pets_train: 2 ranks on 1 host, cpu, 1 thread each, fp32, BN train, input cpu, data "
            "work/pets.h5 (store 0123456789abcdef0123456789abcdef), 592 train / 148 eval images, 5 "
            "steps/epoch, 5 epochs, out runs/demo");
}

TEST(RunReport, StartupLineOfAGpuRun) {
  StartupFacts f;
  f.ranks = 1;
  f.hosts = 1;
  f.device = "cuda NVIDIA H200";
  f.threads = 4;
  f.precision = pets::train::MixedPrecision::kBf16;
  f.bn_mode = pets::train::BnMode::kEval;
  f.device_input = true;
  f.data = "/data/pets.h5";
  f.train_images = 5920;
  f.eval_images = 1480;
  f.steps_per_epoch = 1;
  f.epochs = 1;
  f.out = "/runs/x";
  EXPECT_EQ(pets::train::startup_text(f),
            "pets_train: 1 rank on 1 host, cuda NVIDIA H200, 4 threads, mixed precision bf16, BN "
            "eval, input device, data /data/pets.h5 (a store without id), 5920 train / 1480 eval "
            "images, 1 step/epoch, 1 epoch, out /runs/x");
  f.ranks = 16;
  f.hosts = 2;
  f.precision = pets::train::MixedPrecision::kFp16;
  EXPECT_NE(pets::train::startup_text(f).find("16 ranks on 2 hosts, cuda NVIDIA H200, 4 threads "
                                              "each, mixed precision fp16,"),
            std::string::npos);
  // The store's images held on the device (--resident): the path and its size.
  f.resident_bytes = 1825361100;
  EXPECT_NE(pets::train::startup_text(f).find(", input device (resident, 1.70 GiB), data "),
            std::string::npos);
  f.resident_bytes = 9604000;
  EXPECT_NE(pets::train::startup_text(f).find(", input device (resident, 9.16 MiB), data "),
            std::string::npos);
  // A trained backbone (--unfreeze): which stages, at which lr ratio, from which epoch.
  f.unfreeze = pets::train::Unfreeze::kLayer3;
  f.backbone_lr_ratio = 0.25;
  f.unfreeze_epoch = 2;
  EXPECT_NE(pets::train::startup_text(f).find(
                ", BN eval, training layer3 (lr x0.25) from epoch 2, input device (resident"),
            std::string::npos)
      << pets::train::startup_text(f);
}

TEST(RunReport, DurationText) {
  EXPECT_EQ(pets::train::duration_text(0), "0s");
  EXPECT_EQ(pets::train::duration_text(44.6), "45s");
  EXPECT_EQ(pets::train::duration_text(59.6), "1m00s");
  EXPECT_EQ(pets::train::duration_text(192), "3m12s");
  EXPECT_EQ(pets::train::duration_text(3599.4), "59m59s");
  EXPECT_EQ(pets::train::duration_text(3600), "1h00m");
  EXPECT_EQ(pets::train::duration_text(7530), "2h05m");
  EXPECT_EQ(pets::train::duration_text(-3), "0s");
  EXPECT_EQ(pets::train::duration_text(std::nan("")), "0s");
}

/// 2 epochs of 4 steps of 8 images; evaluation: 20 images in 2 batches of 16.
RunProgress::Shape small_run() {
  RunProgress::Shape s;
  s.epochs = 2;
  s.steps = 4;
  s.train_step_images = 8;
  s.eval_steps = 2;
  s.eval_step_images = 16;
  s.eval_images = 20;
  return s;
}

TEST(RunProgress, EpochOfTheTotalAndTheRunsTimeLeft) {
  const RunProgress::Clock::time_point t0{};
  RunProgress p(small_run(), t0);
  EXPECT_FALSE(p.eta_seconds().has_value());
  // 2 s a step; left: 3 + 4 steps, 2 evaluations of 2 batches, each estimated at 2 s * 16 / 8.
  EXPECT_EQ(p.trained(0, 1, 12.34, 2.5, t0 + seconds(2)),
            "[epoch 1/2] step 1/4  12.3 img/s  loss 2.5000  ETA 30s");
  EXPECT_DOUBLE_EQ(*p.eta_seconds(), 7 * 2.0 + 4 * 4.0);
  p.trained(0, 2, 12.0, 2.4, t0 + seconds(4));
  p.trained(0, 3, 12.0, 2.3, t0 + seconds(6));
  p.trained(0, 4, 12.0, 2.2, t0 + seconds(8));
  EXPECT_DOUBLE_EQ(*p.eta_seconds(), 4 * 2.0 + 4 * 4.0);
  // The time before the first batch (the BatchNorm sync) is no batch's.
  EXPECT_EQ(p.evaluating(0, 0, t0 + seconds(9)), "[epoch 1/2] evaluating 0/20  ETA 24s");
  // A batch timed at 1 s: that is what the 3 left cost.
  EXPECT_EQ(p.evaluating(0, 1, t0 + seconds(10)), "[epoch 1/2] evaluating 16/20  ETA 11s");
  EXPECT_EQ(p.evaluating(0, 2, t0 + seconds(11)), "[epoch 1/2] evaluating 20/20  ETA 10s");
  // The checkpoint between the epochs counts as training time: 12 s over 5 steps.
  EXPECT_EQ(p.trained(1, 1, 12.0, 2.0, t0 + seconds(15)),
            "[epoch 2/2] step 1/4  12.0 img/s  loss 2.0000  ETA 9s");
  EXPECT_DOUBLE_EQ(*p.eta_seconds(), 3 * 2.4 + 2 * 1.0);
  p.trained(1, 4, 12.0, 2.0, t0 + seconds(21));
  p.evaluating(1, 2, t0 + seconds(22));
  EXPECT_NEAR(*p.eta_seconds(), 0.0, 1e-12);
}

TEST(RunProgress, LaterEvaluationsThatReuseTheFeaturesCostNothing) {
  RunProgress::Shape s = small_run();
  s.epochs = 3;
  s.evaluate_once = true;
  const RunProgress::Clock::time_point t0{};
  RunProgress p(s, t0);
  // Only this epoch's evaluation reads batches: 11 steps and 2 batches left.
  p.trained(0, 1, 10.0, 1.0, t0 + seconds(1));
  EXPECT_DOUBLE_EQ(*p.eta_seconds(), 11 * 1.0 + 2 * 2.0);
  p.trained(0, 4, 10.0, 1.0, t0 + seconds(4));
  p.evaluating(0, 1, t0 + milliseconds(4500));
  p.evaluating(0, 2, t0 + seconds(5));
  EXPECT_DOUBLE_EQ(*p.eta_seconds(), 8 * 2.0);  // 4 s over 2 timed steps, 8 steps left
  p.trained(1, 1, 10.0, 1.0, t0 + seconds(6));
  EXPECT_DOUBLE_EQ(*p.eta_seconds(), 7 * 5.0 / 3);
}

TEST(RunProgress, NoTimeLeftUntilATrainingStepIsTimed) {
  // A run resumed at an epoch's evaluation evaluates before its first step.
  const RunProgress::Clock::time_point t0{};
  RunProgress p(small_run(), t0);
  EXPECT_EQ(p.evaluating(1, 0, t0 + seconds(1)), "[epoch 2/2] evaluating 0/20");
  EXPECT_EQ(p.evaluating(1, 1, t0 + seconds(2)), "[epoch 2/2] evaluating 16/20");
  EXPECT_FALSE(p.eta_seconds().has_value());
}

}  // namespace
