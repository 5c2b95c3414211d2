// TrainStep under mpiexec -n 2: one step over two uneven (or one empty) shares of a global batch
// updates the head as one process holding the whole batch would (the mean loss over all
// images); the stop request, loss scaling and PETS_VERIFY_RANKS's gradient check travel to every
// rank.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "pets/comm/communicator.hpp"
#include "pets/comm/mpi_comm.hpp"
#include "pets/data/loader.hpp"
#include "pets/model/resnet50d.hpp"
#include "pets/train/input/batch_tensors.hpp"
#include "pets/train/run/stop_signal.hpp"
#include "pets/train/state/checkpoint.hpp"
#include "pets/train/state/training_state.hpp"
#include "pets/train/step/adam.hpp"
#include "pets/train/step/backbone_forward.hpp"
#include "pets/train/step/step_hooks.hpp"
#include "pets/train/step/train_step.hpp"
#include "pets/train/step/verify_ranks.hpp"
#include "pets/util/error.hpp"

namespace {

using pets::train::StepResult;
using pets::train::StepSettings;
using pets::train::TrainStep;

constexpr int kClasses = 5;
constexpr int kSize = 32;  // small images: the step's arithmetic, not its speed

/// The same frozen model on every rank (seeded init), backbone in eval mode so that an image's
/// features do not depend on the other images of its batch.
pets::model::ResNet50d make_model() {
  torch::manual_seed(11);
  pets::model::ResNet50d model(kClasses);
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

struct Reference {
  torch::Tensor grad_weight, grad_bias, weight, bias;
  double loss_sum = 0.0;
};

/// One process holding the whole global batch: mean cross-entropy, its gradients, one Adam step.
Reference one_process_step(int64_t global_n) {
  pets::model::ResNet50d model = make_model();
  pets::data::Batch all = global_images(0, global_n);
  torch::Tensor features;
  {
    torch::NoGradGuard no_grad;
    features = model->forward_features(pets::train::batch_images(all, torch::kCPU));
  }
  const torch::Tensor labels = pets::train::batch_labels(all, torch::kCPU);
  const torch::Tensor loss =
      torch::nn::functional::cross_entropy(model->forward_head(features), labels);
  loss.backward();
  Reference r;
  r.grad_weight = model->fc->weight.grad().clone();
  r.grad_bias = model->fc->bias.grad().clone();
  r.loss_sum = loss.item<double>() * static_cast<double>(global_n);
  pets::train::OneCycleSchedule s(schedule());
  pets::train::Adam adam({model->fc->weight, model->fc->bias});
  adam.step(s.lr(), s.beta1());
  r.weight = model->fc->weight.detach().clone();
  r.bias = model->fc->bias.detach().clone();
  return r;
}

class TrainStepTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_EQ(mpi_.size(), 2) << "run under mpiexec -n 2"; }

  /// Rank 0 takes images [0, n0), rank 1 the next n1; one step; compares with one process.
  void expect_one_process_update(int64_t n0, int64_t n1) {
    pets::model::ResNet50d model = make_model();
    TrainStep step(*model, comm_, schedule(), StepSettings{});
    pets::data::Batch mine = mpi_.rank() == 0 ? global_images(0, n0) : global_images(n0, n1);
    const StepResult result = step.run(mine, [] { return false; });
    const Reference ref = one_process_step(n0 + n1);
    EXPECT_EQ(result.images, n0 + n1);
    EXPECT_NEAR(result.loss_sum, ref.loss_sum, 1e-4 * ref.loss_sum);
    EXPECT_DOUBLE_EQ(result.lr, pets::train::OneCycleSchedule(schedule()).lr());
    EXPECT_FALSE(result.skipped);
    EXPECT_FALSE(result.stop);
    EXPECT_EQ(step.schedule().step_count(), 1);
    EXPECT_EQ(step.adam().steps(), 1);
    // Adam's first moment after one step is (1 - beta1) * gradient: the averaged gradient
    // itself, which a sum or a per-rank mean would get wrong by a factor (Adam's update alone
    // is scale-free).
    const double beta1 = pets::train::OneCycleSchedule(schedule()).beta1();
    const torch::Tensor grad_weight = step.adam().exp_avg()[0] / (1.0 - beta1);
    const torch::Tensor grad_bias = step.adam().exp_avg()[1] / (1.0 - beta1);
    EXPECT_TRUE(torch::allclose(grad_weight, ref.grad_weight, 1e-4, 1e-7))
        << (grad_weight - ref.grad_weight).abs().max().item<double>();
    EXPECT_TRUE(torch::allclose(grad_bias, ref.grad_bias, 1e-4, 1e-7));
    EXPECT_TRUE(torch::allclose(model->fc->weight, ref.weight, 1e-5, 1e-7));
    EXPECT_TRUE(torch::allclose(model->fc->bias, ref.bias, 1e-5, 1e-7));
  }

