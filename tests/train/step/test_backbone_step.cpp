// TrainStep with a trained backbone (--unfreeze) under mpiexec -n 2: one step over two uneven
// shares of a global batch updates layer4 and the head as one process holding the whole batch
// would (autograd's gradient of the mean loss, Adam per group, the backbone's lr scaled); before
// the unfreeze epoch only the head trains; the backbone's group saves, restores and continues bit
// for bit; what a stop keeps after a step refers to the backbone, which it copies only while no
// later update came.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "pets/comm/communicator.hpp"
#include "pets/comm/mpi_comm.hpp"
#include "pets/data/loader.hpp"
#include "pets/model/resnet50d.hpp"
#include "pets/train/input/batch_tensors.hpp"
#include "pets/train/state/training_state.hpp"
#include "pets/train/step/adam.hpp"
#include "pets/train/step/train_step.hpp"
#include "pets/util/error.hpp"

namespace {

using pets::model::ResNet50dImpl;
using pets::train::StepResult;
using pets::train::StepSettings;
using pets::train::TrainStep;

constexpr int kClasses = 5;
constexpr int kSize = 32;        // small images: the step's arithmetic, not its speed
constexpr double kRatio = 0.25;  // --backbone-lr-ratio
constexpr int kLayer4 = 4;       // --unfreeze layer4's first stage

/// The same model on every rank (seeded init; the last BatchNorm of each block made non-zero, as
/// pretrained weights are, so that gradients reach every layer), backbone in eval mode so that an
/// image's features do not depend on the other images of its batch.
pets::model::ResNet50d make_model() {
  torch::manual_seed(11);
  pets::model::ResNet50d model(kClasses);
  {
    torch::NoGradGuard no_grad;
    for (auto& p : model->named_parameters(true))
      if (p.key().find("bn3.weight") != std::string::npos) p.value().fill_(0.5);
  }
  model->freeze_backbone();
  model->to_channels_last();
  model->eval();
  return model;
}

/// Images [first, first + n) of a global batch that every rank can compute (seeded).
pets::data::Batch global_images(int64_t first, int64_t n) {
  torch::manual_seed(5);
  const torch::Tensor all = torch::randn({8, kSize, kSize, 3});
  const torch::Tensor labels = torch::randint(0, kClasses, {8}, torch::kInt64);
  pets::data::Batch b;
  b.n = n;
  b.h = b.w = kSize;
  const torch::Tensor mine = all.narrow(0, first, n).contiguous();
  b.pixels.assign(mine.data_ptr<float>(), mine.data_ptr<float>() + mine.numel());
  const torch::Tensor my_labels = labels.narrow(0, first, n).contiguous();
  b.labels.assign(my_labels.data_ptr<int64_t>(), my_labels.data_ptr<int64_t>() + n);
  return b;
}

pets::train::OneCycleOptions schedule() {
  pets::train::OneCycleOptions o;
  o.max_lr = 3e-2;
  o.total_steps = 10;
  return o;
}

StepSettings layer4_settings() {
  StepSettings s;
  s.backbone = pets::train::BackboneTraining{kLayer4, kRatio};
  return s;
}

double relative(const torch::Tensor& a, const torch::Tensor& b) {
  return (a - b).norm().item<double>() / std::max(b.norm().item<double>(), 1e-30);
}

class BackboneStepTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_EQ(mpi_.size(), 2) << "run under mpiexec -n 2"; }

  pets::comm::MpiComm mpi_;
  pets::comm::MpiCommunicator comm_{mpi_};
};

