#include "pets/train/step/train_step.hpp"

#include <torch/torch.h>

#include <unordered_set>

#include "pets/comm/communicator.hpp"
#include "pets/data/loader.hpp"
#include "pets/model/folded.hpp"
#include "pets/model/resnet50d.hpp"
#include "pets/train/input/batch_tensors.hpp"
#include "pets/train/state/training_state.hpp"
#include "pets/train/step/adam.hpp"
#include "pets/util/error.hpp"

namespace pets::train {

struct TrainStep::Head {
  Head(torch::Tensor w, torch::Tensor b, const OneCycleOptions& options,
       const std::optional<GradScalerOptions>& loss_scaling)
      : weight(std::move(w)),
        bias(std::move(b)),
        adam(std::make_unique<Adam>(std::vector<torch::Tensor>{weight, bias})),
        schedule(options) {
    if (loss_scaling) scaler.emplace(*loss_scaling);
  }

  torch::Tensor weight, bias;  ///< head 0: the model's fc's own
  std::unique_ptr<Adam> adam;
  OneCycleSchedule schedule;
  std::optional<GradScaler> scaler;
  double last_lr = 0.0;
};

namespace {

/// `head`'s schedule with its peak scaled by `ratio` (so its start and end too).
OneCycleOptions scaled_schedule(OneCycleOptions head, double ratio) {
  head.max_lr *= ratio;
  return head;
}

}  // namespace

struct TrainStep::Backbone {
  Backbone(model::ResNet50dImpl& model, const BackboneTraining& training,
           const OneCycleOptions& head_schedule)
      : first_stage(training.first_stage),
        parameters(model.stage_parameters(training.first_stage)),
        schedule(scaled_schedule(head_schedule, training.lr_ratio)) {
    std::vector<torch::Tensor> tensors;
    for (const auto& [name, p] : parameters) {
      tensors.push_back(p);
      numel += p.numel();
    }
    adam = std::make_unique<Adam>(std::move(tensors));
  }

