// OneCycleLR + Adam against PyTorch's trajectory in onecycle_adam.safetensors: the lr and beta1 in
// force at every step, every loss, and the final weights of the Linear head. The schedule as
// Accelerate steps it at 1, 2 and 3 processes against onecycle_accelerate.json.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "fixture_dir.hpp"
#include "pets/model/state_dict.hpp"
#include "pets/train/step/adam.hpp"
#include "pets/train/step/onecycle.hpp"
#include "pets/util/error.hpp"

namespace {

std::map<std::string, torch::Tensor> trajectory() {
  std::map<std::string, torch::Tensor> out;
  for (auto& [k, v] :
       pets::model::read_tensors(pets::test::fixture_dir() + "/onecycle_adam.safetensors"))
    out[k] = v;
  return out;
}

double rel_error(double actual, double expected) {
  return std::abs(actual - expected) / std::max(std::abs(expected), 1e-30);
}

// The fixture's scheduler: OneCycleLR(max_lr=3e-2, epochs=5, steps_per_epoch=7) on
// Adam(lr=3e-2/25).
constexpr double kMaxLr = 3e-2;

pets::train::OneCycleOptions fixture_schedule(int64_t steps) {
  pets::train::OneCycleOptions o;
  o.max_lr = kMaxLr;
  o.total_steps = steps;
  return o;
}

TEST(OneCycle, LrAndBeta1MatchPyTorchAtEveryStep) {
  auto t = trajectory();
  const auto lr = t.at("lr").to(torch::kFloat64);
  const auto beta1 = t.at("beta1").to(torch::kFloat64);
  const int64_t steps = lr.size(0);
  pets::train::OneCycleSchedule schedule(fixture_schedule(steps));
  EXPECT_NEAR(schedule.initial_lr(), kMaxLr / 25.0, 1e-15);
  for (int64_t i = 0; i < steps; ++i) {
    EXPECT_LE(rel_error(schedule.lr(), lr[i].item<double>()), 1e-5) << "lr at step " << i;
    EXPECT_LE(rel_error(schedule.beta1(), beta1[i].item<double>()), 1e-5) << "beta1 at step " << i;
    schedule.step();
  }
}

TEST(OneCycle, SteppingPastTheEndIsAnError) {
  pets::train::OneCycleSchedule schedule(fixture_schedule(3));
  for (int i = 0; i < 3; ++i) schedule.step();  // PyTorch allows total_steps calls of step()
  EXPECT_THROW(schedule.step(), pets::Error);
  EXPECT_THROW(schedule.set_step_count(-1), pets::Error);
}

// tests/fixtures/onecycle_accelerate/onecycle_accelerate.json (its make_fixture.py ran the
// tutorial's OneCycleLR through Accelerate's AcceleratedScheduler at 1, 2 and 3 processes).
nlohmann::json accelerate_fixture() {
  const std::filesystem::path path = std::filesystem::path(PETS_FIXTURE_DIR).parent_path() /
                                     "onecycle_accelerate" / "onecycle_accelerate.json";
  std::ifstream in(path);
  EXPECT_TRUE(in) << "cannot open " << path;
  return nlohmann::json::parse(in);
}

TEST(OneCycle, MatchesAccelerateAtEveryStepAtOneTwoAndThreeRanks) {
  const nlohmann::json fixture = accelerate_fixture();
  std::set<int64_t> ranks;
  for (const nlohmann::json& c : fixture.at("cases")) {
    const auto number = [&](const char* key) { return c.at(key).get<int64_t>(); };
    const int64_t n_train = number("n_train"), batch = number("batch_size");
    const int64_t epochs = number("epochs"), processes = number("processes");
    const int64_t steps_per_epoch = number("steps_per_epoch");
    const std::string name = "n_train " + std::to_string(n_train) + ", batch " +
                             std::to_string(batch) + ", " + std::to_string(processes) + " ranks";
    ranks.insert(processes);
    const pets::train::OneCycleOptions options = pets::train::accelerate_onecycle(
        fixture.at("max_lr").get<double>(), epochs, n_train, batch, processes);
    EXPECT_EQ(options.total_steps, number("total_steps")) << name;
    // Accelerate's batches per process and epoch are the loader's steps at as many ranks.
    EXPECT_EQ((n_train + batch * processes - 1) / (batch * processes), steps_per_epoch) << name;
    const nlohmann::json& lr = c.at("lr");
    const nlohmann::json& beta1 = c.at("beta1");
    ASSERT_EQ(static_cast<int64_t>(lr.size()), epochs * steps_per_epoch) << name;
    ASSERT_EQ(beta1.size(), lr.size()) << name;
    pets::train::OneCycleSchedule schedule(options);
    for (std::size_t k = 0; k < lr.size(); ++k) {
      EXPECT_LE(rel_error(schedule.lr(), lr[k].get<double>()), 1e-12) << name << ", step " << k;
      EXPECT_LE(rel_error(schedule.beta1(), beta1[k].get<double>()), 1e-12)
          << name << ", step " << k;
      schedule.step();
    }
  }
  EXPECT_EQ(ranks, (std::set<int64_t>{1, 2, 3}));
}

// The demo set (592 training images, --batch-size 64, 5 epochs) at 3 ranks: 20 optimiser steps
// over OneCycle's 50, the last three at its end.
TEST(OneCycle, AtSeveralRanksThePositionStopsAtTotalSteps) {
  pets::train::OneCycleSchedule s(pets::train::accelerate_onecycle(kMaxLr, 5, 592, 64, 3));
  EXPECT_EQ(s.options().total_steps, 50);
  for (int64_t k = 0; k < 20; ++k) {
    EXPECT_EQ(s.position(), std::min<int64_t>(3 * k, 50)) << k;
    s.step();
  }
  EXPECT_EQ(s.step_count(), 20);
  EXPECT_EQ(s.position(), 50);
  // A resume jumps to the same point as the steps taken.
  pets::train::OneCycleSchedule resumed(s.options());
  resumed.set_step_count(7);
  EXPECT_EQ(resumed.position(), 21);
  pets::train::OneCycleSchedule stepped(s.options());
  for (int k = 0; k < 7; ++k) stepped.step();
  EXPECT_EQ(resumed.lr(), stepped.lr());
  EXPECT_EQ(resumed.beta1(), stepped.beta1());
  // As many optimiser steps as total_steps at most (no run takes more).
  resumed.set_step_count(50);
  EXPECT_EQ(resumed.position(), 50);
  EXPECT_THROW(resumed.step(), pets::Error);
}

TEST(OneCycle, ShapeOfTheCycle) {
  pets::train::OneCycleSchedule s(fixture_schedule(100));
  EXPECT_DOUBLE_EQ(s.lr(), kMaxLr / 25.0);
  EXPECT_DOUBLE_EQ(s.beta1(), 0.95);
  s.set_step_count(29);  // end of warm-up: 0.3 * 100 - 1
  EXPECT_DOUBLE_EQ(s.lr(), kMaxLr);
  EXPECT_DOUBLE_EQ(s.beta1(), 0.85);
  s.set_step_count(99);
  EXPECT_NEAR(s.lr(), kMaxLr / 25.0 / 1e4, 1e-15);
  EXPECT_DOUBLE_EQ(s.beta1(), 0.95);
}

// One fixture step loop, with the optimiser step supplied: the trainer's own Adam and LibTorch's
// must both reproduce PyTorch's trajectory.
template <typename MakeStep>
void check_adam_trajectory(MakeStep make_step) {
  auto t = trajectory();
  const auto features = t.at("features").to(torch::kFloat32);
  const auto targets = t.at("targets").to(torch::kInt64);
  const auto losses = t.at("loss").to(torch::kFloat64);
  const int64_t steps = losses.size(0);
  torch::nn::Linear head(features.size(1), t.at("init.weight").size(0));
  {
    torch::NoGradGuard no_grad;
    head->weight.copy_(t.at("init.weight"));
    head->bias.copy_(t.at("init.bias"));
  }
  pets::train::OneCycleSchedule schedule(fixture_schedule(steps));
  auto optimiser_step = make_step(head->parameters(), schedule.lr());
  for (int64_t i = 0; i < steps; ++i) {
    const auto loss = torch::nn::functional::cross_entropy(head(features), targets);
    EXPECT_LE(rel_error(loss.item<double>(), losses[i].item<double>()), 1e-4)
        << "loss at step " << i;
    loss.backward();
    optimiser_step(schedule.lr(), schedule.beta1());
    schedule.step();
    for (auto& p : head->parameters()) p.mutable_grad().zero_();
  }
  const auto check = [](const torch::Tensor& actual, const torch::Tensor& expected,
                        const char* what) {
    const double scale = expected.abs().max().item<double>();
    const double error = (actual - expected.to(actual.scalar_type())).abs().max().item<double>();
    EXPECT_LE(error, 1e-4 * scale) << what << ": max abs error " << error;
  };
  check(head->weight.detach(), t.at("final.weight"), "final.weight");
  check(head->bias.detach(), t.at("final.bias"), "final.bias");
}

TEST(OneCycle, OwnAdamTrajectoryMatchesPyTorch) {
  check_adam_trajectory([](std::vector<torch::Tensor> params, double) {
    auto adam = std::make_shared<pets::train::Adam>(std::move(params));
    return [adam](double lr, double beta1) { adam->step(lr, beta1); };
  });
}

TEST(OneCycle, LibTorchAdamTrajectoryMatchesPyTorch) {
  check_adam_trajectory([](std::vector<torch::Tensor> params, double lr0) {
    auto adam = std::make_shared<torch::optim::Adam>(params, torch::optim::AdamOptions(lr0));
    return [adam](double lr, double beta1) {
      auto& group = static_cast<torch::optim::AdamOptions&>(adam->param_groups().at(0).options());
      group.lr(lr);
      group.betas({beta1, std::get<1>(group.betas())});
      adam->step();
    };
  });
}

}  // namespace