// One process holding the whole batch: layer4 and fc require gradients, the mean cross-entropy's
// gradient by autograd, then torch's Adam per group (fc at the schedule's lr, layer4 at kRatio
// times it).
TEST_F(BackboneStepTest, UnevenSharesUpdateAsOneProcessWithTheWholeBatch) {
  const int64_t n0 = 3, n1 = 2;
  pets::model::ResNet50d model = make_model();
  TrainStep step(*model, comm_, schedule(), layer4_settings());
  step.set_backbone_training(true);
  ASSERT_TRUE(step.trains_backbone());
  const auto& trained = step.backbone_parameters();
  ASSERT_EQ(trained.size(), model->stage_parameters(kLayer4).size());
  std::vector<torch::Tensor> frozen_before;
  for (const auto& p : model->stage_parameters(0))
    if (p.first.rfind("layer4.", 0) != 0) frozen_before.push_back(p.second.detach().clone());
  pets::data::Batch mine = mpi_.rank() == 0 ? global_images(0, n0) : global_images(n0, n1);
  const pets::comm::Traffic before = comm_.traffic();
  const StepResult result = step.run(mine, [] { return false; });
  const pets::comm::Traffic traffic = comm_.traffic().since(before);

  // The reference.
  pets::model::ResNet50d ref = make_model();
  std::vector<torch::Tensor> ref_trained;
  for (auto& [name, p] : ref->stage_parameters(kLayer4)) {
    p.set_requires_grad(true);
    ref_trained.push_back(p);
  }
  pets::data::Batch all = global_images(0, n0 + n1);
  const torch::Tensor loss = torch::nn::functional::cross_entropy(
      ref->forward(pets::train::batch_images(all, torch::kCPU)),
      pets::train::batch_labels(all, torch::kCPU));
  loss.backward();
  std::vector<torch::Tensor> ref_grads;
  for (const auto& p : ref_trained) ref_grads.push_back(p.grad().clone());
  pets::train::OneCycleSchedule head_schedule(schedule());
  pets::train::OneCycleOptions scaled = schedule();
  scaled.max_lr *= kRatio;
  pets::train::OneCycleSchedule backbone_schedule(scaled);
  pets::train::Adam(ref_trained).step(backbone_schedule.lr(), backbone_schedule.beta1());
  pets::train::Adam({ref->fc->weight, ref->fc->bias})
      .step(head_schedule.lr(), head_schedule.beta1());

  EXPECT_EQ(result.images, n0 + n1);
  EXPECT_NEAR(result.loss_sum, loss.item<double>() * (n0 + n1), 1e-4 * result.loss_sum);
  EXPECT_DOUBLE_EQ(result.lr, head_schedule.lr());
  EXPECT_DOUBLE_EQ(result.backbone_lr, backbone_schedule.lr());
  EXPECT_NEAR(result.backbone_lr, kRatio * result.lr, 1e-12 * result.lr);
  // The head's float64 sums, then every layer4 gradient in fp32.
  int64_t backbone_numel = 0;
  for (const auto& p : trained) backbone_numel += p.second.numel();
  EXPECT_EQ(traffic.collectives, 2);
  EXPECT_EQ(traffic.bytes,
            (model->fc->weight.numel() + model->fc->bias.numel() + 3) * 8 + backbone_numel * 4);
  // The averaged gradients (the step leaves them in .grad) and the values after Adam's update.
  // Adam's first update is lr * g / (|g| + eps) per element: where |g| is near eps (BatchNorm
  // biases that start at 0) it carries the gradient's rounding (1e-4 between the two orders of
  // summation) into the value: up to 1.2e-3 there with the torch 2.11 wheel's kernels, hence
  // 5e-3; a wrong group lr would be off by its ratio (x4 here).
  for (std::size_t i = 0; i < trained.size(); ++i) {
    const torch::Tensor& p = trained[i].second;
    EXPECT_LT(relative(p.grad(), ref_grads[i]), 1e-4) << trained[i].first;
    EXPECT_LT(relative(p.detach(), ref_trained[i].detach()), 5e-3) << trained[i].first;
  }
  EXPECT_TRUE(torch::allclose(model->fc->weight, ref->fc->weight, 1e-5, 1e-7));
  // Every trained parameter moved; every frozen one kept its bits.
  pets::model::ResNet50d initial = make_model();
  const auto initial_layer4 = initial->stage_parameters(kLayer4);
  for (std::size_t i = 0; i < trained.size(); ++i)
    EXPECT_FALSE(torch::equal(trained[i].second, initial_layer4[i].second)) << trained[i].first;
  std::size_t f = 0;
  for (const auto& p : model->stage_parameters(0)) {
    if (p.first.rfind("layer4.", 0) != 0) {
      EXPECT_TRUE(torch::equal(p.second, frozen_before[f++])) << p.first;
    }
  }
  EXPECT_EQ(step.adam().steps(), 1);
}

