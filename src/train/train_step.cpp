#include "pets/train/train_step.hpp"

#include <torch/torch.h>

#include <chrono>
#include <cstdio>
#include <thread>

#include "pets/comm/communicator.hpp"
#include "pets/data/loader.hpp"
#include "pets/model/folded.hpp"
#include "pets/model/resnet50d.hpp"
#include "pets/train/adam.hpp"
#include "pets/train/batch_tensors.hpp"
#include "pets/train/training_state.hpp"
#include "pets/train/verify_ranks.hpp"
#include "pets/util/error.hpp"

namespace pets::train {

TrainStep::TrainStep(model::ResNet50dImpl& model, comm::Communicator& comm,
                     const OneCycleOptions& schedule, StepSettings settings)
    : model_(model),
      comm_(comm),
      settings_(settings),
      adam_(std::make_unique<Adam>(std::vector<torch::Tensor>{model.fc->weight, model.fc->bias})),
      schedule_(schedule) {
  if (settings_.loss_scaling) scaler_.emplace(*settings_.loss_scaling);
}

TrainStep::~TrainStep() = default;

StepResult TrainStep::run(data::Batch& batch, const std::function<bool()>& stop_requested,
                          const model::FoldedBackbone* folded, const at::Tensor& images) {
  torch::nn::Linear& fc = model_.fc;
  const torch::Device device = fc->weight.device();
  const int64_t weight_numel = fc->weight.numel();
  const int64_t head_numel = weight_numel + fc->bias.numel();
  // The gradients of the last step stay readable until the next one starts (PETS_DUMP_STEPS).
  adam_->zero_grad();
  // [fc.weight grad, fc.bias grad, loss sum, images, stop requests, every rank's rank_state
  // (each rank fills its own row, the others are zeros: the sum is exact)]: one allreduce.
  torch::Tensor loss;
  if (batch.n > 0) {
    const torch::Tensor features =
        settings_.forward(model_, folded, images.defined() ? images : batch_images(batch, device));
    loss = torch::nn::functional::cross_entropy(
        model_.forward_head(features), batch_labels(batch, device),
        torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum));
    (scaler_ ? scaler_->scale_loss(loss) : loss).backward();
  }
  const torch::Tensor mine = settings_.rank_state ? settings_.rank_state() : torch::Tensor();
  const int64_t state_numel = mine.defined() ? mine.numel() : 0;
  torch::Tensor reduced = torch::zeros({head_numel + 3 + comm_.size() * state_numel},
                                       torch::TensorOptions(torch::kFloat64).device(device));
  if (batch.n > 0) {
    reduced.narrow(0, 0, weight_numel).copy_(fc->weight.grad().flatten());
    reduced.narrow(0, weight_numel, head_numel - weight_numel).copy_(fc->bias.grad());
    reduced[head_numel].copy_(loss.detach());  // on the device: no wait for the forward pass
    reduced[head_numel + 1] = static_cast<double>(batch.n);
  }
  if (state_numel > 0)
    reduced.narrow(0, head_numel + 3 + comm_.rank() * state_numel, state_numel).copy_(mine);
  if (settings_.pause && settings_.pause->step == schedule_.step_count() && comm_.rank() == 0) {
    std::fprintf(stderr, "pausing in step %lld (test switch, %.1f s)\n",
                 static_cast<long long>(settings_.pause->step), settings_.pause->seconds);
    std::fflush(stderr);
    std::this_thread::sleep_for(std::chrono::duration<double>(settings_.pause->seconds));
  }
  reduced[head_numel + 2] = stop_requested() ? 1.0 : 0.0;
  const bool skew = inject_fault(settings_.fault, comm_.rank(), schedule_.step_count());
  comm_.allreduce_sum(reduced);
  if (skew) reduced[0] += 1.0;
  // The step's one read of the device: the summed loss, the image count and the stop requests.
  const torch::Tensor totals = reduced.narrow(0, head_numel, 3).to(torch::kCPU);
  const double* total = totals.data_ptr<double>();
  // The gradient of the mean loss over the global batch: what one process holding all of it
  // computes, also when the last batch is split unevenly (or empty on some ranks). Divided by a
  // host number: a divisor on the device can round differently on CUDA.
  const double global_n = total[1];
  {
    torch::NoGradGuard no_grad;
    const torch::Tensor grads = (reduced.narrow(0, 0, head_numel) / global_n).to(torch::kFloat32);
    fc->weight.mutable_grad() =
        grads.narrow(0, 0, weight_numel).view_as(fc->weight).to(device, false, true);
    fc->bias.mutable_grad() =
        grads.narrow(0, weight_numel, head_numel - weight_numel).to(device, false, true);
  }
  if (settings_.verify) {
    check_same_on_all_ranks(
        *settings_.verify, comm::tensors_digest({fc->weight.grad(), fc->bias.grad()}),
        "the averaged gradients at step " + std::to_string(schedule_.step_count()));
    ++verified_;
  }
  StepResult result;
  result.loss_sum = total[0];
  result.images = static_cast<int64_t>(global_n);
  result.lr = schedule_.lr();
  last_lr_ = result.lr;
  // fp16: the summed gradients are the same on every rank, so all skip (or step) together. As
  // Accelerate, a skipped optimiser step also leaves the schedule where it is.
  result.skipped = scaler_ && !scaler_->unscale({fc->weight.grad(), fc->bias.grad()});
  if (!result.skipped) {
    adam_->step(schedule_.lr(), schedule_.beta1());
    schedule_.step();
  }
  if (scaler_) scaler_->update(result.skipped);
  result.stop = total[2] > 0.0;
  if (state_numel > 0)
    result.rank_states =
        reduced.narrow(0, head_numel + 3, comm_.size() * state_numel).view({comm_.size(), -1});
  return result;
}

void TrainStep::save(TrainingState& state) const {
  for (const auto& p : model_.fc->named_parameters())
    state.model.emplace_back("fc." + p.key(), p.value());
  state.adam_steps = adam_->steps();
  state.adam_exp_avg = adam_->exp_avg();
  state.adam_exp_avg_sq = adam_->exp_avg_sq();
  state.schedule_steps = schedule_.step_count();
  state.schedule_steps_per_update = schedule_.options().steps_per_update;
  state.last_lr = last_lr_;
  if (scaler_) state.grad_scaler = GradScalerState{scaler_->scale(), scaler_->growth_tracker()};
}

void TrainStep::restore(const TrainingState& state, int64_t schedule_steps,
                        const std::string& path) {
  TrainingState::Tensors head;
  for (const auto& p : model_.fc->named_parameters()) head.emplace_back("fc." + p.key(), p.value());
  state.restore_model_tensors(head, path);
  if (state.adam_exp_avg.size() != adam_->exp_avg().size())
    throw UsageError(path + ": Adam moments of " + std::to_string(state.adam_exp_avg.size()) +
                     " tensors, the head has " + std::to_string(adam_->exp_avg().size()));
  const torch::Device device = model_.fc->weight.device();
  std::vector<torch::Tensor> m, v;
  for (std::size_t i = 0; i < state.adam_exp_avg.size(); ++i) {
    m.push_back(state.adam_exp_avg[i].to(device));
    v.push_back(state.adam_exp_avg_sq[i].to(device));
  }
  adam_->restore(m, v, state.adam_steps);
  if (scaler_ && state.grad_scaler)
    scaler_->restore(state.grad_scaler->scale, state.grad_scaler->growth_tracker);
  last_lr_ = state.last_lr;
  schedule_.set_step_count(schedule_steps);
}

}  // namespace pets::train
