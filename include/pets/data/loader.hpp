#pragma once
/// \file
/// The per-rank data loader over an image store. Free of LibTorch on purpose (its headers cost
/// ~25 s per file to compile): a Batch is plain vectors that the trainer wraps with
/// torch::from_blob, without a copy on the CPU.
///
/// Sharding: an epoch's global order (train: a permutation seeded by (seed, epoch); eval: store
/// order) is cut into global steps of batch_size * world images; inside a step rank r takes the
/// r-th share. Training at several ranks batches as Accelerate's prepared DataLoader does (its
/// even_batches): every rank takes batch_size images at every step, the last step's positions
/// past the end of the order wrapping round to the epoch's first images, so those are trained
/// twice in the epoch; at one rank the last batch is the remainder. Evaluation uses every image
/// exactly once: the last step's remainder is split as evenly as possible, and may be empty on
/// some ranks when fewer images than ranks remain (a consumer weights by n). Every rank has the
/// same number of steps, ceil(n / (batch_size * world)).

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "pets/data/store_reader.hpp"

namespace pets::data {

/// The name under which checkpoints record how training batches are made (the sharding above);
/// a change to it gets a new name, so that a run is not resumed on batches it did not train with.
inline constexpr char kTrainBatching[] = "accelerate-even-batches";

/// What a batch carries.
enum class LoaderOutput {
  kPixels,  ///< normalised float pixels, resized on the CPU (Batch::pixels)
  kCrops,   ///< each image's crop box as uint8 bytes, for a device to resize and normalise
  kBoxes,   ///< only each image's crop box (Batch::boxes), for a device that holds every image
};

/// A host buffer the loader fills with crops: `data` holds at least the bytes asked for; `owner`
/// keeps them alive (for a GPU, a page-locked tensor, which the data layer never sees as one).
struct StagingBuffer {
  std::uint8_t* data = nullptr;
  std::shared_ptr<void> owner;
};

/// Allocates a StagingBuffer of `bytes` bytes; called on a worker thread.
using StagingAllocator = std::function<StagingBuffer(std::size_t bytes)>;

/// Loader settings.
struct LoaderOptions {
  std::string path;  ///< the HDF5 store
  int rank = 0;
  int world = 1;
  /// Training and evaluation images per rank per step: required (pets_train's --batch-size and
  /// --eval-batch-size, whose defaults and checks are its options').
  std::int64_t batch_size = 0;
  std::int64_t eval_batch_size = 0;
  int image_size = 224;
  std::uint64_t seed = 42;
  int workers = 2;   ///< decode/augment threads
  int prefetch = 4;  ///< batches ready ahead of the consumer (bounded queue; at least `workers`, so
                     ///< that every worker can build one)
  /// Check the Fletcher32 sums of the pixel chunks this rank will read on a background thread
  /// from construction on (Store::verify_ahead: the training split, then this rank's share of the
  /// evaluation split), so that the first epoch's reads neither check nor page-fault.
  bool verify_ahead = true;
  LoaderOutput output = LoaderOutput::kPixels;
  /// kCrops: where the crop bytes go; empty: ordinary memory.
  StagingAllocator allocate_staging;
};

/// One batch: normalised float pixels, channels last (NHWC: what the model consumes, viewed as
/// an NCHW tensor with channels-last strides), plus labels; or, with LoaderOutput::kCrops, the
/// uint8 crops that resize to those pixels (train: the RandomResizedCrop box the CPU path draws
/// from the same random stream; eval: the whole image); or, with LoaderOutput::kBoxes, only those
/// boxes, of images `indices` of split `split`, which a device holding every image cuts itself.
struct Batch {
  std::vector<float> pixels;          ///< kPixels: n * h * w * 3; kCrops: empty
  std::vector<std::int64_t> labels;   ///< n
  std::vector<std::int64_t> indices;  ///< n, image indices within the split (for checks)
  std::int64_t n = 0;
  int h = 0;
  int w = 0;
  std::int64_t step = 0;                ///< index of the batch in the epoch
  SplitKind split = SplitKind::kTrain;  ///< the split `indices` are of
  /// kCrops: crop i is boxes[i].height x boxes[i].width x 3 bytes (HWC) at crop_offsets[i] of
  /// `crops`, packed in batch order, crop_bytes in all; `crops` holds one row of the widest box
  /// (its width * 3 bytes) more, unused, so that a device may read every row as wide as the
  /// widest (pets/train/input/device_input.hpp's HostCrops). Boxes are in the stored image's
  /// coordinates (kBoxes: the boxes alone).
  StagingBuffer crops;
  std::int64_t crop_bytes = 0;
  std::vector<CropBox> boxes;
  std::vector<std::int64_t> crop_offsets;
};

/// The seed of the augmentation stream of image `position` (step * batch_size + i) of an epoch
/// on `rank`: results do not depend on which worker thread builds which batch.
std::uint64_t augment_seed(std::uint64_t seed, int rank, std::int64_t epoch, std::int64_t position);

/// Reads, augments and batches this rank's share of a store, ahead of the consumer.
class Loader {
 public:
  /// Opens and validates the store (pets::UsageError naming the file on a bad one).
  explicit Loader(LoaderOptions options);
  ~Loader();
  Loader(const Loader&) = delete;
  Loader& operator=(const Loader&) = delete;

  const Store& store() const { return *store_; }
  const LoaderOptions& options() const { return options_; }
  std::int64_t num_classes() const {
    return static_cast<std::int64_t>(store_->label_names().size());
  }

  /// Steps in one epoch of a split: the same on every rank.
  std::int64_t steps_per_epoch(SplitKind kind) const;
  /// This rank's images of a step, in order (split indices).
  std::vector<std::int64_t> step_indices(SplitKind kind, std::int64_t epoch,
                                         std::int64_t step) const;

  /// Changes what the batches carry (LoaderOptions::output); only while no epoch runs (before
  /// start_epoch), else throws pets::Error. The input path can so be chosen once the store is
  /// open (InputPipeline's resident images).
  void set_output(LoaderOutput output);

  /// Starts producing an epoch's batches on the worker threads (stops a running one), from
  /// `first_step` on (a resumed epoch; batches are pure functions of (kind, epoch, step)).
  void start_epoch(SplitKind kind, std::int64_t epoch, std::int64_t first_step = 0);
  /// The next batch of the running epoch in order, or nothing at its end. Rethrows a worker's
  /// error.
  std::optional<Batch> next();

  /// Waits until the background check of the chunks (LoaderOptions::verify_ahead) has ended.
  void finish_verifying();

  /// Builds one batch synchronously (what a worker does). Only each image's crop box is read
  /// (Store::read_crop: outside the HDF5 lock when the store allows); the resize reads nothing
  /// else, so the results equal transform_train / transform_eval of the whole image.
  Batch make_batch(SplitKind kind, std::int64_t epoch, std::int64_t step) const;

 private:
  void stop();
  void worker_loop();
  void verify_chunks();

  LoaderOptions options_;
  std::unique_ptr<Store> store_;
  std::atomic<bool> verify_stop_{false};
  std::thread verifier_;

  std::mutex mutex_;
  std::condition_variable cv_;
  std::vector<std::thread> threads_;
  SplitKind kind_ = SplitKind::kTrain;
  std::int64_t epoch_ = 0;
  std::int64_t total_steps_ = 0;
  std::int64_t next_to_build_ = 0;
  std::int64_t next_to_deliver_ = 0;
  bool stopping_ = false;
  std::map<std::int64_t, Batch> ready_;
  std::map<std::int64_t, std::exception_ptr> failed_;
};

}  // namespace pets::data