  int first_stage;
  std::vector<std::pair<std::string, torch::Tensor>> parameters;
  int64_t numel = 0;
  std::unique_ptr<Adam> adam;  ///< its moments start at zero, its count at the first update
  OneCycleSchedule schedule;   ///< stepped with head 0's
  bool on = false;
  /// The step's allreduce buffer: every trained parameter's gradient, fp32, in `parameters` order.
  torch::Tensor sums;
};

namespace {

/// Head `k`'s names in a checkpoint's model tensors: fc's state-dict names for the first (as a
/// run of one head writes them), heads.<k>.weight and .bias for the others.
std::string head_tensor_name(int k, const std::string& parameter) {
  return k == 0 ? "fc." + parameter : "heads." + std::to_string(k) + "." + parameter;
}

}  // namespace

TrainStep::TrainStep(model::ResNet50dImpl& model, comm::Communicator& comm,
                     const OneCycleOptions& schedule, StepSettings settings)
    : TrainStep(model, comm, std::vector<OneCycleOptions>{schedule}, std::move(settings)) {}

TrainStep::TrainStep(model::ResNet50dImpl& model, comm::Communicator& comm,
                     const std::vector<OneCycleOptions>& schedules, StepSettings settings)
    : model_(model), comm_(comm), settings_(std::move(settings)) {
  PETS_CHECK(!schedules.empty(), "a training step needs at least one head");
  for (std::size_t k = 0; k < schedules.size(); ++k) {
    // The other heads start from fc's values as they are now: the run's initialisation. Copies
    // of the tensors, not of the module, whose construction would draw from the random generator.
    const auto copy = [k](const torch::Tensor& t) {
      return k == 0 ? t : t.detach().clone().set_requires_grad(true);
    };
    heads_.push_back(std::make_unique<Head>(copy(model.fc->weight), copy(model.fc->bias),
                                            schedules[k], settings_.loss_scaling));
  }
  if (settings_.backbone) {
    PETS_CHECK(schedules.size() == 1, "a trained backbone takes one head, not a sweep");
    backbone_ = std::make_unique<Backbone>(model, *settings_.backbone, schedules.front());
    PETS_CHECK(!backbone_->parameters.empty(), "--unfreeze names no backbone parameter");
  }
}

void TrainStep::set_backbone_training(bool on) {
  PETS_CHECK(backbone_ != nullptr || !on, "this step trains no backbone");
  if (!backbone_) return;
  backbone_->on = on;
  for (auto& [name, p] : backbone_->parameters) p.set_requires_grad(on);
}

bool TrainStep::trains_backbone() const { return backbone_ && backbone_->on; }

const std::vector<std::pair<std::string, at::Tensor>>& TrainStep::backbone_parameters() const {
  static const std::vector<std::pair<std::string, at::Tensor>> none;
  return backbone_ ? backbone_->parameters : none;
}

void TrainStep::average_backbone_gradients(double global_n) {
  torch::NoGradGuard no_grad;
  torch::Tensor& sums = backbone_->sums;
  // fp32 as DDP's allreduce: the sum's order is the algorithm's, fixed for a number of ranks.
  comm_.allreduce_sum(sums);
  sums.div_(global_n);
  int64_t offset = 0;
  for (auto& [name, p] : backbone_->parameters) {
    const torch::Tensor averaged = sums.narrow(0, offset, p.numel()).view(p.sizes());
    if (!p.grad().defined()) p.mutable_grad() = torch::empty_like(p);
    p.mutable_grad().copy_(averaged);  // in the gradient's own layout (channels-last weights)
    offset += p.numel();
  }
}

TrainStep::~TrainStep() = default;

Adam& TrainStep::adam(int head) { return *heads_.at(head)->adam; }

const Adam& TrainStep::adam(int head) const { return *heads_.at(head)->adam; }

OneCycleSchedule& TrainStep::schedule(int head) { return heads_.at(head)->schedule; }

const OneCycleSchedule& TrainStep::schedule(int head) const { return heads_.at(head)->schedule; }

double TrainStep::last_lr(int head) const { return heads_.at(head)->last_lr; }

GradScaler* TrainStep::scaler(int head) {
  auto& s = heads_.at(head)->scaler;
  return s ? &*s : nullptr;
}

const GradScaler* TrainStep::scaler(int head) const {
  const auto& s = heads_.at(head)->scaler;
  return s ? &*s : nullptr;
}

const at::Tensor& TrainStep::head_weight(int head) const { return heads_.at(head)->weight; }

const at::Tensor& TrainStep::head_bias(int head) const { return heads_.at(head)->bias; }

at::Tensor TrainStep::forward_head(int head, const at::Tensor& features) {
  // Head 0 through the model's own forward_head, as a run of one head computes it.
  if (head == 0) return model_.forward_head(features);
  const Head& h = *heads_.at(head);
  return torch::nn::functional::linear(features, h.weight, h.bias);  // as torch::nn::Linear
}

StepSums::StepSums(int64_t weight_numel, int64_t bias_numel, const c10::Device& device)
    : weight_numel_(weight_numel),
      head_numel_(weight_numel + bias_numel),
      buffer_(
          torch::zeros({head_numel_ + 3}, torch::TensorOptions(torch::kFloat64).device(device))) {}

StepResult TrainStep::run(data::Batch& batch, const std::function<bool()>& stop_requested,
                          const model::FoldedBackbone* folded, const at::Tensor& images) {
  const torch::nn::Linear& fc = model_.fc;
  const torch::Device device = fc->weight.device();
  const int n_heads = heads();
  const int64_t step = heads_[0]->schedule.step_count();
  // The gradients of the last step stay readable until the next one starts (PETS_DUMP_STEPS).
  for (auto& h : heads_) h->adam->zero_grad();
  const bool backbone_on = trains_backbone();
  PETS_CHECK(!(backbone_on && folded), "a trained backbone cannot run folded");
  if (backbone_on) {
    backbone_->adam->zero_grad();
    backbone_->sums = torch::zeros({backbone_->numel}, fc->weight.options());
  }
  std::vector<StepSums> sums;
  for (int k = 0; k < n_heads; ++k) sums.emplace_back(fc->weight.numel(), fc->bias.numel(), device);
  if (batch.n > 0) {
    // One backbone pass for every head: the features do not depend on the head.
    const torch::Tensor input = images.defined() ? images : batch_images(batch, device);
    const torch::Tensor features =
        backbone_on ? settings_.forward.trained(model_, input, backbone_->first_stage)
                    : settings_.forward(model_, folded, input);
    const torch::Tensor labels = batch_labels(batch, device);
    for (int k = 0; k < n_heads; ++k) {
      Head& h = *heads_[k];
      const torch::Tensor loss = torch::nn::functional::cross_entropy(
          forward_head(k, features), labels,
          torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum));
      (h.scaler ? h.scaler->scale_loss(loss) : loss).backward();
      sums[k].weight_grad().copy_(h.weight.grad().flatten());
      sums[k].bias_grad().copy_(h.bias.grad());
      sums[k].loss().copy_(loss.detach());  // on the device: no wait for the forward pass
      sums[k].images().fill_(static_cast<double>(batch.n));
    }
    if (backbone_on) {
      int64_t offset = 0;
      for (const auto& [name, p] : backbone_->parameters) {
        backbone_->sums.narrow(0, offset, p.numel()).view(p.sizes()).copy_(p.grad());
        offset += p.numel();
      }
    }
  }
  if (settings_.hooks.before_allreduce) settings_.hooks.before_allreduce(step);
  const double stop = stop_requested() ? 1.0 : 0.0;
  std::vector<torch::Tensor> totals_on_device;
  for (int k = 0; k < n_heads; ++k) {
    sums[k].stop().fill_(stop);
    comm_.allreduce_sum(sums[k].buffer());
    if (k == 0 && settings_.hooks.after_allreduce) settings_.hooks.after_allreduce(step, sums[k]);
    totals_on_device.push_back(sums[k].totals());
  }
  // The step's one read of the device: each head's summed loss, image count and stop requests.
  const torch::Tensor totals = torch::cat(totals_on_device).to(torch::kCPU);
  const double* total = totals.data_ptr<double>();
  // The gradient of the mean loss over the global batch: what one process holding all of it
  // computes. At several ranks every rank trains a full batch at every step (the loader completes
  // the epoch's last step with the first images of the epoch's order, as Accelerate's prepared
  // DataLoader does), so global_n is the batch size times the ranks; only at one rank can the
  // last batch be short. Divided by a host number: a divisor on the device can round
  // differently on CUDA.
  const double global_n = total[1];
  StepResult result;
  result.images = static_cast<int64_t>(global_n);
  result.stop = total[2] > 0.0;
  if (backbone_on) average_backbone_gradients(global_n);
  for (int k = 0; k < n_heads; ++k) {
    Head& h = *heads_[k];
    torch::NoGradGuard no_grad;
    // Tensors of their own, not views (zero_grad detaches them in place).
    h.weight.mutable_grad() =
        (sums[k].weight_grad() / global_n).view_as(h.weight).to(torch::kFloat32);
    h.bias.mutable_grad() = (sums[k].bias_grad() / global_n).to(torch::kFloat32);
  }
  if (settings_.hooks.averaged) {
    std::vector<torch::Tensor> grads;
    for (const auto& h : heads_) {
      grads.push_back(h->weight.grad());
      grads.push_back(h->bias.grad());
    }
    settings_.hooks.averaged(step, grads);
  }
  for (int k = 0; k < n_heads; ++k) {
    Head& h = *heads_[k];
    HeadStepResult r;
    r.loss_sum = total[3 * k];
    r.lr = h.schedule.lr();
    h.last_lr = r.lr;
    // fp16: the summed gradients are the same on every rank, so all skip (or step) together. As
    // Accelerate, a skipped optimiser step also leaves the schedule where it is. A trained
    // backbone's gradients are unscaled and checked with the head's (one optimiser).
    std::vector<torch::Tensor> grads{h.weight.grad(), h.bias.grad()};
    if (k == 0 && backbone_on)
      for (const auto& [name, p] : backbone_->parameters) grads.push_back(p.grad());
    r.skipped = h.scaler && !h.scaler->unscale(grads);
    if (k == 0 && backbone_) {
      result.backbone_lr = backbone_->schedule.lr();  // also before it trains, as PyTorch's group
      if (!r.skipped) {
        if (backbone_on) {
          const std::lock_guard<std::mutex> lock(update_mutex_);
          backbone_->adam->step(backbone_->schedule.lr(), backbone_->schedule.beta1());
        }
        backbone_->schedule.step();
      }
    }
    if (!r.skipped) {
      h.adam->step(h.schedule.lr(), h.schedule.beta1());
      h.schedule.step();
    }
    if (h.scaler) h.scaler->update(r.skipped);
    result.heads.push_back(r);
  }
  result.loss_sum = result.heads[0].loss_sum;
  result.lr = result.heads[0].lr;
  result.skipped = result.heads[0].skipped;
  return result;
}

