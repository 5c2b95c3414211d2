#include "pets/data/loader.hpp"

#include <algorithm>
#include <array>

#include "pets/data/augment.hpp"
#include "pets/data/rng.hpp"
#include "pets/util/error.hpp"

namespace pets::data {

namespace {
constexpr std::uint64_t kTrainOrderTag = 0x54524149ULL;  // "TRAI"
constexpr std::uint64_t kAugmentTag = 0x41554721ULL;     // "AUG!"
}  // namespace

Loader::Loader(LoaderOptions options) : options_(std::move(options)) {
  if (options_.world < 1 || options_.rank < 0 || options_.rank >= options_.world)
    throw UsageError("loader: rank " + std::to_string(options_.rank) + " outside a world of " +
                     std::to_string(options_.world));
  PETS_CHECK(options_.batch_size >= 1 && options_.eval_batch_size >= 1 &&
                 options_.image_size >= 1 && options_.workers >= 1 && options_.prefetch >= 1,
             "loader: batch sizes, image size, workers and prefetch must be set (positive)");
  store_ = std::make_unique<Store>(options_.path);
  if (options_.verify_ahead) verifier_ = std::thread([this] { verify_chunks(); });
}

Loader::~Loader() {
  stop();
  verify_stop_.store(true, std::memory_order_relaxed);
  finish_verifying();
}

void Loader::verify_chunks() {
  // Train: every image (the epochs' orders cover the split), in file order; eval: this rank's
  // share, the same every epoch.
  try {
    std::vector<std::int64_t> images(
        static_cast<std::size_t>(store_->split(SplitKind::kTrain).size()));
    for (std::size_t i = 0; i < images.size(); ++i) images[i] = static_cast<std::int64_t>(i);
    store_->verify_ahead(SplitKind::kTrain, images, verify_stop_);
    images.clear();
    for (std::int64_t s = 0; s < steps_per_epoch(SplitKind::kEval); ++s) {
      const std::vector<std::int64_t> share = step_indices(SplitKind::kEval, 0, s);
      images.insert(images.end(), share.begin(), share.end());
    }
    store_->verify_ahead(SplitKind::kEval, images, verify_stop_);
  } catch (...) {
    // Nothing is lost: each read checks its chunks itself and reports what is wrong.
  }
}

void Loader::finish_verifying() {
  if (verifier_.joinable()) verifier_.join();
}

std::int64_t Loader::steps_per_epoch(SplitKind kind) const {
  const std::int64_t n = store_->split(kind).size();
  const std::int64_t per_step =
      (kind == SplitKind::kTrain ? options_.batch_size : options_.eval_batch_size) * options_.world;
  return (n + per_step - 1) / per_step;
}

std::vector<std::int64_t> Loader::step_indices(SplitKind kind, std::int64_t epoch,
                                               std::int64_t step) const {
  const std::int64_t n = store_->split(kind).size();
  const std::int64_t batch =
      kind == SplitKind::kTrain ? options_.batch_size : options_.eval_batch_size;
  const std::int64_t world = options_.world, rank = options_.rank;
  const std::int64_t begin = step * batch * world;
  std::int64_t first = 0, count = 0;
  if (kind == SplitKind::kTrain && world > 1) {
    // Accelerate's even batches: every rank takes `batch` positions, those past the end of the
    // order wrapping round to its start.
    first = begin + rank * batch;
    count = n > 0 ? batch : 0;
  } else {
    const std::int64_t m = std::max<std::int64_t>(0, std::min(batch * world, n - begin));
    const std::int64_t base = m / world, extra = m % world;
    first = begin + rank * base + std::min(rank, extra);
    count = base + (rank < extra ? 1 : 0);
  }
  std::vector<std::int64_t> out(static_cast<std::size_t>(count));
  if (kind == SplitKind::kTrain) {
    const std::vector<std::int64_t> order = permutation(
        n, mix_seed({options_.seed, static_cast<std::uint64_t>(epoch), kTrainOrderTag}));
    for (std::int64_t i = 0; i < count; ++i)
      out[static_cast<std::size_t>(i)] = order[static_cast<std::size_t>((first + i) % n)];
  } else {
    for (std::int64_t i = 0; i < count; ++i) out[static_cast<std::size_t>(i)] = first + i;
  }
  return out;
}

std::uint64_t augment_seed(std::uint64_t seed, int rank, std::int64_t epoch,
                           std::int64_t position) {
  return mix_seed({seed, static_cast<std::uint64_t>(rank), static_cast<std::uint64_t>(epoch),
                   static_cast<std::uint64_t>(position), kAugmentTag});
}

namespace {

/// The box an image is cropped to: train, RandomResizedCrop's, drawn first from the image's own
/// stream (transform_train draws it the same way); eval, the whole image.
CropBox image_box(SplitKind kind, const std::array<std::int32_t, 3>& shape, Rng* rng) {
  if (kind == SplitKind::kTrain) return random_resized_crop_box(shape[0], shape[1], *rng);
  return CropBox{0, 0, shape[0], shape[1]};
}

}  // namespace

Batch Loader::make_batch(SplitKind kind, std::int64_t epoch, std::int64_t step) const {
  Batch b;
  b.indices = step_indices(kind, epoch, step);
  b.n = static_cast<std::int64_t>(b.indices.size());
  b.h = b.w = options_.image_size;
  b.step = step;
  b.split = kind;
  const SplitIndex& split = store_->split(kind);
  b.labels.resize(static_cast<std::size_t>(b.n));
  b.boxes.resize(static_cast<std::size_t>(b.n));
  const std::int64_t batch =
      kind == SplitKind::kTrain ? options_.batch_size : options_.eval_batch_size;
  for (std::int64_t i = 0; i < b.n; ++i) {
    const auto k = static_cast<std::size_t>(i);
    const auto idx = static_cast<std::size_t>(b.indices[k]);
    b.labels[k] = split.labels[idx];
    Rng rng(augment_seed(options_.seed, options_.rank, epoch, step * batch + i));
    b.boxes[k] = image_box(kind, split.shapes[idx], &rng);
  }
  if (options_.output == LoaderOutput::kBoxes) return b;
  if (options_.output == LoaderOutput::kCrops) {
    b.crop_offsets.resize(static_cast<std::size_t>(b.n));
    std::int64_t widest = 0;
    for (std::size_t k = 0; k < b.boxes.size(); ++k) {
      b.crop_offsets[k] = b.crop_bytes;
      b.crop_bytes += static_cast<std::int64_t>(b.boxes[k].height) * b.boxes[k].width * 3;
      widest = std::max<std::int64_t>(widest, b.boxes[k].width);
    }
    // The widest crop's row after the crops, unused: see Batch::crop_bytes.
    const auto bytes = static_cast<std::size_t>(b.crop_bytes + widest * 3);
    if (options_.allocate_staging) {
      b.crops = options_.allocate_staging(bytes);
      PETS_CHECK(b.crops.data != nullptr || bytes == 0, "loader: staging allocation failed");
    } else {
      // Not zeroed: every byte but the unused row is a crop's.
      std::shared_ptr<std::uint8_t> owner(new std::uint8_t[bytes],
                                          std::default_delete<std::uint8_t[]>());
      b.crops.data = owner.get();
      b.crops.owner = std::move(owner);
    }
    for (std::size_t k = 0; k < b.boxes.size(); ++k)
      store_->read_crop(kind, b.indices[k], b.boxes[k], b.crops.data + b.crop_offsets[k]);
    return b;
  }
  // Only the box is read (under the store's lock); the resize, which reads nothing outside the
  // box, runs on it outside the lock with the same arithmetic as on the whole image.
  const std::size_t per_image = 3 * static_cast<std::size_t>(b.h) * b.w;
  b.pixels.resize(static_cast<std::size_t>(b.n) * per_image);
  std::vector<std::uint8_t> crop;
  for (std::int64_t i = 0; i < b.n; ++i) {
    const auto k = static_cast<std::size_t>(i);
    const CropBox& box = b.boxes[k];
    crop.resize(static_cast<std::size_t>(box.height) * box.width * 3);
    store_->read_crop(kind, b.indices[k], box, crop.data());
    float* out = b.pixels.data() + k * per_image;
    resize_crop_bilinear(crop.data(), box.height, box.width, CropBox{0, 0, box.height, box.width},
                         options_.image_size, options_.image_size, out);
    normalize_hwc(out, options_.image_size, options_.image_size, out);
  }
  return b;
}

void Loader::set_output(LoaderOutput output) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    PETS_CHECK(threads_.empty(), "loader: the output cannot change while an epoch runs");
  }
  options_.output = output;
}

