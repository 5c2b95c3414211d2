#pragma once
/// \file
/// `pets_train --tensorboard DIR`: the run's scalars as TensorBoard event files
/// (pets/util/event_file.hpp), written by rank 0. LibTorch-free, so it is tested without a model.
///
/// The step of every point is the global step: training steps done in the run (global batches,
/// the OneCycle schedule's count), so per-epoch points and progress points share one axis. Tags:
///   train/loss          mean loss of the epoch's steps so far
///   train/images_per_s  the epoch's training images per second so far
///   train/lr            lr of the last step
///   eval/accuracy       percent right, as metrics.jsonl's `accuracy` (at the epoch's last step)
///   eval/images_per_s   evaluation images per second (at the epoch's last step)
/// In a sweep those follow the head each epoch reports (its best), and each head k also has
/// eval/accuracy/head_k, train/loss/head_k and train/lr/head_k at each epoch's last step.
/// The train/ tags get a point every --progress-interval seconds (0: every step) and at each
/// epoch's last step, where they hold the epoch's own values (metrics.jsonl's train_loss,
/// train_images_per_s, lr). Each process writes a new file in DIR (a resumed run too: TensorBoard
/// reads a folder's files as one run) and marks where it starts (SessionLog START at its first
/// step), so that TensorBoard drops what earlier files hold from that step on: the points a
/// killed run wrote past its last checkpoint, or all of an earlier run (--overwrite, or DIR
/// reused) when this one is new. The files themselves are never changed.

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "pets/train/report/metrics.hpp"
#include "pets/util/log.hpp"

namespace pets {
class EventFileWriter;
}

namespace pets::train {

class TensorBoardLog {
 public:
  using Clock = std::chrono::steady_clock;

  /// Writes into `dir`, unless `dir` is empty (no --tensorboard) or `enabled` is false (ranks
  /// other than 0). `interval`: the least time between progress points. The file is made at the
  /// first point, so a run that ends before training leaves none. A write that fails (a full
  /// disk) is one warning on `log`, and the run goes on without TensorBoard points.
  TensorBoardLog(std::string dir, bool enabled, std::chrono::duration<double> interval,
                 RankLog& log);
  ~TensorBoardLog();
  TensorBoardLog(const TensorBoardLog&) = delete;
  TensorBoardLog& operator=(const TensorBoardLog&) = delete;

  /// Whether it writes anything.
  bool active() const { return active_; }
  /// The events file written, once made (else empty).
  std::string path() const;

  /// The run resumed with `steps_done` global steps done: its next step is steps_done + 1.
  /// nullopt: resumed at another rank count, whose steps restart on another scale (as the
  /// schedule's): no start is marked, so nothing earlier is dropped.
  void resumed(std::optional<std::int64_t> steps_done);
  /// A progress point at `step` when `interval` has passed since the last one (or at the
  /// first call).
  void progress(std::int64_t step, double loss, double images_per_s, double lr,
                Clock::time_point now = Clock::now());
  /// The epoch's point at its last step `step`.
  void epoch(std::int64_t step, const EpochMetrics& metrics);

 private:
  /// Runs `write` on the writer (made on first use); a failure stops the log with a warning.
  template <typename Write>
  void write(Write&& write);

  std::string dir_;
  bool active_;
  std::chrono::duration<double> interval_;
  RankLog& log_;
  std::unique_ptr<EventFileWriter> writer_;
  std::optional<Clock::time_point> last_progress_;
  /// The START mark, written with the first point: step 1 for a new run.
  std::optional<std::int64_t> start_step_ = 1;
  std::int64_t last_train_step_ = -1;  ///< step of the last train/ point written
};

}  // namespace pets::train