void TrainStep::save(TrainingState& state) const {
  state.adam_exp_avg.clear();
  state.adam_exp_avg_sq.clear();
  state.more_heads.clear();
  for (int k = 0; k < heads(); ++k) {
    const Head& h = *heads_[k];
    state.model.emplace_back(head_tensor_name(k, "weight"), h.weight);
    state.model.emplace_back(head_tensor_name(k, "bias"), h.bias);
    for (const auto& m : h.adam->exp_avg()) state.adam_exp_avg.push_back(m);
    for (const auto& v : h.adam->exp_avg_sq()) state.adam_exp_avg_sq.push_back(v);
    HeadState s;
    s.adam_steps = h.adam->steps();
    s.schedule_steps = h.schedule.step_count();
    s.last_lr = h.last_lr;
    if (h.scaler) s.grad_scaler = GradScalerState{h.scaler->scale(), h.scaler->growth_tracker()};
    if (k == 0) {
      state.adam_steps = s.adam_steps;
      state.schedule_steps = s.schedule_steps;
      state.last_lr = s.last_lr;
      state.grad_scaler = s.grad_scaler;
    } else {
      state.more_heads.push_back(s);
    }
  }
  state.schedule_steps_per_update = heads_[0]->schedule.options().steps_per_update;
  state.backbone_adam_steps = 0;
  if (backbone_) {
    for (const auto& [name, p] : backbone_->parameters) state.model.emplace_back(name, p);
    for (const auto& m : backbone_->adam->exp_avg()) state.adam_exp_avg.push_back(m);
    for (const auto& v : backbone_->adam->exp_avg_sq()) state.adam_exp_avg_sq.push_back(v);
    state.backbone_adam_steps = backbone_->adam->steps();
  }
}

