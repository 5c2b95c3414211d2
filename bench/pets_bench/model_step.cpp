/// \file
/// pets_bench section 3: pets_train's training step alone, per precision, as images/s and as a
/// fraction of the roofline, and what a step adds on several ranks under --bn-mode train.

#include <sys/resource.h>
#include <torch/cuda.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "harness.hpp"
#include "pets/compat/torch.hpp"
#include "pets/data/loader.hpp"
#include "pets/model/folded.hpp"
#include "pets/train/device/cuda_parts.hpp"
#include "pets/train/options/options.hpp"
#include "pets/train/run/backend.hpp"
#include "pets/train/state/training_state.hpp"
#include "pets/train/step/batchnorm_sync.hpp"
#include "pets/train/step/train_step.hpp"
#include "pets/util/error.hpp"

namespace pets::bench {
namespace {

/// The trained backbones measured (--unfreeze): their name and first trained stage.
const std::pair<const char*, int> kUnfrozen[] = {{"layer4", 4}, {"all", 0}};

pets::train::MixedPrecision mixed_precision_of(const std::string& precision) {
  if (precision == "bf16") return pets::train::MixedPrecision::kBf16;
  if (precision == "fp16") return pets::train::MixedPrecision::kFp16;
  return pets::train::MixedPrecision::kNo;
}

/// --step-only's value: a precision of `c`'s device and an --unfreeze value, or nothing.
std::optional<std::pair<std::string, pets::train::Unfreeze>> parse_step_only(
    const Config& c, const std::string& value) {
  const auto dot = value.find('.');
  if (dot == std::string::npos) return std::nullopt;
  const std::string precision = value.substr(0, dot);
  const std::vector<std::string> known = precisions(c);
  if (std::find(known.begin(), known.end(), precision) == known.end()) return std::nullopt;
  using pets::train::Unfreeze;
  for (const Unfreeze u : {Unfreeze::kNone, Unfreeze::kLayer4, Unfreeze::kLayer3, Unfreeze::kLayer2,
                           Unfreeze::kLayer1, Unfreeze::kAll})
    if (pets::train::to_string(u) == value.substr(dot + 1)) return std::make_pair(precision, u);
  return std::nullopt;
}

/// The process's peak resident memory so far, KiB (getrusage's ru_maxrss; VmHWM).
long peak_rss_kib() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_maxrss;
}

double seconds_between(Clock::time_point from, Clock::time_point to) {
  return std::chrono::duration<double>(to - from).count();
}

// A step's random images and labels: NHWC as the loader delivers them, seen as a channels-last
// NCHW tensor (the trainer's batch_images), which the model takes as it is, no conversion.
struct RandomBatch {
  torch::Tensor pixels;
  torch::Tensor labels;
  pets::data::Batch batch;
};

RandomBatch random_batch(const Config& c, c10::Device device) {
  auto pixels =
      torch::randn({c.batch, c.image_size, c.image_size, 3}).to(device).permute({0, 3, 1, 2});
  PETS_CHECK(pixels.is_contiguous(torch::MemoryFormat::ChannelsLast), "model step: not NHWC");
  pets::data::Batch batch;
  batch.n = c.batch;
  batch.h = batch.w = c.image_size;
  const auto labels = torch::randint(0, c.classes, {c.batch}, torch::kInt64);
  batch.labels.assign(labels.data_ptr<int64_t>(), labels.data_ptr<int64_t>() + c.batch);
  return {pixels, labels, std::move(batch)};
}

}  // namespace

bool known_step_only(const Config& c, const std::string& value) {
  return parse_step_only(c, value).has_value();
}