  pets::comm::MpiComm mpi_;
  pets::comm::MpiCommunicator comm_{mpi_};
};

TEST_F(TrainStepTest, UnevenSharesUpdateAsOneProcessWithTheWholeBatch) {
  expect_one_process_update(3, 2);
}

TEST_F(TrainStepTest, AnEmptyShareStillTakesPart) { expect_one_process_update(3, 0); }

TEST_F(TrainStepTest, OneRanksStopRequestReachesEveryRank) {
  pets::model::ResNet50d model = make_model();
  TrainStep step(*model, comm_, schedule(), StepSettings{});
  pets::data::Batch mine = global_images(mpi_.rank() * 2, 2);
  EXPECT_FALSE(step.run(mine, [] { return false; }).stop);
  const bool asks = mpi_.rank() == 1;
  EXPECT_TRUE(step.run(mine, [asks] { return asks; }).stop);
  EXPECT_EQ(step.schedule().step_count(), 2);  // the step itself is taken
}

// A step hands its collectives the head's gradient and three numbers, in float64, whatever the
// number of ranks: one allreduce of (fc.weight + fc.bias + 3) * 8 bytes.
TEST_F(TrainStepTest, AStepsTrafficIsTheHeadsGradientAndThreeNumbers) {
  pets::model::ResNet50d model = make_model();
  TrainStep step(*model, comm_, schedule(), StepSettings{});
  pets::data::Batch mine = global_images(mpi_.rank() * 2, 2);
  const pets::comm::Traffic before = comm_.traffic();
  step.run(mine, [] { return false; });
  const pets::comm::Traffic traffic = comm_.traffic().since(before);
  EXPECT_EQ(traffic.collectives, 1);
  EXPECT_EQ(traffic.bytes, (model->fc->weight.numel() + model->fc->bias.numel() + 3) * 8);
  pets::train::StepSums sums(model->fc->weight.numel(), model->fc->bias.numel(), torch::kCPU);
  EXPECT_EQ(sums.head_grad().numel() + sums.totals().numel(), sums.buffer().numel());
}

TEST_F(TrainStepTest, StopAgreementThroughTheStepAndOnItsOwn) {
  const bool asks = mpi_.rank() == 1;
  pets::train::StopAgreement stop(comm_, [asks] { return asks; });
  EXPECT_FALSE(stop.agreed());
  pets::model::ResNet50d model = make_model();
  TrainStep step(*model, comm_, schedule(), StepSettings{});
  pets::data::Batch mine = global_images(mpi_.rank() * 2, 2);
  EXPECT_TRUE(stop.record(step.run(mine, stop.request()).stop));  // the step carried rank 1's
  EXPECT_TRUE(stop.agree());  // agreed for good: no collective (rank 1 asks no more below)
  pets::train::StopAgreement none(comm_, [] { return false; });
  EXPECT_FALSE(none.agree());
  EXPECT_FALSE(none.record(false));
  pets::train::StopAgreement between(comm_, [asks] { return asks; });
  EXPECT_TRUE(between.agree());  // one counter over the ranks
}

