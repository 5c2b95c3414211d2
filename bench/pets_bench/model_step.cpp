/// \file
/// pets_bench section 3: pets_train's training step alone, per precision, as images/s and as a
/// fraction of the roofline, and what a step adds on several ranks under --bn-mode train.

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

}  // namespace

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
  // NHWC as the loader delivers it, seen as a channels-last NCHW tensor (the trainer's
  // batch_images): the model takes it as it is, no conversion.
  const auto pixels =
      torch::randn({c.batch, c.image_size, c.image_size, 3}).to(device).permute({0, 3, 1, 2});
  PETS_CHECK(pixels.is_contiguous(torch::MemoryFormat::ChannelsLast), "model step: not NHWC");
  pets::data::Batch batch;
  batch.n = c.batch;
  batch.h = batch.w = c.image_size;
  const auto labels = torch::randint(0, c.classes, {c.batch}, torch::kInt64);
  batch.labels.assign(labels.data_ptr<int64_t>(), labels.data_ptr<int64_t>() + c.batch);
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