namespace {

using Storages = std::unordered_set<const void*>;

/// Whether `t` holds one of `live`'s storages.
bool is_live(const at::Tensor& t, const Storages& live) {
  return t.defined() && live.count(t.storage().unsafeGetStorageImpl()) != 0;
}

/// The storages of the trained backbone's parameters and, given its `adam`, of their moments:
/// what the next step updates in place.
Storages live_storages(const std::vector<std::pair<std::string, torch::Tensor>>& parameters,
                       const Adam* adam) {
  Storages live;
  for (const auto& [name, p] : parameters) live.insert(p.storage().unsafeGetStorageImpl());
  if (adam) {
    for (const auto& m : adam->exp_avg()) live.insert(m.storage().unsafeGetStorageImpl());
    for (const auto& v : adam->exp_avg_sq()) live.insert(v.storage().unsafeGetStorageImpl());
  }
  return live;
}

}  // namespace

TrainingState TrainStep::copy_for_stop(const TrainingState& state) const {
  const Storages live =
      backbone_ ? live_storages(backbone_->parameters, backbone_->adam.get()) : Storages{};
  const auto copy = [&](at::Tensor& t) {
    if (t.defined() && !is_live(t, live)) t = t.detach().clone();
  };
  TrainingState s = state;
  for (auto& [name, t] : s.model) copy(t);
  copy(s.rank_buffers);
  for (auto& t : s.adam_exp_avg) copy(t);
  for (auto& t : s.adam_exp_avg_sq) copy(t);
  return s;
}

