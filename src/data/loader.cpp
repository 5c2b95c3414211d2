#include "pets/data/loader.hpp"

#include <algorithm>

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
  if (options_.train_batch < 1 || options_.eval_batch < 1 || options_.image_size < 1 ||
      options_.workers < 1 || options_.prefetch < 1)
    throw UsageError("loader: batch sizes, image size, workers and prefetch must be positive");
  store_ = std::make_unique<Store>(options_.path);
}

Loader::~Loader() { stop(); }

std::int64_t Loader::steps_per_epoch(SplitKind kind) const {
  const std::int64_t n = store_->split(kind).size();
  const std::int64_t per_step =
      (kind == SplitKind::kTrain ? options_.train_batch : options_.eval_batch) * options_.world;
  return (n + per_step - 1) / per_step;
}

std::vector<std::int64_t> Loader::step_indices(SplitKind kind, std::int64_t epoch,
                                               std::int64_t step) const {
  const std::int64_t n = store_->split(kind).size();
  const std::int64_t batch = kind == SplitKind::kTrain ? options_.train_batch : options_.eval_batch;
  const std::int64_t world = options_.world, rank = options_.rank;
  const std::int64_t begin = step * batch * world;
  const std::int64_t m = std::max<std::int64_t>(0, std::min(batch * world, n - begin));
  const std::int64_t base = m / world, extra = m % world;
  const std::int64_t first = begin + rank * base + std::min(rank, extra);
  const std::int64_t count = base + (rank < extra ? 1 : 0);
  std::vector<std::int64_t> out(static_cast<std::size_t>(count));
  if (kind == SplitKind::kTrain) {
    const std::vector<std::int64_t> order = permutation(
        n, mix_seed({options_.seed, static_cast<std::uint64_t>(epoch), kTrainOrderTag}));
    for (std::int64_t i = 0; i < count; ++i)
      out[static_cast<std::size_t>(i)] = order[static_cast<std::size_t>(first + i)];
  } else {
    for (std::int64_t i = 0; i < count; ++i) out[static_cast<std::size_t>(i)] = first + i;
  }
  return out;
}

Batch Loader::make_batch(SplitKind kind, std::int64_t epoch, std::int64_t step) const {
  Batch b;
  b.indices = step_indices(kind, epoch, step);
  b.n = static_cast<std::int64_t>(b.indices.size());
  b.h = b.w = options_.image_size;
  b.step = step;
  const std::size_t per_image = 3 * static_cast<std::size_t>(b.h) * b.w;
  b.pixels.resize(static_cast<std::size_t>(b.n) * per_image);
  b.labels.resize(static_cast<std::size_t>(b.n));
  const std::int64_t batch = kind == SplitKind::kTrain ? options_.train_batch : options_.eval_batch;
  for (std::int64_t i = 0; i < b.n; ++i) {
    const std::int64_t idx = b.indices[static_cast<std::size_t>(i)];
    const Image img = store_->read_image(kind, idx);
    b.labels[static_cast<std::size_t>(i)] =
        store_->split(kind).labels[static_cast<std::size_t>(idx)];
    float* out = b.pixels.data() + static_cast<std::size_t>(i) * per_image;
    if (kind == SplitKind::kTrain) {
      // One stream per (seed, rank, epoch) and position in it: results do not depend on which
      // worker thread builds which batch.
      Rng rng(mix_seed({options_.seed, static_cast<std::uint64_t>(options_.rank),
                        static_cast<std::uint64_t>(epoch),
                        static_cast<std::uint64_t>(step * batch + i), kAugmentTag}));
      transform_train(img, rng, options_.image_size, out);
    } else {
      transform_eval(img, options_.image_size, out);
    }
  }
  return b;
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
      // Bounded queue: build at most `prefetch` batches ahead of the consumer.
      cv_.wait(lock, [this] {
        return stopping_ || (next_to_build_ < total_steps_ &&
                             next_to_build_ < next_to_deliver_ + options_.prefetch);
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
