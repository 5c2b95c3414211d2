#pragma once
/// \file
/// Where the trainer's batches come from and on which path their images are made (--input):
///   cpu     the loader resizes and normalises on its worker threads; the images are a view of
///           its floats (CPU) or one copy of them (GPU). The default on the CPU.
///   device  the loader only reads each image's crop box into a staging buffer (page-locked on
///           CUDA; LoaderOutput::kCrops), and DeviceInput uploads, resizes and normalises it on
///           the model's device, one batch ahead: on CUDA the next batch's upload and kernels run
///           on the input stream while the current step runs. The default on CUDA.
///           With --resident (pets/train/input/resident_images.hpp) the device holds every image of
///           the store: the loader only draws the boxes (LoaderOutput::kBoxes), and the device
///           cuts and resizes them, bit for bit the images of the staged crops.
/// Both give the same images within DeviceInput's stated tolerance
/// (tests/train/input/test_device_input.cpp; test_input_pipeline.cpp compares whole epochs).

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "pets/data/loader.hpp"
#include "pets/train/options/options.hpp"

namespace pets::comm {
class Communicator;
}

namespace pets::train {

class DeviceInput;
class PendingImages;
class ResidentImages;

/// Sets the loader's output for the chosen path: on the device path, crops staged into memory
/// that InputPipeline can upload (page-locked when `pinned`); else the CPU path's pixels. Call
/// before the Loader is made from `options`. (The backend decides both: backend.hpp.)
void configure_loader(data::LoaderOptions& options, bool device_input, bool pinned);

/// The batches of one loader, with their images on the model's device.
class InputPipeline {
 public:
  /// The images of `loader` (which must outlive this) on `device`: made by `input` (on the same
  /// device) from the crops the loader stages, or, with `resident` (the images of the loader's
  /// store, on the same device), from the boxes alone; when `input` is null, from the loader's
  /// pixels. The loader must have been configured by configure_loader for the same path (and
  /// set to LoaderOutput::kBoxes for `resident`); throws pets::Error otherwise.
  InputPipeline(data::Loader& loader, const c10::Device& device, std::unique_ptr<DeviceInput> input,
                std::unique_ptr<ResidentImages> resident = nullptr);
  ~InputPipeline();
  InputPipeline(const InputPipeline&) = delete;
  InputPipeline& operator=(const InputPipeline&) = delete;

  bool device_input() const { return input_ != nullptr; }
  /// The bytes of the images held on the device, or -1 when the crops are staged per batch.
  std::int64_t resident_bytes() const;

  /// Starts an epoch of `kind` from `first_step` (data::Loader::start_epoch).
  void start_epoch(data::SplitKind kind, std::int64_t epoch, std::int64_t first_step = 0);

  /// The next batch (labels, indices and n on the host), or nothing at the epoch's end. On the
  /// device path the batch after it is submitted before this returns, so that its upload and
  /// resize overlap the caller's step.
  std::optional<data::Batch> next();

  /// The images of `batch`, the one next() returned last: [n, 3, size, size] float32,
  /// channels-last, on the device (data::Batch's pixels on the CPU path).
  at::Tensor images(data::Batch& batch);

  /// True while a batch after the current one is submitted (the device path's prefetch).
  bool has_ahead() const { return ahead_.has_value(); }

  /// Seconds next() spent since start_epoch handing batches to the device (enqueueing the upload
  /// and the resize, taking the images): the part of the caller's wait that is not the loader's.
  double upload_seconds() const { return upload_seconds_; }

 private:
  void submit_next();

  data::Loader& loader_;
  c10::Device device_;
  std::unique_ptr<DeviceInput> input_;        ///< null on the CPU path
  std::unique_ptr<ResidentImages> resident_;  ///< null unless the device holds the images
  std::optional<data::Batch> ahead_;
  std::unique_ptr<PendingImages> ahead_images_;
  at::Tensor current_images_;
  std::int64_t current_step_ = -1;
  double upload_seconds_ = 0.0;
};

/// Whether `choice` takes the device input path for a model on `device`: `device` always, `auto`
/// on CUDA only, `cpu` never.
bool use_device_input(InputChoice choice, const c10::Device& device);

/// Whether --resident `resident` may be given with --input `input` on `device`: `on` holds the
/// store's images for the device input path, so it is refused where `input` does not take that
/// path (use_device_input: --input cpu, and --input auto on the CPU); auto and off are always
/// allowed (auto holds the images on CUDA only, when they fit: resident_fits). Returns the
/// refusal, a usage message naming both options and what to give instead, or "". make_backend
/// checks it once the device is known, before any data are read; make_input_pipeline again.
std::string resident_path_refusal(ResidentChoice resident, InputChoice input,
                                  const c10::Device& device);

/// --resident auto's rule: a store of `store_bytes` is held on a device with `free_bytes` free
/// (after the model is there; -1: unknown) when it takes at most half of them. The other half is
/// the step's margin: its activations, gradients and the allocator's cache grow after start-up.
bool resident_fits(std::int64_t store_bytes, std::int64_t free_bytes);

/// The run's batches from `loader` (configured by configure_loader for the path --input `input`
/// takes on `device`: use_device_input), with their images on `device`. Call once the model is
/// on the device: on the device input path it decides here (`resident`) whether every image of
/// the store is held on the device (ResidentImages), then reads them all and switches the loader
/// to boxes only; auto holds them on CUDA when resident_fits on every rank. Collective over
/// `host` (every rank holds its own copy). Throws pets::UsageError on every rank when `resident`
/// is refused on this path (resident_path_refusal), when `--resident on` does not fit on one
/// rank, or when a read of the store finds damaged pixels.
std::unique_ptr<InputPipeline> make_input_pipeline(data::Loader& loader, const c10::Device& device,
                                                   InputChoice input, ResidentChoice resident,
                                                   comm::Communicator& host);

}  // namespace pets::train