TEST_F(TrainStepTest, SavesAndRestoresItsOwnState) {
  pets::model::ResNet50d model = make_model();
  StepSettings fp16;
  fp16.loss_scaling.emplace();
  TrainStep step(*model, comm_, schedule(), fp16);
  for (int i = 0; i < 2; ++i) {
    pets::data::Batch mine = global_images(mpi_.rank() * 2, 2);
    step.run(mine, [] { return false; });
  }
  pets::train::TrainingState state;
  step.save(state);
  ASSERT_EQ(state.model.size(), 2u);
  EXPECT_EQ(state.model[0].first, "fc.weight");
  EXPECT_EQ(state.model[1].first, "fc.bias");
  EXPECT_EQ(state.adam_steps, 2);
  EXPECT_EQ(state.schedule_steps, 2);
  EXPECT_DOUBLE_EQ(state.last_lr, step.last_lr());
  ASSERT_TRUE(state.grad_scaler.has_value());
  EXPECT_EQ(state.grad_scaler->growth_tracker, 2);
  for (auto& [name, t] : state.model) t = t.detach().clone();
  // Into a fresh step: the same head, moments, schedule position and lr.
  pets::model::ResNet50d fresh = make_model();
  TrainStep resumed(*fresh, comm_, schedule(), fp16);
  resumed.restore(state, 1, "ckpt");
  EXPECT_TRUE(torch::equal(fresh->fc->weight, model->fc->weight));
  EXPECT_TRUE(torch::equal(resumed.adam().exp_avg()[0], step.adam().exp_avg()[0]));
  EXPECT_EQ(resumed.adam().steps(), 2);
  EXPECT_EQ(resumed.schedule().step_count(), 1);  // where the caller says it continues
  EXPECT_DOUBLE_EQ(resumed.last_lr(), step.last_lr());
  EXPECT_EQ(resumed.scaler()->growth_tracker(), 2);
  // Moments of another head, or no head at all: refused, naming the checkpoint.
  pets::train::TrainingState short_moments = state;
  short_moments.adam_exp_avg.pop_back();
  short_moments.adam_exp_avg_sq.pop_back();
  EXPECT_THROW(resumed.restore(short_moments, 0, "ckpt"), pets::UsageError);
  pets::train::TrainingState no_head = state;
  no_head.model.clear();
  EXPECT_THROW(resumed.restore(no_head, 0, "ckpt"), pets::UsageError);
}

pets::train::OneCycleOptions schedule_at(double max_lr) {
  pets::train::OneCycleOptions o = schedule();
  o.max_lr = max_lr;
  return o;
}

