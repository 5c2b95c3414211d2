#include "pets/train/input/resident_images.hpp"

#include <torch/torch.h>

#include <algorithm>
#include <atomic>
#include <exception>
#include <mutex>
#include <string>
#include <thread>

#include "pets/util/error.hpp"

namespace pets::train {

using data::SplitKind;

namespace {

/// One image to read: its split, its index there and its place in the tensor.
struct Item {
  SplitKind kind;
  std::int64_t index;
  std::int64_t offset;
  int height;
  int width;
  std::int64_t size() const { return static_cast<std::int64_t>(height) * width * 3; }
};

/// Reads images [first, last) of `items` into `base` (where byte `base_offset` of the tensor
/// lies) with up to `threads` threads; rethrows the first read's error once all have stopped.
void read_images(const data::Store& store, const std::vector<Item>& items, std::size_t first,
                 std::size_t last, std::uint8_t* base, std::int64_t base_offset, int threads) {
  std::atomic<std::size_t> next{first};
  std::atomic<bool> failed{false};
  std::exception_ptr error;
  std::mutex error_mutex;
  auto work = [&] {
    for (;;) {
      const std::size_t k = next.fetch_add(1);
      if (k >= last || failed.load()) return;
      const Item& it = items[k];
      if (it.size() == 0) continue;
      try {
        store.read_crop(it.kind, it.index, data::CropBox{0, 0, it.height, it.width},
                        base + (it.offset - base_offset));
      } catch (...) {
        std::lock_guard<std::mutex> lock(error_mutex);
        if (!error) error = std::current_exception();
        failed.store(true);
      }
    }
  };
  const auto count = static_cast<std::size_t>(std::max(1, threads));
  std::vector<std::thread> pool;
  for (std::size_t t = 1; t < std::min(count, last - first); ++t) pool.emplace_back(work);
  work();
  for (std::thread& t : pool) t.join();
  if (error) std::rethrow_exception(error);
}

}  // namespace

std::int64_t ResidentImages::bytes_of(const data::Store& store) {
  std::int64_t total = 0;
  for (const SplitKind kind : {SplitKind::kTrain, SplitKind::kEval})
    for (const auto& shape : store.split(kind).shapes)
      total += static_cast<std::int64_t>(shape[0]) * shape[1] * 3;
  return total;
}

ResidentImages::ResidentImages(const data::Store& store, const c10::Device& device, int threads,
                               std::int64_t staging_bytes) {
  PETS_CHECK(threads >= 1 && staging_bytes >= 1,
             "resident images: threads and staging bytes must be positive");
  std::vector<Item> items;
  std::int64_t total = 0, largest = 0;
  for (const SplitKind kind : {SplitKind::kTrain, SplitKind::kEval}) {
    const data::SplitIndex& split = store.split(kind);
    std::vector<Placed>& placed = kind == SplitKind::kTrain ? train_ : eval_;
    placed.reserve(static_cast<std::size_t>(split.size()));
    for (std::int64_t i = 0; i < split.size(); ++i) {
      const auto& shape = split.shapes[static_cast<std::size_t>(i)];
      items.push_back(Item{kind, i, total, shape[0], shape[1]});
      placed.push_back(Placed{total, shape[0], shape[1]});
      total += items.back().size();
      largest = std::max(largest, items.back().size());
    }
  }
  // One row of the widest image after the last, unused: resize_normalize then reads every crop
  // from its own first byte, as it reads staged crops (HostCrops), for the same result.
  std::int64_t widest = 0;
  for (const Item& it : items) widest = std::max<std::int64_t>(widest, it.width);
  bytes_ = at::empty({total + widest * 3}, at::TensorOptions().dtype(at::kByte).device(device));
  images_bytes_ = total;
  if (device.is_cpu()) {
    read_images(store, items, 0, items.size(), bytes_.data_ptr<std::uint8_t>(), 0, threads);
    return;
  }
  // Fills of whole images, each uploaded before the next is read: the staging buffer stays
  // bounded, and the reads (checksums, page faults) are the slow part, not the copies.
  const at::Tensor staging =
      at::empty({std::max(staging_bytes, largest)},
                at::TensorOptions().dtype(at::kByte).pinned_memory(device.is_cuda()));
  for (std::size_t first = 0; first < items.size();) {
    const std::int64_t start = items[first].offset;
    std::size_t last = first + 1;
    while (last < items.size() &&
           items[last].offset + items[last].size() - start <= staging.numel())
      ++last;
    const std::int64_t length = items[last - 1].offset + items[last - 1].size() - start;
    read_images(store, items, first, last, staging.data_ptr<std::uint8_t>(), start, threads);
    bytes_.narrow(0, start, length).copy_(staging.narrow(0, 0, length));
    first = last;
  }
}

CropSlot ResidentImages::slot(SplitKind kind, std::int64_t index, const data::CropBox& box) const {
  const std::vector<Placed>& images = placed(kind);
  PETS_CHECK(index >= 0 && index < static_cast<std::int64_t>(images.size()),
             "resident images: no image " + std::to_string(index) + " in the " +
                 data::split_name(kind) + " split");
  const Placed& p = images[static_cast<std::size_t>(index)];
  PETS_CHECK(box.height > 0 && box.width > 0 && box.top >= 0 && box.left >= 0 &&
                 box.top + box.height <= p.height && box.left + box.width <= p.width,
             "resident images: crop box outside the " + std::to_string(p.height) + "x" +
                 std::to_string(p.width) + " image " + std::to_string(index) + " of the " +
                 data::split_name(kind) + " split");
  const std::int64_t stride = static_cast<std::int64_t>(p.width) * 3;
  return CropSlot{p.offset + box.top * stride + static_cast<std::int64_t>(box.left) * 3, box.height,
                  box.width, stride};
}

}  // namespace pets::train
