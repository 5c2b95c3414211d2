#include "pets/train/input/input_pipeline.hpp"

#include <torch/torch.h>

#include <chrono>
#include <string>
#include <utility>
#include <vector>

#include "pets/comm/communicator.hpp"
#include "pets/comm/program.hpp"
#include "pets/train/device/cuda_parts.hpp"
#include "pets/train/device/device_name.hpp"
#include "pets/train/input/batch_tensors.hpp"
#include "pets/train/input/device_input.hpp"
#include "pets/train/input/resident_images.hpp"
#include "pets/util/error.hpp"
#include "pets/util/number_text.hpp"

namespace pets::train {

namespace {

/// The owner of a staging buffer made by configure_loader's allocator: the tensor itself, so
/// that the upload reads LibTorch's own (pinned) allocation, whose reuse it can then defer.
struct StagedBytes {
  at::Tensor bytes;
};

}  // namespace

void configure_loader(data::LoaderOptions& options, bool device_input, bool pinned) {
  if (!device_input) {
    options.output = data::LoaderOutput::kPixels;
    options.allocate_staging = nullptr;
    return;
  }
  options.output = data::LoaderOutput::kCrops;
  options.allocate_staging = [pinned](std::size_t bytes) {
    auto owner = std::make_shared<StagedBytes>();
    owner->bytes = at::empty({static_cast<std::int64_t>(bytes)},
                             at::TensorOptions().dtype(at::kByte).pinned_memory(pinned));
    data::StagingBuffer buffer;
    buffer.data = owner->bytes.data_ptr<std::uint8_t>();
    buffer.owner = std::move(owner);
    return buffer;
  };
}

InputPipeline::InputPipeline(data::Loader& loader, const c10::Device& device,
                             std::unique_ptr<DeviceInput> input,
                             std::unique_ptr<ResidentImages> resident)
    : loader_(loader), device_(device), input_(std::move(input)), resident_(std::move(resident)) {
  const data::LoaderOptions& lo = loader_.options();
  const bool crops = lo.output == data::LoaderOutput::kCrops;
  const bool boxes = lo.output == data::LoaderOutput::kBoxes;
  PETS_CHECK(!resident_ || input_, "input pipeline: resident images need the device input path");
  PETS_CHECK((crops || boxes) == device_input() && (!crops || lo.allocate_staging) &&
                 boxes == (resident_ != nullptr),
             std::string("input pipeline: the loader was not configured for the ") +
                 (resident_ ? "resident " : "") + (device_input() ? "device" : "cpu") +
                 " input path (configure_loader" + (resident_ || boxes ? ", set_output)" : ")"));
  PETS_CHECK(!resident_ || resident_->bytes().device().type() == device_.type(),
             "input pipeline: the resident images are not on " + device_.str());
  PETS_CHECK(
      !input_ || (input_->device().type() == device_.type() && input_->size() == lo.image_size),
      "input pipeline: the device input does not make the loader's images on " + device_.str());
}

InputPipeline::~InputPipeline() = default;

std::int64_t InputPipeline::resident_bytes() const {
  return resident_ ? resident_->size_bytes() : -1;
}

void InputPipeline::start_epoch(data::SplitKind kind, std::int64_t epoch, std::int64_t first_step) {
  ahead_.reset();
  ahead_images_.reset();
  current_images_ = at::Tensor();
  current_step_ = -1;
  upload_seconds_ = 0.0;
  loader_.start_epoch(kind, epoch, first_step);
}

void InputPipeline::submit_next() {
  ahead_ = loader_.next();
  if (!ahead_) return;
  data::Batch& b = *ahead_;
  if (b.n == 0) {  // an empty share of the last step: nothing to upload
    ahead_images_.reset();
    return;
  }
  if (resident_) {
    // The crops are cut from the images on the device: nothing is uploaded but the slots.
    std::vector<CropSlot> slots;
    slots.reserve(b.boxes.size());
    for (std::size_t i = 0; i < b.boxes.size(); ++i)
      slots.push_back(resident_->slot(b.split, b.indices[i], b.boxes[i]));
    const auto start = std::chrono::steady_clock::now();
    ahead_images_ = std::make_unique<PendingImages>(input_->submit(*resident_, slots));
    upload_seconds_ +=
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return;
  }
  HostCrops crops;
  crops.bytes = static_cast<StagedBytes*>(b.crops.owner.get())->bytes;
  crops.slots.reserve(b.boxes.size());
  for (std::size_t i = 0; i < b.boxes.size(); ++i)
    crops.slots.push_back(CropSlot{b.crop_offsets[i], b.boxes[i].height, b.boxes[i].width});
  const auto start = std::chrono::steady_clock::now();
  ahead_images_ = std::make_unique<PendingImages>(input_->submit(crops));
  upload_seconds_ +=
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  // The upload holds the tensor (and the pinned allocator defers its reuse): the loader's
  // handle can go now.
  b.crops = data::StagingBuffer{};
}

std::optional<data::Batch> InputPipeline::next() {
  if (!input_) {
    std::optional<data::Batch> b = loader_.next();
    current_images_ = at::Tensor();
    current_step_ = b ? b->step : -1;
    return b;
  }
  // The epoch's first batch is fetched here, not in start_epoch, so that waiting for it counts
  // as the caller's loader wait.
  if (current_step_ < 0 && !ahead_) submit_next();
  if (!ahead_) return std::nullopt;
  data::Batch batch = std::move(*ahead_);
  std::unique_ptr<PendingImages> pending = std::move(ahead_images_);
  const auto start = std::chrono::steady_clock::now();
  current_images_ = pending
                        ? pending->get()
                        : at::empty({0, 3, batch.h, batch.w}, at::TensorOptions().device(device_),
                                    at::MemoryFormat::ChannelsLast);
  upload_seconds_ +=
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  current_step_ = batch.step;
  submit_next();
  return batch;
}

at::Tensor InputPipeline::images(data::Batch& batch) {
  PETS_CHECK(batch.step == current_step_,
             "input pipeline: images of step " + std::to_string(batch.step) +
                 " asked for, the current batch is step " + std::to_string(current_step_));
  if (!input_) return batch_images(batch, device_);
  return current_images_;
}

bool use_device_input(InputChoice choice, const c10::Device& device) {
  return choice == InputChoice::kDevice || (choice == InputChoice::kAuto && device.is_cuda());
}

std::string resident_path_refusal(ResidentChoice resident, InputChoice input,
                                  const c10::Device& device) {
  if (resident != ResidentChoice::kOn || use_device_input(input, device)) return "";
  return "--resident on holds the images for the device input path, " +
         (input == InputChoice::kCpu
              ? std::string("not for --input cpu")
              : "which --input " + to_string(input) + " does not take on " + device.str()) +
         "; use --input device or --resident off";
}

bool resident_fits(std::int64_t store_bytes, std::int64_t free_bytes) {
  return free_bytes >= 0 && store_bytes <= free_bytes / 2;
}

namespace {

/// "--resident on: ... do not fit ..." for a store of `store_bytes`; `free` as memory_text.
std::string resident_refusal(ResidentChoice resident, const c10::Device& device,
                             std::int64_t store_bytes, const std::string& free) {
  return "--resident " + to_string(resident) + ": the store's images (" +
         byte_size_text(store_bytes) + ") do not fit in the memory of " + device_with_name(device) +
         (free.empty() ? "" : " with " + free) +
         ", of which at most half is given to them (the rest is the step's); use --resident off "
         "to stream them from the host";
}

/// Whether a store of `store_bytes` is held on `device` (collective over `host`).
bool hold_resident(const c10::Device& device, bool device_input, ResidentChoice resident,
                   comm::Communicator& host, std::int64_t store_bytes) {
  // Every rank takes part, whatever it wants, so that the collectives match.
  bool fits = device_input && resident != ResidentChoice::kOff;
  std::string free;
  if (fits && device.is_cuda()) {
    fits = resident_fits(store_bytes, cuda_parts()->free_memory(device.index()));
    free = cuda_parts()->memory_text(device.index());
  } else if (resident == ResidentChoice::kAuto) {
    fits = false;  // auto holds them on CUDA only
  }
  if (resident == ResidentChoice::kOn) {
    agree_on_usage([&] {
      if (!fits) throw UsageError(resident_refusal(resident, device, store_bytes, free));
    });
    return true;
  }
  return host.sum_counter(fits ? 1 : 0) == host.size();
}

}  // namespace

std::unique_ptr<InputPipeline> make_input_pipeline(data::Loader& loader, const c10::Device& device,
                                                   InputChoice input, ResidentChoice resident,
                                                   comm::Communicator& host) {
  agree_on_usage([&] {
    if (const std::string refusal = resident_path_refusal(resident, input, device);
        !refusal.empty())
      throw UsageError(refusal);
  });
  const bool device_input = use_device_input(input, device);
  std::unique_ptr<DeviceInput> device_path;
  std::unique_ptr<ResidentImages> images;
  if (device_input)
    device_path = std::make_unique<DeviceInput>(device, loader.options().image_size);
  const std::int64_t store_bytes = ResidentImages::bytes_of(loader.store());
  if (resident != ResidentChoice::kOff &&
      hold_resident(device, device_input, resident, host, store_bytes)) {
    images = agree_on_usage([&] {
      try {
        return std::make_unique<ResidentImages>(loader.store(), device, loader.options().workers);
      } catch (const c10::OutOfMemoryError&) {
        throw UsageError(
            resident_refusal(resident, device, store_bytes,
                             device.is_cuda() ? cuda_parts()->memory_text(device.index()) : ""));
      }
    });
    loader.set_output(data::LoaderOutput::kBoxes);
  }
  return std::make_unique<InputPipeline>(loader, device, std::move(device_path), std::move(images));
}

}  // namespace pets::train