// A sweep: each head over the one backbone pass steps exactly as a step of that head alone (the
// same features, its own loss, gradients, sums, Adam, schedule and loss scale), bit for bit, also
// at an epoch's end where one rank's share is empty; each head's sums travel in an allreduce laid
// out as a run of one head lays it.
TEST_F(TrainStepTest, ASweepsHeadsStepAsTheirRunsAlone) {
  const std::vector<double> lrs{1e-3, 3e-2, 0.1};
  StepSettings fp16;
  fp16.loss_scaling.emplace();
  pets::model::ResNet50d model = make_model();
  TrainStep sweep(*model, comm_, {schedule_at(lrs[0]), schedule_at(lrs[1]), schedule_at(lrs[2])},
                  fp16);
  ASSERT_EQ(sweep.heads(), 3);
  std::vector<pets::model::ResNet50d> models;
  std::vector<std::unique_ptr<TrainStep>> alone;
  for (const double lr : lrs) {
    models.push_back(make_model());
    alone.push_back(std::make_unique<TrainStep>(*models.back(), comm_, schedule_at(lr), fp16));
  }
  const auto shares = [&](int i) {
    return i < 2 ? global_images(mpi_.rank() * 3, 3) : global_images(0, mpi_.rank() == 0 ? 2 : 0);
  };
  for (int i = 0; i < 3; ++i) {
    pets::data::Batch mine = shares(i);
    const pets::comm::Traffic before = comm_.traffic();
    const StepResult result = sweep.run(mine, [] { return false; });
    const pets::comm::Traffic traffic = comm_.traffic().since(before);
    EXPECT_EQ(traffic.collectives, 3);
    EXPECT_EQ(traffic.bytes, 3 * (model->fc->weight.numel() + model->fc->bias.numel() + 3) * 8);
    ASSERT_EQ(result.heads.size(), 3U);
    for (int k = 0; k < 3; ++k) {
      pets::data::Batch same = shares(i);
      const StepResult own = alone[k]->run(same, [] { return false; });
      EXPECT_EQ(result.heads[k].loss_sum, own.loss_sum) << "head " << k << " step " << i;
      EXPECT_EQ(result.heads[k].lr, own.lr);
      EXPECT_EQ(result.heads[k].skipped, own.skipped);
      EXPECT_EQ(result.images, own.images);
    }
    EXPECT_EQ(result.loss_sum, result.heads[0].loss_sum);
  }
  for (int k = 0; k < 3; ++k) {
    EXPECT_TRUE(torch::equal(sweep.head_weight(k), models[k]->fc->weight)) << "head " << k;
    EXPECT_TRUE(torch::equal(sweep.head_bias(k), models[k]->fc->bias)) << "head " << k;
    for (int i = 0; i < 2; ++i) {
      EXPECT_TRUE(torch::equal(sweep.adam(k).exp_avg()[i], alone[k]->adam().exp_avg()[i]));
      EXPECT_TRUE(torch::equal(sweep.adam(k).exp_avg_sq()[i], alone[k]->adam().exp_avg_sq()[i]));
    }
    EXPECT_EQ(sweep.schedule(k).step_count(), 3);
    EXPECT_EQ(sweep.scaler(k)->growth_tracker(), alone[k]->scaler()->growth_tracker());
  }
  // The heads differ (other learning rates); head 0 is the model's own fc.
  EXPECT_FALSE(torch::equal(sweep.head_weight(1), sweep.head_weight(2)));
  EXPECT_TRUE(sweep.head_weight(0).is_same(model->fc->weight));

  // Saved and restored: every head, under its own names, with its own counts.
  pets::train::TrainingState state;
  sweep.save(state);
  ASSERT_EQ(state.model.size(), 6U);
  EXPECT_EQ(state.model[2].first, "heads.1.weight");
  EXPECT_EQ(state.model[5].first, "heads.2.bias");
  EXPECT_EQ(state.adam_exp_avg.size(), 6U);
  ASSERT_EQ(state.more_heads.size(), 2U);
  EXPECT_EQ(state.more_heads[1].schedule_steps, 3);
  EXPECT_DOUBLE_EQ(state.more_heads[1].last_lr, sweep.last_lr(2));
  ASSERT_TRUE(state.more_heads[1].grad_scaler.has_value());
  for (auto& [name, t] : state.model) t = t.detach().clone();
  const pets::train::TrainingState read = pets::train::TrainingState::from_checkpoint(
      pets::train::Checkpoint{3, std::nullopt, state.to_json(), state.tensors(), "ckpt"});
  pets::model::ResNet50d fresh = make_model();
  TrainStep resumed(*fresh, comm_, {schedule_at(lrs[0]), schedule_at(lrs[1]), schedule_at(lrs[2])},
                    fp16);
  resumed.restore(read, std::nullopt, "ckpt");
  for (int k = 0; k < 3; ++k) {
    EXPECT_TRUE(torch::equal(resumed.head_weight(k), sweep.head_weight(k)));
    EXPECT_TRUE(torch::equal(resumed.adam(k).exp_avg_sq()[0], sweep.adam(k).exp_avg_sq()[0]));
    EXPECT_EQ(resumed.schedule(k).step_count(), 3);
    EXPECT_EQ(resumed.last_lr(k), sweep.last_lr(k));
  }
  // Into one head, or into another number of heads: refused, naming the checkpoint.
  pets::model::ResNet50d one = make_model();
  TrainStep single(*one, comm_, schedule(), fp16);
  EXPECT_THROW(single.restore(read, std::nullopt, "ckpt"), pets::UsageError);
  pets::train::TrainingState single_state;
  single.save(single_state);
  EXPECT_THROW(resumed.restore(single_state, std::nullopt, "ckpt"), pets::UsageError);
}

TEST_F(TrainStepTest, LossScalingByAPowerOfTwoChangesNothing) {
  pets::model::ResNet50d plain = make_model(), scaled = make_model();
  TrainStep a(*plain, comm_, schedule(), StepSettings{});
  StepSettings fp16;
  fp16.loss_scaling.emplace();
  TrainStep b(*scaled, comm_, schedule(), fp16);
  ASSERT_EQ(a.scaler(), nullptr);
  ASSERT_NE(b.scaler(), nullptr);
  for (int i = 0; i < 2; ++i) {
    pets::data::Batch x = global_images(mpi_.rank() * 3, 3), y = x;
    a.run(x, [] { return false; });
    EXPECT_FALSE(b.run(y, [] { return false; }).skipped);
  }
  EXPECT_TRUE(torch::equal(plain->fc->weight, scaled->fc->weight));
  EXPECT_TRUE(torch::equal(plain->fc->bias, scaled->fc->bias));
  EXPECT_EQ(b.scaler()->growth_tracker(), 2);
}

