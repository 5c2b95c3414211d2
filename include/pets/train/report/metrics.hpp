#pragma once
/// \file
/// What an epoch measured, and the forms it is shown in: the tutorial's `epoch N: XX.XX` line
/// (stdout), rank 0's summary (stderr) and metrics.jsonl. The progress line: run_report.hpp.

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

namespace pets::train {

/// What one head of a sweep measured in an epoch.
struct HeadMetrics {
  double max_lr = 0.0;      ///< the head's --max-lr value
  double lr = 0.0;          ///< the lr of the head's last step
  double train_loss = 0.0;  ///< mean cross-entropy over the epoch's training images
  double accuracy = 0.0;    ///< percent of evaluation images predicted right
  int64_t correct = 0;
  int64_t evaluated = 0;
  /// Per class, in label order: evaluation images of that class predicted right, and evaluated.
  std::vector<int64_t> class_correct, class_evaluated;
};

/// What one epoch measured (the same on every rank after the reductions). In a sweep the
/// training and evaluation figures are those of the epoch's best head (`head`), and `heads`
/// holds every head's.
struct EpochMetrics {
  int64_t epoch = 0;      ///< 0-based, as the tutorial prints it
  double accuracy = 0.0;  ///< percent of evaluation images predicted right
  int64_t correct = 0;
  int64_t evaluated = 0;
  double train_loss = 0.0;  ///< mean cross-entropy over the epoch's training images
  double lr = 0.0;          ///< the lr of the epoch's last step
  double max_lr = 0.0;      ///< the --max-lr value of the head these figures are of
  double train_images_per_s = 0.0;
  double eval_images_per_s = 0.0;
  double train_seconds = 0.0;
  double eval_seconds = 0.0;
  double loader_wait_share = 0.0;  ///< share of rank 0's step time spent waiting for batches
  /// Of loader_wait_share, the share spent handing batches to the device (enqueueing their upload
  /// and resize); the rest waited for the loader's threads. 0 on the CPU input path.
  double upload_share = 0.0;
  /// Payload in bytes this rank handed to a training step's collectives, mean over the epoch's
  /// steps (rank 0's; the same on every rank, and at every number of ranks).
  int64_t bytes_per_step = 0;
  /// Share of rank 0's step time spent in the steps' collectives; NaN (null in JSON) where it is
  /// not measured: on GPUs, where NCCL's collectives run on the device's stream.
  double comm_share = 0.0;
  /// Per class, in label order: evaluation images of that class predicted right, and evaluated
  /// (each held-out image once). Empty in an earlier pets_train's checkpoints.
  std::vector<int64_t> class_correct, class_evaluated;
  /// A sweep: the head these figures are of (best_head), its index in --max-lr order.
  int head = 0;
  /// A sweep (several --max-lr values): every head's figures, in --max-lr order; empty for one.
  std::vector<HeadMetrics> heads;
};

/// Where the run stands inside an epoch: the sums its metrics come from, and what a mid-epoch
/// checkpoint carries.
struct EpochPosition {
  int64_t step = 0;           ///< steps of the epoch done
  double loss_sum = 0.0;      ///< summed over the global batches of those steps
  int64_t images = 0;         ///< global images of those steps
  double seconds = 0.0;       ///< rank 0's training time
  double wait_seconds = 0.0;  ///< of which waiting for the loader
  int64_t comm_bytes = 0;     ///< payload rank 0 handed to those steps' collectives
  double comm_seconds = 0.0;  ///< rank 0's time in them (host time: see comm::Traffic)
  /// A sweep: the loss sums of the heads after the first (whose is loss_sum); empty for one.
  std::vector<double> more_loss_sums;
};

/// The training half of an epoch's metrics (the evaluation's fields stay 0); `lr` is the lr of
/// its last step.
EpochMetrics training_metrics(int64_t epoch, const EpochPosition& position, double lr);

/// Fills the evaluation fields: `correct` of `evaluated` images right in `seconds`.
void set_evaluation(EpochMetrics& metrics, int64_t correct, int64_t evaluated, double seconds);

/// The head of `heads` with the best accuracy, the first of equals (the head a sweep reports and
/// exports).
int best_head(const std::vector<HeadMetrics>& heads);

/// Every epoch's heads, one or a sweep's: `metrics` takes the training and evaluation figures of
/// the best head of `heads` (best_head), and keeps `heads` where there are several (a sweep).
void set_heads(EpochMetrics& metrics, std::vector<HeadMetrics> heads);

/// Percent of `evaluated` right, 0 when none was.
double percent(int64_t correct, int64_t evaluated);

/// A sweep's line for one head after an epoch: `[epoch 0] head 1 max-lr 3e-2: loss 2.3456,
/// accuracy 45.00 % (best)` (best: the head the epoch reports).
std::string head_line(const EpochMetrics& metrics, int head);

/// The tutorial's line: `epoch 0: 8.78`.
std::string result_line(const EpochMetrics& metrics);

/// Rank 0's per-epoch summary: `[epoch 0] loss 2.7900, train 32.1 img/s (...)`. It does not
/// start like result_line, so `grep '^epoch'` in a log holding both streams finds only results.
std::string summary_line(const EpochMetrics& metrics);

/// The run's best epoch: the first of the highest accuracy (what run_summary_line reports and
/// --keep-best keeps); nullptr when `epochs` is empty.
const EpochMetrics* best_epoch(const std::vector<EpochMetrics>& epochs);

/// The line that ends a run: `[run] 5 epochs, final accuracy 91.20 %, best 91.50 % at epoch 3;
/// 117.0 s wall, 32.2 train img/s; model runs/pets/model.safetensors`. Best: best_epoch; img/s: all
/// epochs' training images over their training seconds (a resumed run's earlier epochs included);
/// wall: `wall_seconds`, this process's time. In parentheses after the final accuracy: a sweep's
/// chosen head (`head 2 of 8, max-lr 1e-2`) and, where the final epoch counted per class, the
/// three classes of lowest accuracy in it (`worst: beagle 20.00 %, pug 25.00 %, boxer 30.00 %`,
/// named by `labels`); a sweep's best epoch also names its head (`at epoch 3 (head 1)`).
std::string run_summary_line(const std::vector<EpochMetrics>& epochs, double wall_seconds,
                             const std::string& model_path,
                             const std::vector<std::string>& labels = {});

/// The `n` classes of lowest accuracy in `correct` of `evaluated` per class (the first of equals
/// first), classes with no image left out.
std::vector<int> worst_classes(const std::vector<int64_t>& correct,
                               const std::vector<int64_t>& evaluated, int n);

/// metrics.jsonl: one JSON object per epoch, one per line. With `labels`, each line also has
/// `class_accuracy`, the percent right per class by name, null for a class without held-out images
/// (and so has each of a sweep's heads).
std::string metrics_jsonl(const std::vector<EpochMetrics>& epochs,
                          const std::vector<std::string>& labels = {});

/// The run's confusion matrices, in --out.
inline constexpr const char* kConfusionFileName = "confusion.json";

/// confusion.json of `epoch`: {"epoch", "labels", "chosen" (the head the epoch reports), "heads":
/// [{"max_lr", "accuracy", "matrix"}]}, one head per row of `confusions` (classes x classes,
/// row-major) as `matrix[true][predicted]`, its max-lr and accuracy the epoch's figures of that
/// head (`epoch.heads`, or the epoch's own for one head).
nlohmann::json confusion_json(const EpochMetrics& epoch,
                              const std::vector<std::vector<int64_t>>& confusions,
                              const std::vector<std::string>& labels);

void to_json(nlohmann::json& j, const EpochMetrics& m);
void from_json(const nlohmann::json& j, EpochMetrics& m);
void to_json(nlohmann::json& j, const HeadMetrics& m);
void from_json(const nlohmann::json& j, HeadMetrics& m);
void to_json(nlohmann::json& j, const EpochPosition& p);
void from_json(const nlohmann::json& j, EpochPosition& p);

}  // namespace pets::train
