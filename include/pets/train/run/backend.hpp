#pragma once
/// \file
/// Every device and precision decision of a run, made once from the options by make_backend:
/// the device (--device), the communicator of its tensors (NCCL on CUDA, else MPI), where the
/// input images are made (--input: the loader's staging and the InputPipeline), the backbone's
/// autocast and its forward (--mixed-precision, with fp16's loss scaling). The CUDA parts come
/// from sources CMake compiles only in CUDA builds (pets/train/device/cuda_parts.hpp); callers
/// never test the build.

#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>
#include <c10/util/Exception.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "pets/comm/communicator.hpp"
#include "pets/train/options/debug_switches.hpp"
#include "pets/train/options/options.hpp"
#include "pets/train/step/backbone_forward.hpp"
#include "pets/train/step/train_step.hpp"
#include "pets/util/error.hpp"

namespace pets::data {
struct LoaderOptions;
}  // namespace pets::data

namespace pets::train {

/// The checks that need to know the machine: `--device cuda` or `--mixed-precision fp16` when
/// no CUDA device can be used (fp16 with `--device cpu` included), given the CUDA devices found
/// (0 on a CPU build). Throws pets::UsageError.
void check_devices(const TrainOptions& options, int cuda_device_count);

/// --device: CUDA device local_rank % count when asked for or (auto) present, else the CPU.
c10::Device pick_device(DeviceChoice choice, int local_rank, int cuda_device_count);
/// The same with this process's CUDA devices, for a program whose only device option is --device
/// (pets_predict): `--device cuda` without one throws pets::UsageError, as check_devices does.
c10::Device pick_device(DeviceChoice choice, int local_rank);

/// --deterministic: LibTorch's deterministic algorithms only (an operator without one is refused
/// with LibTorch's error), cuDNN's deterministic ones without autotuning, cuBLAS's fixed workspace
/// (CUBLAS_WORKSPACE_CONFIG, unless already set). Process-wide; call before the first CUDA work.
void use_deterministic_algorithms();

/// The backbone's autocast under `precision`: bf16 or fp16, nothing for `no`.
std::optional<c10::ScalarType> autocast_dtype(MixedPrecision precision);

/// One run's device, communicators, input path and precision.
class Backend {
 public:
  Backend(const Backend&) = delete;
  Backend& operator=(const Backend&) = delete;
  ~Backend();

  const c10::Device& device() const { return device_; }
  /// The device as the start-up line names it: "cpu", or "cuda" and the GPU's name.
  std::string device_text() const;
  /// MPI: host tensors and counters (start-up broadcast, evaluation counts, rank checks).
  comm::Communicator& host_comm() { return host_; }
  /// The collectives on device() tensors (the step's allreduce, the BatchNorm sync): NCCL on a
  /// GPU where the build has it, else host_comm().
  comm::Communicator& device_comm() { return device_comm_ ? *device_comm_ : host_; }

  /// The backbone's forward with the run's autocast (the step's and the evaluation's).
  const BackboneForward& forward() const { return forward_; }
  /// The step's precision: forward() and, under fp16, dynamic loss scaling.
  StepSettings step_settings() const;

  /// Whether the loader only stages crops, resized and normalised on device() (--input).
  bool device_input() const { return device_input_; }
  /// Sets the loader's output for the input path; call before the Loader is made.
  void configure_loader(data::LoaderOptions& options) const;

  /// Whether warm_up() runs: on a GPU, unless PETS_NO_WARM_UP. On the CPU first calls set up
  /// little against a step's seconds.
  bool warms_up() const { return warm_up_ && device_.is_cuda(); }
  /// Before the first epoch, where warms_up(): warm_up_forward with forward() for the batch
  /// sizes this rank's steps or evaluation batches take (`batch_sizes`), `model` in the mode and
  /// `folded` as they run them, so that the first epoch runs as fast as the later ones.
  void warm_up(model::ResNet50dImpl& model, const model::FoldedBackbone* folded,
               const std::vector<int64_t>& batch_sizes, int64_t image_size) const;

  /// Lines for the user about the choices (on rank 0's terminal).
  std::vector<std::string> notices() const;

  /// Runs `work` (a training step, an evaluation), whose size option `option` (its key,
  /// kBatchSizeKey) is `value`; when
  /// it runs out of device memory, throws instead a pets::UsageError of one line
  /// (out_of_memory_text) rather than LibTorch's report.
  template <class Work>
  auto fitting(const std::string& option, long long value, Work&& work) const -> decltype(work()) {
    try {
      return work();
    } catch (const c10::OutOfMemoryError& e) {
      throw UsageError(out_of_memory_text(option, value, e.what()));
    }
  }
  /// "--batch-size 4096 does not fit in the memory of cuda:0 (NVIDIA H200): 2.00 GiB more were
  /// asked for with 1.20 GiB of 139.81 GiB free; lower --batch-size", from LibTorch's
  /// out-of-memory message `report` and (on CUDA) the device's memory once the cache is freed.
  std::string out_of_memory_text(const std::string& option, long long value,
                                 const std::string& report) const;

 private:
  friend std::unique_ptr<Backend> make_backend(const TrainOptions& options,
                                               const comm::MpiComm& mpi,
                                               const DebugSwitches& switches);
  Backend(const TrainOptions& options, const comm::MpiComm& mpi, const DebugSwitches& switches);

  c10::Device device_;
  comm::MpiCommunicator host_;
  std::unique_ptr<comm::Communicator> device_comm_;  ///< null: host_
  BackboneForward forward_;
  bool loss_scaling_;
  bool device_input_;
  bool deterministic_;
  bool warm_up_;  ///< on a GPU, unless PETS_NO_WARM_UP
};

/// The backend of a run with `options` on this rank of `mpi` (which must outlive it): checks the
/// options against the CUDA devices (check_devices), takes the device of the node-local rank and
/// makes its communicator (collective over `mpi` on CUDA); on CUDA the backbone in train mode
/// runs the fused BatchNorm kernel unless `switches` ask for LibTorch's (PETS_NATIVE_BATCHNORM).
/// Throws pets::UsageError (the same on every rank) when the options ask for what the machine
/// lacks.
std::unique_ptr<Backend> make_backend(const TrainOptions& options, const comm::MpiComm& mpi,
                                      const DebugSwitches& switches = DebugSwitches{});

}  // namespace pets::train