TEST_F(TrainStepTest, OneRanksOverflowSkipsTheStepOnEveryRank) {
  pets::model::ResNet50d model = make_model();
  const torch::Tensor before = model->fc->weight.detach().clone();
  StepSettings settings;
  settings.loss_scaling.emplace();
  TrainStep step(*model, comm_, schedule(), settings);
  pets::data::Batch mine = global_images(mpi_.rank() * 2, 2);
  // Rank 1's gradients are not finite; the allreduce hands them to rank 0 too.
  if (mpi_.rank() == 1) mine.pixels[0] = std::numeric_limits<float>::quiet_NaN();
  const StepResult result = step.run(mine, [] { return false; });
  EXPECT_TRUE(result.skipped);
  EXPECT_TRUE(torch::equal(model->fc->weight, before));
  EXPECT_EQ(step.schedule().step_count(), 0);  // as Accelerate: the schedule waits too
  EXPECT_EQ(step.adam().steps(), 0);
  EXPECT_EQ(step.scaler()->scale(), 32768.0);
  // The next good step goes through.
  pets::data::Batch good = global_images(mpi_.rank() * 2, 2);
  EXPECT_FALSE(step.run(good, [] { return false; }).skipped);
  EXPECT_EQ(step.schedule().step_count(), 1);
  EXPECT_FALSE(torch::equal(model->fc->weight, before));
}

TEST_F(TrainStepTest, VerifiedGradientsAndASkewCaught) {
  pets::model::ResNet50d model = make_model();
  pets::train::DebugSwitches switches;
  switches.verify_ranks = true;
  switches.inject_fault = pets::train::parse_fault_spec("skew:1:1");
  pets::train::SwitchHooks hooks(switches, mpi_.rank(), &comm_);
  StepSettings settings;
  settings.hooks = hooks.hooks();
  TrainStep step(*model, comm_, schedule(), settings);
  pets::data::Batch mine = global_images(mpi_.rank() * 2, 2);
  step.run(mine, [] { return false; });
  EXPECT_EQ(hooks.steps_verified(), 1);
  // Step 1: rank 1's reduced gradients are altered after the allreduce; every rank notices.
  try {
    step.run(mine, [] { return false; });
    FAIL() << "a skew went unnoticed";
  } catch (const pets::Error& e) {
    EXPECT_NE(std::string(e.what()).find("the averaged gradients at step 1 on rank 1 differ from "
                                         "rank 0's"),
              std::string::npos)
        << e.what();
  }
}

/// The message of the pets::Error that `run` throws; empty when it throws none.
std::string error_of(const std::function<void()>& run) {
  try {
    run();
  } catch (const pets::Error& e) {
    return e.what();
  }
  return "";
}

// A sweep: every head's averaged gradients are compared, and at evaluation every head. A
// difference in head 1 alone, on rank 1 alone, is caught by each check.
TEST_F(TrainStepTest, VerifiedSweepHeadsAndADifferenceInOneCaught) {
  pets::model::ResNet50d model = make_model();
  pets::train::DebugSwitches switches;
  switches.verify_ranks = true;
  pets::train::SwitchHooks hooks(switches, mpi_.rank(), &comm_);
  StepSettings settings;
  settings.hooks = hooks.hooks();
  // Rank 1 alters head 1's averaged weight gradient at step 1, before the check sees it.
  const auto verify = settings.hooks.averaged;
  ASSERT_TRUE(verify);
  settings.hooks.averaged = [&](int64_t s, const std::vector<at::Tensor>& grads) {
    ASSERT_EQ(grads.size(), 4u);  // weight and bias of each head
    if (s == 1 && mpi_.rank() == 1) grads[2].view(-1)[0] += 1.0;
    verify(s, grads);
  };
  pets::train::OneCycleOptions other = schedule();
  other.max_lr = 1e-2;
  TrainStep step(*model, comm_, std::vector<pets::train::OneCycleOptions>{schedule(), other},
                 settings);
  pets::data::Batch mine = global_images(mpi_.rank() * 2, 2);
  step.run(mine, [] { return false; });
  EXPECT_EQ(hooks.steps_verified(), 1);
  const std::string line = pets::train::check_model_on_all_ranks(comm_, *model, 0, &step);
  EXPECT_NE(line.find("verify: epoch 0: all 2 ranks hold model "), std::string::npos) << line;
  EXPECT_NE(line.find("and the sweep's 1 other heads"), std::string::npos) << line;
  const std::string gradients =
      error_of([&] { step.run(mine, [] { return false; }); });  // rank 1's head 1 differs
  EXPECT_NE(gradients.find("head 1's averaged gradients at step 1 on rank 1 differ from rank 0's"),
            std::string::npos)
      << gradients;
  EXPECT_EQ(hooks.steps_verified(), 1);
  // At evaluation: head 1 differs on rank 1; the model (head 0) is the same everywhere.
  {
    torch::NoGradGuard no_grad;
    if (mpi_.rank() == 1) step.head_weight(1).view(-1)[0] += 1.0f;
  }
  EXPECT_NO_THROW(pets::train::check_model_on_all_ranks(comm_, *model, 1));
  const std::string heads =
      error_of([&] { pets::train::check_model_on_all_ranks(comm_, *model, 1, &step); });
  EXPECT_NE(heads.find("epoch 1: head 1's weight and bias on rank 1 differ from rank 0's"),
            std::string::npos)
      << heads;
}