json model_step_only(pets::model::ResNet50d& model, const Config& c,
                     const pets::comm::MpiComm& mpi) {
  const auto parsed = parse_step_only(c, c.step_only);
  PETS_CHECK(parsed.has_value(), "--step-only: no such configuration: " + c.step_only);
  const std::string precision = parsed->first;
  const pets::train::Unfreeze unfreeze = parsed->second;
  constexpr int kStages = pets::model::ResNet50dImpl::kStages;
  const int first_stage = pets::train::first_trained_stage(unfreeze);
  const bool trains_backbone = first_stage < kStages;
  pets::train::TrainOptions options;
  options.device = on_cuda(c) ? pets::train::DeviceChoice::kCuda : pets::train::DeviceChoice::kCpu;
  options.mixed_precision = mixed_precision_of(precision);
  const c10::Device device = pets::train::pick_device(options.device, mpi.local_rank());
  model->freeze_backbone();
  model->to(device);
  model->to_channels_last();
  model->set_backbone_training(c.bn_mode == "train");
  // --bn-mode eval folds a frozen backbone only, as pets_train does.
  std::optional<pets::model::FoldedBackbone> folded;
  if (c.bn_mode == "eval" && !trains_backbone) folded.emplace(*model);
  RandomBatch drawn = random_batch(c, device);
  const torch::Tensor& pixels = drawn.pixels;
  const torch::Tensor& labels = drawn.labels;
  pets::data::Batch& batch = drawn.batch;

  const std::unique_ptr<pets::train::Backend> backend = pets::train::make_backend(options, mpi);
  PETS_CHECK(backend->device() == device, "model step: the backend chose another device");
  pets::train::OneCycleOptions schedule;
  schedule.total_steps = int64_t{1} << 40;  // never reached: the steps are timed, not counted
  pets::train::StepSettings settings = backend->step_settings();
  if (trains_backbone) settings.backbone = pets::train::BackboneTraining{first_stage, 0.1};
  // The step's own phases, from its hooks (host clock; on the CPU the work is done when they run):
  // start -> before_allreduce: zero_grad, the forward, the loss, backward and the gradients'
  // copy into the allreduce buffers; -> averaged: the allreduce and the averaged gradients put
  // back; -> the end: Adam and the schedules.
  Clock::time_point before_allreduce, averaged;
  settings.hooks.before_allreduce = [&](int64_t) { before_allreduce = Clock::now(); };
  settings.hooks.averaged = [&](int64_t, const std::vector<at::Tensor>&) {
    averaged = Clock::now();
  };
  const long rss_before_step = peak_rss_kib();
  pets::train::TrainStep step(*model, backend->device_comm(), schedule, settings);
  if (trains_backbone) step.set_backbone_training(true);
  int64_t trained_parameters = model->fc->weight.numel() + model->fc->bias.numel();
  for (const auto& [name, p] : step.backbone_parameters()) trained_parameters += p.numel();

  bool timing = false;
  double forward_backward = 0, allreduce = 0, optimizer = 0;
  const auto call = [&] {
    const auto start = Clock::now();
    const pets::train::StepResult r = step.run(
        batch, [] { return false; }, folded ? &*folded : nullptr, pixels);
    const auto end = Clock::now();
    PETS_CHECK(std::isfinite(r.loss_sum), "model step: non-finite loss");
    if (!timing) return;
    forward_backward += seconds_between(start, before_allreduce);
    allreduce += seconds_between(before_allreduce, averaged);
    optimizer += seconds_between(averaged, end);
  };
  for (int i = 0; i < c.warmup; ++i) call();
  timing = true;
  const std::vector<double> times = time_calls(call, 0, c.min_iters, c.min_seconds);
  const long rss_after_steps = peak_rss_kib();
  const double per_step = mean(times);
  const auto n = static_cast<double>(times.size());
  json out = {{"step",
               "pets::train::TrainStep on make_backend's device, communicator and precision, one "
               "rank, alone in this process"},
              {"config", c.step_only},
              {"precision", precision},
              {"unfreeze", pets::train::to_string(unfreeze)},
              {"first_trained_stage", first_stage},
              {"device", c.device},
              {"batch", c.batch},
              {"image_size", c.image_size},
              {"bn_mode", c.bn_mode},
              {"folded_batchnorm", folded.has_value()},
              {"threads", torch::get_num_threads()},
              {"warmup", c.warmup},
              {"steps", times.size()},
              {"seconds_per_step", per_step},
              {"step_seconds", times},
              {"images_per_s", c.batch / per_step},
              {"trained_parameters", trained_parameters},
              {"maxrss_kib_before_step", rss_before_step},
              {"maxrss_kib", rss_after_steps}};
  if (device.is_cuda()) {
    // The device memory the step needs: the caching allocator's peaks (the model, the batch, the
    // kept activations, the gradients and their allreduce buffer, Adam's moments), as
    // bench/python_step.py reports PyTorch's on the GPU.
    const pets::train::MemoryPeaks peaks = pets::train::cuda_parts()->memory_peaks(device.index());
    out["cuda_peak_allocated_bytes"] = peaks.allocated;
    out["cuda_peak_reserved_bytes"] = peaks.reserved;
    return out;  // no phases: the hooks' host clock does not wait for the GPU
  }
  json phases = {{"forward_backward", forward_backward / n},
                 {"allreduce", allreduce / n},
                 {"optimizer", optimizer / n}};
  // --step-phases: the forward alone, as the step runs it, timed apart from the step after it
  // (as many calls, no warm-up: the step ran the same shapes): the frozen stages under no_grad,
  // then the trained ones with autograd (whose graph is dropped here), the pooling, fc and the
  // summed cross-entropy. Its time subtracted from forward_backward leaves backward, zero_grad
  // and the gradients' copies.
  std::optional<c10::ScalarType> autocast;
  if (precision == "bf16") autocast = torch::kBFloat16;
  const auto autocast_on = [&] {
    if (autocast) pets::compat::set_autocast(device.type(), true, *autocast);
  };
  const auto autocast_off = [&] {
    if (autocast) pets::compat::end_autocast(device.type());
  };
  const auto frozen_forward = [&] {
    torch::NoGradGuard no_grad;
    autocast_on();
    torch::Tensor x = model->forward_stages(pixels, 0, first_stage);
    autocast_off();
    return x;
  };
  const auto whole_forward = [&] {
    const torch::Tensor frozen = frozen_forward();
    autocast_on();
    const torch::Tensor features =
        pets::model::ResNet50dImpl::pool(model->forward_stages(frozen, first_stage, kStages))
            .to(torch::kFloat32);
    autocast_off();
    const torch::Tensor loss = torch::nn::functional::cross_entropy(
        model->forward_head(features), labels,
        torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum));
    PETS_CHECK(std::isfinite(loss.item<double>()), "model step: non-finite loss");
  };
  if (c.step_phases && !folded) {
    const int calls = static_cast<int>(times.size());
    phases["frozen_forward_alone"] = mean(time_calls(frozen_forward, 0, calls, 0.0));
    phases["forward_alone"] = mean(time_calls(whole_forward, 0, calls, 0.0));
  }
  out["phases_seconds"] = phases;
  return out;
}