std::optional<TrainingState> TrainStep::stable_copy(const TrainingState& state) const {
  if (!backbone_) return state;
  const Storages live = live_storages(backbone_->parameters, nullptr);
  bool holds_live = false;
  for (const auto& [name, t] : state.model) holds_live = holds_live || is_live(t, live);
  if (!holds_live) return state;
  // On CUDA the clones are queued on the stream run() updates on, behind the update this state
  // follows and ahead of the next one, which waits for the lock.
  const std::lock_guard<std::mutex> lock(update_mutex_);
  if (backbone_->adam->steps() != state.backbone_adam_steps) return std::nullopt;
  return state.cloned();
}

void TrainStep::restore(const TrainingState& state, std::optional<int64_t> schedule_steps,
                        const std::string& path) {
  if (state.more_heads.size() + 1 != heads_.size())
    throw UsageError(path + ": a checkpoint of " + std::to_string(state.more_heads.size() + 1) +
                     " heads, this run trains " + std::to_string(heads_.size()));
  const std::size_t per_head = heads_[0]->adam->exp_avg().size();
  const std::size_t in_backbone = backbone_ ? backbone_->parameters.size() : 0;
  if (state.adam_exp_avg.size() != per_head * heads_.size() + in_backbone ||
      state.adam_exp_avg_sq.size() != state.adam_exp_avg.size())
    throw UsageError(path + ": Adam moments of " + std::to_string(state.adam_exp_avg.size()) +
                     " tensors, the trained parameters are " +
                     std::to_string(per_head * heads_.size() + in_backbone));
  const torch::Device device = model_.fc->weight.device();
  for (int k = 0; k < heads(); ++k) {
    Head& h = *heads_[k];
    state.restore_model_tensors(
        {{head_tensor_name(k, "weight"), h.weight}, {head_tensor_name(k, "bias"), h.bias}}, path);
    std::vector<torch::Tensor> m, v;
    for (std::size_t i = k * per_head; i < (k + 1) * per_head; ++i) {
      m.push_back(state.adam_exp_avg[i].to(device));
      v.push_back(state.adam_exp_avg_sq[i].to(device));
    }
    const HeadState saved =
        k == 0 ? HeadState{state.adam_steps, state.schedule_steps, state.last_lr, state.grad_scaler}
               : state.more_heads[k - 1];
    h.adam->restore(m, v, saved.adam_steps);
    if (h.scaler && saved.grad_scaler)
      h.scaler->restore(saved.grad_scaler->scale, saved.grad_scaler->growth_tracker);
    h.last_lr = saved.last_lr;
    h.schedule.set_step_count(schedule_steps.value_or(saved.schedule_steps));
  }
  if (backbone_) {
    state.restore_model_tensors(backbone_->parameters, path);
    std::vector<torch::Tensor> m, v;
    for (std::size_t i = per_head * heads_.size(); i < state.adam_exp_avg.size(); ++i) {
      m.push_back(state.adam_exp_avg[i].to(device));
      v.push_back(state.adam_exp_avg_sq[i].to(device));
    }
    backbone_->adam->restore(m, v, state.backbone_adam_steps);
    backbone_->schedule.set_step_count(heads_[0]->schedule.step_count());
  }
}

}  // namespace pets::train
