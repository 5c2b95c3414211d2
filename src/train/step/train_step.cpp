#include "pets/train/step/train_step.hpp"

#include <torch/torch.h>

#include "pets/comm/communicator.hpp"
#include "pets/data/loader.hpp"
#include "pets/model/folded.hpp"
#include "pets/model/resnet50d.hpp"
#include "pets/train/input/batch_tensors.hpp"
#include "pets/train/state/training_state.hpp"
#include "pets/train/step/adam.hpp"
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

StepSums::StepSums(int64_t weight_numel, int64_t bias_numel, const c10::Device& device)
    : weight_numel_(weight_numel),
      head_numel_(weight_numel + bias_numel),
      buffer_(
          torch::zeros({head_numel_ + 3}, torch::TensorOptions(torch::kFloat64).device(device))) {}

StepResult TrainStep::run(data::Batch& batch, const std::function<bool()>& stop_requested,
                          const model::FoldedBackbone* folded, const at::Tensor& images) {
  torch::nn::Linear& fc = model_.fc;
  const torch::Device device = fc->weight.device();
  const int64_t step = schedule_.step_count();
  // The gradients of the last step stay readable until the next one starts (PETS_DUMP_STEPS).
  adam_->zero_grad();
  torch::Tensor loss;
  if (batch.n > 0) {
    const torch::Tensor features =
        settings_.forward(model_, folded, images.defined() ? images : batch_images(batch, device));
    loss = torch::nn::functional::cross_entropy(
        model_.forward_head(features), batch_labels(batch, device),
        torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum));
    (scaler_ ? scaler_->scale_loss(loss) : loss).backward();
  }
  StepSums sums(fc->weight.numel(), fc->bias.numel(), device);
  if (batch.n > 0) {
    sums.weight_grad().copy_(fc->weight.grad().flatten());
    sums.bias_grad().copy_(fc->bias.grad());
    sums.loss().copy_(loss.detach());  // on the device: no wait for the forward pass
    sums.images().fill_(static_cast<double>(batch.n));
  }
  if (settings_.hooks.before_allreduce) settings_.hooks.before_allreduce(step);
  sums.stop().fill_(stop_requested() ? 1.0 : 0.0);
  comm_.allreduce_sum(sums.buffer());
  if (settings_.hooks.after_allreduce) settings_.hooks.after_allreduce(step, sums);
  // The step's one read of the device: the summed loss, the image count and the stop requests.
  const torch::Tensor totals = sums.totals().to(torch::kCPU);
  const double* total = totals.data_ptr<double>();
  // The gradient of the mean loss over the global batch: what one process holding all of it
  // computes, also when the last batch is split unevenly (empty on some ranks). Divided by a
  // host number: a divisor on the device can round differently on CUDA.
  const double global_n = total[1];
  {
    torch::NoGradGuard no_grad;
    // Tensors of their own, not views (zero_grad detaches them in place).
    fc->weight.mutable_grad() =
        (sums.weight_grad() / global_n).view_as(fc->weight).to(torch::kFloat32);
    fc->bias.mutable_grad() = (sums.bias_grad() / global_n).to(torch::kFloat32);
  }
  if (settings_.hooks.averaged) settings_.hooks.averaged(step, fc->weight.grad(), fc->bias.grad());
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