// Before --unfreeze-epoch: the head alone (its traffic, the backbone untouched, its Adam count 0),
// while the backbone's schedule keeps pace; turned on, its first update uses the schedule's lr of
// that step and Adam's first-step bias correction.
TEST_F(BackboneStepTest, BeforeTheUnfreezeEpochOnlyTheHeadTrains) {
  pets::model::ResNet50d model = make_model();
  TrainStep step(*model, comm_, schedule(), layer4_settings());
  EXPECT_FALSE(step.trains_backbone());
  for (const auto& [name, p] : step.backbone_parameters()) EXPECT_FALSE(p.requires_grad()) << name;
  std::vector<torch::Tensor> kept;
  for (const auto& [name, p] : step.backbone_parameters()) kept.push_back(p.detach().clone());
  pets::data::Batch mine = global_images(mpi_.rank() * 2, 2);
  const pets::comm::Traffic before = comm_.traffic();
  const StepResult off = step.run(mine, [] { return false; });
  EXPECT_EQ(comm_.traffic().since(before).bytes,
            (model->fc->weight.numel() + model->fc->bias.numel() + 3) * 8);
  pets::train::OneCycleOptions scaled = schedule();
  scaled.max_lr *= kRatio;
  pets::train::OneCycleSchedule backbone_schedule(scaled);
  EXPECT_DOUBLE_EQ(off.backbone_lr, backbone_schedule.lr());  // its group's, as PyTorch's
  for (std::size_t i = 0; i < kept.size(); ++i)
    EXPECT_TRUE(torch::equal(step.backbone_parameters()[i].second, kept[i]));
  step.set_backbone_training(true);
  for (const auto& [name, p] : step.backbone_parameters()) EXPECT_TRUE(p.requires_grad()) << name;
  const StepResult on = step.run(mine, [] { return false; });
  backbone_schedule.step();
  EXPECT_DOUBLE_EQ(on.backbone_lr, backbone_schedule.lr());
  pets::train::TrainingState state;
  step.save(state);
  EXPECT_EQ(state.adam_steps, 2);
  EXPECT_EQ(state.backbone_adam_steps, 1);
  bool moved = false;
  for (std::size_t i = 0; i < kept.size(); ++i)
    moved = moved || !torch::equal(step.backbone_parameters()[i].second, kept[i]);
  EXPECT_TRUE(moved);
}

// save() adds layer4's parameters and moments; restored into a fresh step, the next step is the
// same, bit for bit, as the original's; a checkpoint without them is refused.
TEST_F(BackboneStepTest, SavesRestoresAndContinuesBitForBit) {
  pets::model::ResNet50d model = make_model();
  TrainStep step(*model, comm_, schedule(), layer4_settings());
  step.set_backbone_training(true);
  pets::data::Batch mine = global_images(mpi_.rank() * 2, 2);
  step.run(mine, [] { return false; });
  pets::train::TrainingState state;
  step.save(state);
  const auto& trained = step.backbone_parameters();
  ASSERT_EQ(state.model.size(), 2 + trained.size());
  EXPECT_EQ(state.model[2].first, trained.front().first);
  ASSERT_EQ(state.adam_exp_avg.size(), 2 + trained.size());
  EXPECT_EQ(state.backbone_adam_steps, 1);
  for (auto& [name, t] : state.model) t = t.detach().clone();
  for (auto& t : state.adam_exp_avg) t = t.clone();
  for (auto& t : state.adam_exp_avg_sq) t = t.clone();

  pets::model::ResNet50d fresh = make_model();
  TrainStep resumed(*fresh, comm_, schedule(), layer4_settings());
  resumed.restore(state, std::nullopt, "ckpt");
  resumed.set_backbone_training(true);
  const StepResult a = step.run(mine, [] { return false; });
  const StepResult b = resumed.run(mine, [] { return false; });
  EXPECT_EQ(a.loss_sum, b.loss_sum);
  EXPECT_EQ(a.backbone_lr, b.backbone_lr);
  for (std::size_t i = 0; i < trained.size(); ++i)
    EXPECT_TRUE(torch::equal(trained[i].second, resumed.backbone_parameters()[i].second))
        << trained[i].first;
  EXPECT_TRUE(torch::equal(model->fc->weight, fresh->fc->weight));

  pets::train::TrainingState head_only = state;
  head_only.adam_exp_avg.resize(2);
  head_only.adam_exp_avg_sq.resize(2);
  EXPECT_THROW(resumed.restore(head_only, std::nullopt, "ckpt"), pets::UsageError);
  pets::train::TrainingState no_layer4 = state;
  no_layer4.model.resize(2);
  EXPECT_THROW(resumed.restore(no_layer4, std::nullopt, "ckpt"), pets::UsageError);
}

