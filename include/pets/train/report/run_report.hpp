#pragma once
/// \file
/// What rank 0 tells the user on stderr about a running job: the start-up line (what is running,
/// on what, from which data) and the progress line (where the run stands and the time it has
/// left). LibTorch-free; startup.hpp gathers the values from the run's parts.

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

#include "pets/train/options/options.hpp"

namespace pets::train {

/// What the start-up line shows.
struct StartupFacts {
  int ranks = 1;
  int hosts = 1;
  std::string device = "cpu";  ///< "cpu", or "cuda" and rank 0's GPU: "cuda NVIDIA H200"
  int threads = 1;             ///< CPU threads per rank
  MixedPrecision precision = MixedPrecision::kNo;
  BnMode bn_mode = BnMode::kTrain;
  Unfreeze unfreeze = Unfreeze::kNone;  ///< --unfreeze, with the two below
  int unfreeze_epoch = 0;
  double backbone_lr_ratio = 0.1;
  bool device_input = false;  ///< crops resized and normalised on the device (--input)
  /// The bytes of the store's images held on the device (--resident); -1: streamed per batch.
  int64_t resident_bytes = -1;
  std::string data;      ///< --data as given
  std::string store_id;  ///< empty for a store written before stores had one
  int64_t train_images = 0;
  int64_t eval_images = 0;
  int64_t steps_per_epoch = 0;
  int64_t epochs = 0;
  std::string out;
};

/// The start-up line: `pets_train: 2 ranks on 1 host, cpu, 4 threads each, fp32, BN train, input
/// cpu, data pets.h5 (store 0123...), 5920 train / 1480 eval images, 185 steps/epoch, 5 epochs,
/// out runs/x`; with the images held on the device, `input device (resident, 1.62 GiB)`; with
/// --unfreeze, `BN train, training layer4 (lr x0.1) from epoch 1, input ...`.
std::string startup_text(const StartupFacts& facts);

/// A duration as the progress line shows it, rounded to the second: `45s`, `3m12s`, `2h05m`.
std::string duration_text(double seconds);

/// Where a run stands, as the progress line shows it, and the time it has left: the mean time of
/// the training steps and of the evaluation batches timed so far, times those left in the run.
/// Until an evaluation batch is timed, one costs what a training step does per image.
class RunProgress {
 public:
  using Clock = std::chrono::steady_clock;

  /// The run's size.
  struct Shape {
    int64_t epochs = 0;
    int64_t steps = 0;              ///< training steps per epoch
    int64_t train_step_images = 0;  ///< global images of a full training step
    int64_t eval_steps = 0;         ///< evaluation batches per epoch (each rank reads as many)
    int64_t eval_step_images = 0;   ///< global images of a full evaluation step
    int64_t eval_images = 0;        ///< the evaluation split
    /// Later evaluations reuse the first one's features (--bn-mode eval) and take no time.
    bool evaluate_once = false;
  };

  /// Times the run from `start`, the moment before its first step.
  explicit RunProgress(const Shape& shape, Clock::time_point start = Clock::now());

  /// After training step `step` (1-based) of `epoch` (0-based, as the result lines count):
  /// `[epoch 1/5] step 3/10  31.2 img/s  loss 2.9000  ETA 3m12s`.
  std::string trained(int64_t epoch, int64_t step, double images_per_s, double loss,
                      Clock::time_point now = Clock::now());
  /// Before the evaluation of `epoch` reads a batch, `done` of them read:
  /// `[epoch 1/5] evaluating 640/1480  ETA 1m02s` (global images).
  std::string evaluating(int64_t epoch, int64_t done, Clock::time_point now = Clock::now());
  /// The seconds the run has left after the latest step or batch; nothing until a training step
  /// has been timed.
  std::optional<double> eta_seconds() const;

 private:
  /// The time since the previous event, counted as one step of `sum`/`count` when they are set.
  void timed(Clock::time_point now, double* sum, int64_t* count);
  std::string epoch_text(int64_t epoch) const;
  std::string eta_text() const;

  Shape shape_;
  Clock::time_point last_;
  double train_seconds_ = 0.0;
  int64_t train_steps_ = 0;  ///< timed
  double eval_seconds_ = 0.0;
  int64_t eval_steps_ = 0;  ///< timed
  bool evaluated_ = false;  ///< an evaluation has read all its batches
  int64_t train_left_ = 0;  ///< after the latest event
  int64_t eval_left_ = 0;
};

}  // namespace pets::train