void Loader::stop() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  cv_.notify_all();
  for (auto& t : threads_) t.join();
  threads_.clear();
  ready_.clear();
  failed_.clear();
}

void Loader::start_epoch(SplitKind kind, std::int64_t epoch, std::int64_t first_step) {
  stop();
  kind_ = kind;
  epoch_ = epoch;
  total_steps_ = steps_per_epoch(kind);
  next_to_build_ = std::min(std::max<std::int64_t>(first_step, 0), total_steps_);
  next_to_deliver_ = next_to_build_;
  stopping_ = false;
  for (int i = 0; i < options_.workers; ++i) threads_.emplace_back([this] { worker_loop(); });
}

void Loader::worker_loop() {
  for (;;) {
    std::int64_t step = 0;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      // Bounded queue: build at most `prefetch` batches ahead of the consumer (and no fewer
      // than there are workers, which would leave some idle).
      const std::int64_t ahead = std::max(options_.prefetch, options_.workers);
      cv_.wait(lock, [this, ahead] {
        return stopping_ ||
               (next_to_build_ < total_steps_ && next_to_build_ < next_to_deliver_ + ahead);
      });
      if (stopping_) return;
      step = next_to_build_++;
    }
    try {
      Batch b = make_batch(kind_, epoch_, step);
      std::lock_guard<std::mutex> lock(mutex_);
      ready_.emplace(step, std::move(b));
    } catch (...) {
      std::lock_guard<std::mutex> lock(mutex_);
      failed_.emplace(step, std::current_exception());
    }
    cv_.notify_all();
  }
}

std::optional<Batch> Loader::next() {
  std::unique_lock<std::mutex> lock(mutex_);
  if (threads_.empty() || next_to_deliver_ >= total_steps_) return std::nullopt;
  const std::int64_t step = next_to_deliver_;
  cv_.wait(lock, [&] { return ready_.count(step) || failed_.count(step); });
  if (auto f = failed_.find(step); f != failed_.end()) {
    std::exception_ptr e = f->second;
    failed_.erase(f);
    std::rethrow_exception(e);
  }
  auto it = ready_.find(step);
  Batch b = std::move(it->second);
  ready_.erase(it);
  ++next_to_deliver_;
  lock.unlock();
  cv_.notify_all();
  return b;
}

}  // namespace pets::data
