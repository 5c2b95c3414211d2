#include "pets/train/run/backend.hpp"

#include <torch/torch.h>

#include <cstdlib>
#include <regex>

#include "pets/comm/mpi_comm.hpp"
#include "pets/data/loader.hpp"
#include "pets/train/device/cuda_parts.hpp"
#include "pets/train/device/device_name.hpp"
#include "pets/train/input/input_pipeline.hpp"
#include "pets/util/error.hpp"

namespace pets::train {
namespace {

[[noreturn]] void usage(const std::string& message) { throw UsageError(message); }

const char* const kNoCudaDevice = "--device cuda: no CUDA device is available to this build";

/// Staging for a CUDA device is page-locked, so that its upload runs without blocking the host.
bool pinned_for(const c10::Device& device) { return device.is_cuda(); }

}  // namespace

void check_devices(const TrainOptions& options, int cuda_device_count) {
  const bool fp16 = options.mixed_precision == MixedPrecision::kFp16;
  if (fp16 && options.device == DeviceChoice::kCpu)
    usage("--mixed-precision fp16 runs on CUDA only, not with --device cpu; use bf16 or no");
  if (cuda_device_count > 0) return;
  if (options.device == DeviceChoice::kCuda) usage(kNoCudaDevice);
  if (fp16)
    usage("--mixed-precision fp16 needs a CUDA device and none is available; use bf16 or no");
}

c10::Device pick_device(DeviceChoice choice, int local_rank, int cuda_device_count) {
  if (choice == DeviceChoice::kCpu || cuda_device_count == 0) return c10::kCPU;
  return {c10::kCUDA, static_cast<c10::DeviceIndex>(local_rank % cuda_device_count)};
}

c10::Device pick_device(DeviceChoice choice, int local_rank) {
  const int count = static_cast<int>(torch::cuda::device_count());
  if (choice == DeviceChoice::kCuda && count == 0) usage(kNoCudaDevice);
  return pick_device(choice, local_rank, count);
}

void use_deterministic_algorithms() {
  // cuBLAS reduces in a fixed order only with a fixed workspace, set before its first handle
  // (LibTorch refuses cuBLAS calls under deterministic algorithms without it). A value the user
  // set is kept.
  ::setenv("CUBLAS_WORKSPACE_CONFIG", ":4096:8", /*overwrite=*/0);
  at::globalContext().setBenchmarkCuDNN(false);
  at::globalContext().setDeterministicCuDNN(true);
  at::globalContext().setDeterministicAlgorithms(true, /*warn_only=*/false);
}

std::optional<c10::ScalarType> autocast_dtype(MixedPrecision precision) {
  switch (precision) {
    case MixedPrecision::kNo:
      return std::nullopt;
    case MixedPrecision::kBf16:
      return c10::ScalarType::BFloat16;
    case MixedPrecision::kFp16:
      return c10::ScalarType::Half;
  }
  return std::nullopt;
}

Backend::Backend(const TrainOptions& options, const comm::MpiComm& mpi,
                 const DebugSwitches& switches)
    : device_(c10::kCPU),
      host_(mpi),
      forward_(autocast_dtype(options.mixed_precision)),
      // fp16 only: bf16 has fp32's range and needs no loss scaling.
      loss_scaling_(options.mixed_precision == MixedPrecision::kFp16),
      device_input_(false),
      deterministic_(options.deterministic),
      warm_up_(!switches.no_warm_up) {
  if (deterministic_) use_deterministic_algorithms();
  const int count = static_cast<int>(torch::cuda::device_count());
  check_devices(options, count);
  device_ = pick_device(options.device, mpi.local_rank(), count);
  if (device_.is_cuda()) {
    const CudaParts* cuda = cuda_parts();
    PETS_CHECK(cuda != nullptr, "a CUDA device in a build without CUDA");
    device_comm_ = cuda->device_comm(mpi, device_.index());
    forward_ =
        BackboneForward(forward_.autocast(),
                        switches.native_batchnorm ? NormAfterConv{} : fused_norm_after_conv(*cuda),
                        switches.native_conv ? model::FoldedBackbone::ConvRun{}
                                             : fused_folded_conv(*cuda, forward_.autocast()));
  }
  device_input_ = use_device_input(options.input, device_);
  // Now that the device is known, and before any data are read.
  if (const std::string refusal = resident_path_refusal(options.resident, options.input, device_);
      !refusal.empty())
    usage(refusal);
}

Backend::~Backend() = default;

std::string Backend::device_text() const {
  if (!device_.is_cuda()) return device_.str();
  const std::string name = cuda_parts()->device_name(device_.index());
  return name.empty() ? std::string("cuda") : "cuda " + name;
}

StepSettings Backend::step_settings() const {
  StepSettings settings;
  settings.forward = forward_;
  if (loss_scaling_) settings.loss_scaling.emplace();
  return settings;
}

void Backend::configure_loader(data::LoaderOptions& options) const {
  train::configure_loader(options, device_input_, pinned_for(device_));
}

void Backend::warm_up(model::ResNet50dImpl& model, const model::FoldedBackbone* folded,
                      const std::vector<int64_t>& batch_sizes, int64_t image_size) const {
  if (warms_up()) warm_up_forward(forward_, model, folded, batch_sizes, image_size, device_);
}

std::vector<std::string> Backend::notices() const {
  std::vector<std::string> out;
  if (device_input_) out.push_back("input: crops resized and normalised on " + device_.str());
  if (deterministic_)
    out.push_back(
        "deterministic algorithms only (--deterministic): the same model bit for bit "
        "run to run on the same device");
  if (device_.is_cuda() && forward_.fused_train_norm())
    out.push_back(
        "BatchNorm in train mode: one fused kernel each (with its ReLU and residual "
        "add) on " +
        device_.str());
  if (device_.is_cuda() && forward_.fused_folded_conv())
    out.push_back(
        "folded BatchNorm (--bn-mode eval, evaluation): cuDNN's fused convolution, "
        "bias, add and ReLU on " +
        device_.str());
  if (device_.is_cuda())
    out.push_back("device: " + device_.str() + " on rank 0 (collectives: " +
                  (device_comm_ ? device_comm_->backend() : host_.backend()) +
                  "); every rank takes its local rank modulo the device count");
  return out;
}

std::string Backend::out_of_memory_text(const std::string& option, long long value,
                                        const std::string& report) const {
  std::string text = "--" + option + " " + std::to_string(value) +
                     " does not fit in the memory of " + device_with_name(device_);
  static const std::regex asked("Tried to allocate ([0-9.]+ ?[KMGT]?i?B)");
  std::smatch m;
  if (std::regex_search(report, m, asked)) text += ": " + m[1].str() + " more were asked for";
  if (device_.is_cuda()) {
    const std::string memory = cuda_parts()->memory_text(device_.index());
    if (!memory.empty()) text += std::string(m.empty() ? ": " : " with ") + memory;
  }
  return text + "; lower --" + option;
}

std::unique_ptr<Backend> make_backend(const TrainOptions& options, const comm::MpiComm& mpi,
                                      const DebugSwitches& switches) {
  return std::unique_ptr<Backend>(new Backend(options, mpi, switches));
}

}  // namespace pets::train