TEST_F(TrainStepTest, Bf16FeaturesAreFp32AndClose) {
  pets::model::ResNet50d model = make_model();
  pets::data::Batch b = global_images(0, 2);
  const torch::Tensor images = pets::train::batch_images(b, torch::kCPU);
  const torch::Tensor fp32 = pets::train::BackboneForward()(*model, nullptr, images);
  const torch::Tensor bf16 =
      pets::train::BackboneForward(torch::kBFloat16)(*model, nullptr, images);
  EXPECT_EQ(fp32.scalar_type(), torch::kFloat32);
  EXPECT_EQ(bf16.scalar_type(), torch::kFloat32);
  EXPECT_EQ(fp32.sizes(), (std::vector<int64_t>{2, 2048}));
  EXPECT_FALSE(fp32.requires_grad());
  EXPECT_FALSE(torch::equal(fp32, bf16));  // autocast did run
  EXPECT_LT((fp32 - bf16).abs().max().item<double>(), 0.05 * fp32.abs().max().item<double>());
}

/// Every buffer of `model` (BatchNorm statistics and counters), copied.
std::vector<torch::Tensor> buffers_of(const pets::model::ResNet50d& model) {
  std::vector<torch::Tensor> out;
  for (const auto& b : model->named_buffers(true)) out.push_back(b.value().clone());
  return out;
}

bool same_tensors(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (!torch::equal(a[i], b[i])) return false;
  return true;
}

// The warm-up before the first epoch (Backend::warm_up on a GPU) runs train-mode forwards, which
// update the BatchNorm statistics: they are put back, so the step after it is the step without.
TEST_F(TrainStepTest, AWarmUpForwardChangesNothingTheStepSees) {
  pets::model::ResNet50d warmed = make_model();
  pets::model::ResNet50d plain = make_model();
  warmed->train();
  plain->train();
  const std::vector<torch::Tensor> before = buffers_of(warmed);
  // A train-mode forward does change them: what the warm-up must undo.
  pets::model::ResNet50d changed = make_model();
  changed->train();
  pets::data::Batch some = global_images(0, 3);
  pets::train::BackboneForward()(*changed, nullptr, pets::train::batch_images(some, torch::kCPU));
  ASSERT_FALSE(same_tensors(buffers_of(changed), before));

  pets::train::warm_up_forward(pets::train::BackboneForward(), *warmed, nullptr, {3, 0, 2, 3},
                               kSize, torch::kCPU);
  EXPECT_TRUE(same_tensors(buffers_of(warmed), before));
  EXPECT_FALSE(warmed->fc->weight.grad().defined());
  EXPECT_TRUE(torch::equal(warmed->fc->weight, plain->fc->weight));

  TrainStep a(*warmed, comm_, schedule(), StepSettings{});
  TrainStep b(*plain, comm_, schedule(), StepSettings{});
  pets::data::Batch mine = global_images(mpi_.rank() * 2, 2);
  const StepResult after_warm_up = a.run(mine, [] { return false; });
  const StepResult without = b.run(mine, [] { return false; });
  EXPECT_EQ(after_warm_up.loss_sum, without.loss_sum);
  EXPECT_TRUE(torch::equal(warmed->fc->weight, plain->fc->weight));
  EXPECT_TRUE(same_tensors(buffers_of(warmed), buffers_of(plain)));
}

}  // namespace