// What a stop keeps after each step: copy_for_stop clones the head, its moments and the buffers
// but refers to layer4's parameters and moments; stable_copy clones those too while no update
// came after, and says the state is stale once the next step has updated them.
TEST_F(BackboneStepTest, TheStopsCopyLeavesTheBackboneToTheStop) {
  pets::model::ResNet50d model = make_model();
  TrainStep step(*model, comm_, schedule(), layer4_settings());
  step.set_backbone_training(true);
  pets::data::Batch mine = global_images(mpi_.rank() * 2, 2);
  step.run(mine, [] { return false; });
  pets::train::TrainingState state;
  step.save(state);
  state.model.emplace_back("layer4.0.bn1.running_mean",
                           model->named_buffers(true)["layer4.0.bn1.running_mean"]);
  const pets::train::TrainingState kept = step.copy_for_stop(state);
  const auto shares = [](const torch::Tensor& a, const torch::Tensor& b) {
    return a.storage().unsafeGetStorageImpl() == b.storage().unsafeGetStorageImpl();
  };
  const std::size_t n = step.backbone_parameters().size();
  ASSERT_EQ(kept.model.size(), 3 + n);
  for (std::size_t i = 0; i < kept.model.size(); ++i) {
    const bool trained = i >= 2 && i < 2 + n;
    EXPECT_EQ(shares(kept.model[i].second, state.model[i].second), trained) << kept.model[i].first;
    EXPECT_TRUE(torch::equal(kept.model[i].second, state.model[i].second));
  }
  for (std::size_t i = 0; i < kept.adam_exp_avg.size(); ++i) {
    EXPECT_EQ(shares(kept.adam_exp_avg[i], state.adam_exp_avg[i]), i >= 2);
    EXPECT_EQ(shares(kept.adam_exp_avg_sq[i], state.adam_exp_avg_sq[i]), i >= 2);
  }
  const std::optional<pets::train::TrainingState> stable = step.stable_copy(kept);
  ASSERT_TRUE(stable.has_value());
  for (std::size_t i = 0; i < stable->model.size(); ++i) {
    EXPECT_FALSE(shares(stable->model[i].second, state.model[i].second));
    EXPECT_TRUE(torch::equal(stable->model[i].second, state.model[i].second));
  }
  EXPECT_TRUE(torch::equal(stable->adam_exp_avg.back(), state.adam_exp_avg.back()));
  const torch::Tensor before = stable->model[2].second.clone();
  step.run(mine, [] { return false; });  // the next step updates layer4 in place
  EXPECT_FALSE(torch::equal(kept.model[2].second, before));
  EXPECT_FALSE(step.stable_copy(kept).has_value());
  // A state holding none of the backbone's tensors (another rank's shard) is taken as it is.
  pets::train::TrainingState shard;
  shard.model.emplace_back("bn", torch::zeros({2}));
  ASSERT_TRUE(step.stable_copy(shard).has_value());
  EXPECT_TRUE(shares(step.stable_copy(shard)->model[0].second, shard.model[0].second));
}

TEST_F(BackboneStepTest, ASweepCannotTrainTheBackbone) {
  pets::model::ResNet50d model = make_model();
  EXPECT_THROW(TrainStep(*model, comm_, {schedule(), schedule()}, layer4_settings()), pets::Error);
}

}  // namespace