/// pets_train's step itself: pets::train::TrainStep on the backend make_backend makes for
/// `--device` and `--mixed-precision` (its device, its communicator, its autocast and fp16's
/// loss scaling), one rank of `mpi`, on a batch already on the device. Everything of a step but
/// the loader: the backbone's forward, the head and the loss, backward, the allreduce, Adam.
json model_step(pets::model::ResNet50d& model, const Config& c, double step_gflop, const json& roof,
                const pets::comm::MpiComm& mpi) {
  pets::train::TrainOptions options;
  options.device = on_cuda(c) ? pets::train::DeviceChoice::kCuda : pets::train::DeviceChoice::kCpu;
  const c10::Device device = pets::train::pick_device(options.device, mpi.local_rank());
  model->freeze_backbone();
  model->to(device);
  model->to_channels_last();
  model->set_backbone_training(c.bn_mode == "train");
  // --bn-mode eval: the folded backbone, as pets_train runs it.
  std::optional<pets::model::FoldedBackbone> folded;
  if (c.bn_mode == "eval") folded.emplace(*model);
  RandomBatch drawn = random_batch(c, device);
  const torch::Tensor& pixels = drawn.pixels;
  pets::data::Batch& batch = drawn.batch;
  json out = {{"step",
               "pets::train::TrainStep on make_backend's device, communicator and "
               "precision, one rank"},
              {"device", c.device},
              {"batch", c.batch},
              {"image_size", c.image_size},
              {"bn_mode", c.bn_mode},
              {"folded_batchnorm", folded.has_value()},
              {"threads", torch::get_num_threads()}};
  for (const std::string& precision : precisions(c)) {
    options.mixed_precision = mixed_precision_of(precision);
    const std::unique_ptr<pets::train::Backend> backend = pets::train::make_backend(options, mpi);
    PETS_CHECK(backend->device() == device, "model step: the backend chose another device");
    pets::train::OneCycleOptions schedule;
    schedule.total_steps = int64_t{1} << 40;  // never reached: the steps are timed, not counted
    pets::train::TrainStep train_step(*model, backend->device_comm(), schedule,
                                      backend->step_settings());
    int64_t skipped = 0;
    auto step = [&] {
      // The step's read of its totals waits for the device: its time includes all of its work.
      const pets::train::StepResult result = train_step.run(
          batch, [] { return false; }, folded ? &*folded : nullptr, pixels);
      PETS_CHECK(std::isfinite(result.loss_sum), "model step: non-finite loss");
      skipped += result.skipped ? 1 : 0;
    };
    const auto times = time_calls(step, c.warmup, c.min_iters, c.min_seconds);
    const double per_step = mean(times);
    const double ips = c.batch / per_step;
    const double roof_gflops = roof.at(precision).at("gflops").get<double>();
    out[precision] = {
        {"images_per_s", ips},
        {"seconds_per_step", per_step},
        {"best_images_per_s", c.batch / *std::min_element(times.begin(), times.end())},
        {"steps", times.size()},
        {"achieved_gflops", ips * step_gflop},
        {"roofline_images_per_s", roof_gflops / step_gflop},
        {"roofline_fraction", ips * step_gflop / roof_gflops}};
    // How often one step makes the host wait for the GPU (each wait idles it while the host
    // queues the next work): 1 in fp32 and bf16, 2 in fp16, as test_step_waits.cpp holds it.
    if (const pets::train::CudaParts* cuda = pets::train::cuda_parts(); cuda && device.is_cuda())
      out[precision]["device_waits_per_step"] = cuda->device_waits(step);
    if (const pets::train::GradScaler* scaler = train_step.scaler()) {
      out[precision]["loss_scale"] = scaler->scale();
      out[precision]["skipped_steps"] = skipped;
    }
    // A sweep of kSweepHeads heads (--max-lr with as many values) over the same backbone pass:
    // its step time over the single head's, the share of a step each head adds, and the bytes
    // the step hands to its collectives with 1 head and with kSweepHeads.
    constexpr int kSweepHeads = 8;
    const std::vector<pets::train::OneCycleOptions> schedules(kSweepHeads, schedule);
    pets::train::TrainStep sweep_step(*model, backend->device_comm(), schedules,
                                      backend->step_settings());
    const auto bytes_of = [&](pets::train::TrainStep& s) {
      const pets::comm::Traffic before = backend->device_comm().traffic();
      s.run(
          batch, [] { return false; }, folded ? &*folded : nullptr, pixels);
      return backend->device_comm().traffic().since(before).bytes;
    };
    const auto sweep_times = time_calls(
        [&] {
          sweep_step.run(
              batch, [] { return false; }, folded ? &*folded : nullptr, pixels);
        },
        c.warmup, c.min_iters, c.min_seconds);
    const double sweep_per_step = mean(sweep_times);
    out[precision]["sweep"] = {
        {"heads", kSweepHeads},
        {"seconds_per_step", sweep_per_step},
        {"over_one_head", sweep_per_step / per_step},
        {"share_per_added_head", (sweep_per_step - per_step) / per_step / (kSweepHeads - 1)},
        {"bytes_per_step_one_head", bytes_of(train_step)},
        {"bytes_per_step", bytes_of(sweep_step)}};
    // --unfreeze layer4 and all: the trained backbone's step (its stages through autograd, their
    // fp32 gradients' allreduce, Adam per group; never folded) against the frozen one's, and the
    // bytes it hands to its collectives. The model trains meanwhile, which changes no step's cost.
    for (const auto& [name, first_stage] : kUnfrozen) {
      pets::train::StepSettings settings = backend->step_settings();
      settings.backbone = pets::train::BackboneTraining{first_stage, 0.1};
      pets::train::TrainStep unfrozen(*model, backend->device_comm(), schedule, settings);
      unfrozen.set_backbone_training(true);
      const auto unfrozen_times = time_calls(
          [&] {
            const pets::train::StepResult r = unfrozen.run(
                batch, [] { return false; }, nullptr, pixels);
            PETS_CHECK(std::isfinite(r.loss_sum), "model step: non-finite loss");
          },
          c.warmup, c.min_iters, c.min_seconds);
      const double unfrozen_per_step = mean(unfrozen_times);
      out[precision]["unfreeze"][name] = {{"images_per_s", c.batch / unfrozen_per_step},
                                          {"seconds_per_step", unfrozen_per_step},
                                          {"over_frozen", unfrozen_per_step / per_step},
                                          {"steps", unfrozen_times.size()},
                                          {"bytes_per_step", bytes_of(unfrozen)}};
      unfrozen.set_backbone_training(false);  // the backbone frozen again for what follows
    }
  }
  // What each step adds for a stop: every rank keeps a copy of the state after the step (the
  // trainer's state_after_step). Rank 0 copies the checkpoint's (fc, Adam's moments, every
  // buffer: TrainingState::cloned); another rank under --bn-mode train only its shard's, its
  // BatchNorm statistics (TrainingState::shard_part), where it copied the whole state before.
  // Microseconds per call, the device's work included, with one head and with a sweep's 8.
  {
    options.mixed_precision = pets::train::MixedPrecision::kNo;
    const std::unique_ptr<pets::train::Backend> backend = pets::train::make_backend(options, mpi);
    const pets::train::BatchNormSync batchnorm(*model, mpi, backend->device_comm(), true);
    pets::train::OneCycleOptions schedule;
    schedule.total_steps = 1;
    const auto time_copy = [&](const std::function<pets::train::TrainingState()>& copy) {
      const auto call = [&] {
        const pets::train::TrainingState kept = copy();
        if (device.is_cuda()) torch::cuda::synchronize();
        PETS_CHECK(!kept.model.empty(), "model step: no state to keep");
      };
      return 1e6 * mean(time_calls(call, c.warmup, c.min_iters, std::min(c.min_seconds, 1.0)));
    };
    for (const int heads : {1, 8}) {
      const pets::train::TrainStep train_step(
          *model, backend->device_comm(),
          std::vector<pets::train::OneCycleOptions>(heads, schedule), backend->step_settings());
      pets::train::TrainingState state;
      state.position.step = 1;
      train_step.save(state);
      batchnorm.save(state);
      // What BatchNormSync::save marks mid-epoch at several ranks (this world has one).
      state.rank_shards = true;
      for (const auto& b : model->named_buffers(true)) state.per_rank.push_back(b.key());
      const std::string suffix = heads == 1 ? "" : "_8_heads";
      out["stop_commit_us" + suffix] = time_copy([&] { return state.cloned(); });
      out["stop_commit_other_rank_us" + suffix] = time_copy([&] { return state.shard_part(); });
    }
    // Rank 0's copy with a trained backbone (--unfreeze): the trainer's (TrainStep::copy_for_stop,
    // which leaves the backbone's parameters and moments to the stop), and the whole copy it
    // made before (cloned).
    for (const auto& [name, first_stage] : kUnfrozen) {
      pets::train::StepSettings settings = backend->step_settings();
      settings.backbone = pets::train::BackboneTraining{first_stage, 0.1};
      const pets::train::TrainStep train_step(*model, backend->device_comm(), schedule, settings);
      pets::train::TrainingState state;
      state.position.step = 1;
      train_step.save(state);
      batchnorm.save(state);
      out[std::string("stop_commit_us_") + name] =
          time_copy([&] { return train_step.copy_for_stop(state); });
      out[std::string("stop_commit_full_copy_us_") + name] =
          time_copy([&] { return state.cloned(); });
      int64_t bytes = 0;
      for (const auto& [key, t] : state.tensors()) bytes += t.numel() * t.element_size();
      out[std::string("checkpoint_tensor_bytes_") + name] = bytes;
    }
  }
  return out;
}

}  // namespace pets::bench
