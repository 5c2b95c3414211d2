// The checkpoint schema in one place: a TrainingState survives save and read bit for bit, its
// JSON keys and tensor names are pinned, and a checkpoint that lacks one is refused with its
// path (a usage error, as every other bad checkpoint).
#include <gtest/gtest.h>
#include <torch/torch.h>
#include <unistd.h>

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "pets/data/loader.hpp"
#include "pets/train/state/checkpoint.hpp"
#include "pets/train/state/training_state.hpp"
#include "pets/util/error.hpp"

namespace {

namespace fs = std::filesystem;
using pets::train::TrainingState;

TrainingState sample(bool mid_epoch) {
  TrainingState s;
  pets::train::TrainOptions o;
  o.epochs = 3;
  o.batch_size = 4;
  o.seed = 7;
  o.mixed_precision = pets::train::MixedPrecision::kFp16;
  s.config = pets::train::RunConfig::of(o, {"a", "b"});
  s.world_size = 2;
  s.steps_per_epoch = 6;
  s.epoch = 1;
  s.position.step = mid_epoch ? 4 : 0;
  s.position.loss_sum = mid_epoch ? 12.5 : 0.0;
  s.position.images = mid_epoch ? 32 : 0;
  s.adam_steps = 9;
  s.schedule_steps = 10;
  s.schedule_steps_per_update = 2;
  s.last_lr = 1.25e-3;
  pets::train::EpochMetrics m;
  m.epoch = 0;
  m.accuracy = 50.0;
  m.correct = 5;
  m.evaluated = 10;
  s.history = {m};
  s.grad_scaler = pets::train::GradScalerState{32768.0, 17};
  s.store = {"0123456789abcdef0123456789abcdef", "/data/pets.h5"};
  torch::manual_seed(3);
  s.model = {{"fc.weight", torch::randn({2, 5})},
             {"fc.bias", torch::randn({2})},
             {"bn1.running_mean", torch::randn({5})},
             {"bn1.num_batches_tracked", torch::tensor(int64_t{11})}};
  if (mid_epoch) s.rank_buffers = torch::randn({2, 7}, torch::kFloat64);
  s.adam_exp_avg = {torch::randn({2, 5}), torch::randn({2})};
  s.adam_exp_avg_sq = {torch::rand({2, 5}), torch::rand({2})};
  return s;
}

class TrainingStateTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("pets_state_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

void expect_same_tensors(const TrainingState::Tensors& a, const TrainingState::Tensors& b) {
  ASSERT_EQ(a.size(), b.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].first, b[i].first);
    EXPECT_TRUE(torch::equal(a[i].second, b[i].second)) << a[i].first;
  }
}

TEST_F(TrainingStateTest, SavedAndReadBackUnchanged) {
  for (bool mid_epoch : {false, true}) {
    const TrainingState s = sample(mid_epoch);
    const std::string path = s.save(dir_.string());
    EXPECT_EQ(fs::path(path).filename(), "ckpt-10.safetensors");
    const TrainingState r = TrainingState::from_checkpoint(pets::train::read_checkpoint(path));
    EXPECT_EQ(r.to_json(), s.to_json()) << r.to_json().dump();
    EXPECT_EQ(r.mid_epoch(), mid_epoch);
    EXPECT_EQ(r.config.labels, s.config.labels);
    EXPECT_EQ(r.config.options, s.config.options);
    EXPECT_EQ(r.position.loss_sum, s.position.loss_sum);
    EXPECT_EQ(r.last_lr, s.last_lr);
    EXPECT_EQ(r.schedule_steps_per_update, 2);
    ASSERT_TRUE(r.grad_scaler);
    EXPECT_EQ(r.grad_scaler->scale, 32768.0);
    EXPECT_EQ(r.grad_scaler->growth_tracker, 17);
    expect_same_tensors(r.model, s.model);
    EXPECT_EQ(r.rank_buffers.defined(), mid_epoch);
    if (mid_epoch) {
      EXPECT_TRUE(torch::equal(r.rank_buffers, s.rank_buffers));
    }
    ASSERT_EQ(r.adam_exp_avg.size(), 2u);
    for (std::size_t i = 0; i < 2; ++i) {
      EXPECT_TRUE(torch::equal(r.adam_exp_avg[i], s.adam_exp_avg[i]));
      EXPECT_TRUE(torch::equal(r.adam_exp_avg_sq[i], s.adam_exp_avg_sq[i]));
    }
    // What resume compares.
    EXPECT_EQ(r.shape().world_size, 2);
    EXPECT_EQ(r.shape().steps_per_epoch, 6);
    EXPECT_EQ(r.shape().store.id, "0123456789abcdef0123456789abcdef");
    EXPECT_EQ(r.shape().store.path, "/data/pets.h5");
  }
}

// A checkpoint written before store ids: read with an empty id, which resume then refuses
// against any store that has one (test_resume_check.cpp).
TEST_F(TrainingStateTest, CheckpointWithoutStoreReadsAsUnknownStore) {
  const TrainingState s = sample(false);
  pets::train::Checkpoint c;
  c.path = "dir/ckpt-10.safetensors";
  c.state = s.to_json();
  c.state.erase("store");
  c.tensors = s.tensors();
  const TrainingState r = TrainingState::from_checkpoint(c);
  EXPECT_EQ(r.store.id, "");
  EXPECT_EQ(r.store.path, "");
}

// A checkpoint written before OneCycle was stepped as Accelerate steps it has no
// "schedule_steps_per_update": read as 1 (once per optimiser step), which resume refuses at
// several ranks and accepts at one, where the two schedules are the same.
TEST_F(TrainingStateTest, CheckpointOfTheEarlierScheduleIsToldApart) {
  for (const int64_t world : {1, 2, 3}) {
    TrainingState s = sample(false);
    s.world_size = world;
    s.schedule_steps_per_update = world;
    pets::train::Checkpoint c;
    c.path = "dir/ckpt-10.safetensors";
    c.state = s.to_json();
    c.tensors = s.tensors();
    const TrainingState now = TrainingState::from_checkpoint(c);
    EXPECT_EQ(now.schedule_steps_per_update, world);
    EXPECT_NO_THROW(pets::train::check_schedule_resumable(c.path, now.world_size,
                                                          now.schedule_steps_per_update, false));
    c.state.erase("schedule_steps_per_update");
    const TrainingState earlier = TrainingState::from_checkpoint(c);
    EXPECT_EQ(earlier.schedule_steps_per_update, 1);
    if (world == 1) {
      EXPECT_NO_THROW(pets::train::check_schedule_resumable(
          c.path, earlier.world_size, earlier.schedule_steps_per_update, false));
    } else {
      try {
        pets::train::check_schedule_resumable(c.path, earlier.world_size,
                                              earlier.schedule_steps_per_update, false);
        ADD_FAILURE() << "an earlier schedule at " << world << " ranks was accepted";
      } catch (const pets::UsageError& e) {
        EXPECT_EQ(std::string(e.what()).rfind("dir/ckpt-10.safetensors: written by an earlier "
                                              "pets_train",
                                              0),
                  0u)
            << e.what();
      }
    }
  }
}

// Every state a run makes records the pets_train that made it and its batching; a checkpoint
// written before they were recorded, and before Accelerate's batching (no image-size among its
// settings), reads with both empty, and resume refuses it at several ranks and accepts it at one
// (test_resume_check.cpp has the messages).
TEST_F(TrainingStateTest, TheProgramAndItsBatchingAreRecorded) {
  const TrainingState made = TrainingState::at(sample(false).shape(), 1, {}, {});
  EXPECT_EQ(made.version, PETS_VERSION);
  EXPECT_EQ(made.batching, pets::data::kTrainBatching);
  pets::train::Checkpoint c;
  c.path = "dir/ckpt-10.safetensors";
  c.state = made.to_json();
  c.tensors = made.tensors();
  EXPECT_EQ(c.state.at("version"), PETS_VERSION);
  EXPECT_EQ(c.state.at("batching"), "accelerate-even-batches");
  const TrainingState read = TrainingState::from_checkpoint(c);
  EXPECT_EQ(read.version, PETS_VERSION);
  EXPECT_EQ(read.batching, pets::data::kTrainBatching);

  c.state.erase("version");
  c.state.erase("batching");
  c.state["config"]["options"].erase("image-size");
  const TrainingState earlier = TrainingState::from_checkpoint(c);
  EXPECT_EQ(earlier.version, "");
  EXPECT_EQ(earlier.batching, "");
  const auto check = [&](int64_t world) {
    pets::train::check_batching_resumable(
        c.path, {earlier.world_size, earlier.batching, earlier.version, &earlier.config.options},
        world, pets::data::kTrainBatching, false);
  };
  EXPECT_NO_THROW(check(1));
  EXPECT_THROW(check(2), pets::UsageError);
}

TEST_F(TrainingStateTest, SchemaKeysAndTensorNames) {
  TrainingState s = sample(true);
  std::vector<std::string> keys;
  const nlohmann::json j = s.to_json();
  for (auto it = j.begin(); it != j.end(); ++it) keys.push_back(it.key());
  EXPECT_EQ(keys, (std::vector<std::string>{"adam_steps", "batching", "config", "epoch",
                                            "grad_scaler", "history", "last_lr", "position",
                                            "schedule_steps", "schedule_steps_per_update",
                                            "steps_per_epoch", "store", "version", "world_size"}));
  EXPECT_EQ(j.at("store"), (nlohmann::json{{"id", "0123456789abcdef0123456789abcdef"},
                                           {"path", "/data/pets.h5"}}));
  std::vector<std::string> names;
  for (const auto& [name, t] : s.tensors()) names.push_back(name);
  EXPECT_EQ(names, (std::vector<std::string>{
                       "model.fc.weight", "model.fc.bias", "model.bn1.running_mean",
                       "model.bn1.num_batches_tracked", "rank_buffers", "adam.exp_avg.0",
                       "adam.exp_avg_sq.0", "adam.exp_avg.1", "adam.exp_avg_sq.1"}));
  // Not fp16, not mid-epoch: neither grad_scaler nor rank_buffers.
  s.grad_scaler.reset();
  s.rank_buffers = torch::Tensor();
  EXPECT_FALSE(s.to_json().contains("grad_scaler"));
  for (const auto& [name, t] : s.tensors()) EXPECT_NE(name, "rank_buffers");
}

TEST_F(TrainingStateTest, MissingPartsAreUsageErrorsNamingTheFile) {
  const TrainingState s = sample(false);
  const auto refusal = [](const pets::train::Checkpoint& c) -> std::string {
    try {
      TrainingState::from_checkpoint(c);
    } catch (const pets::UsageError& e) {
      return e.what();
    }
    return "";
  };
  pets::train::Checkpoint base;
  base.path = "dir/ckpt-10.safetensors";
  base.state = s.to_json();
  base.tensors = s.tensors();
  EXPECT_EQ(refusal(base), "");
  for (const char* key : {"config", "epoch", "position", "history", "world_size", "last_lr"}) {
    pets::train::Checkpoint c = base;
    c.state.erase(key);
    const std::string message = refusal(c);
    EXPECT_NE(message.find("dir/ckpt-10.safetensors: bad checkpoint state"), std::string::npos)
        << key << ": " << message;
  }
  pets::train::Checkpoint c = base;
  c.state["config"]["options"]["epochs"] = 3;  // a number where the text of an option is
  EXPECT_NE(refusal(c).find("bad checkpoint state"), std::string::npos);
  c = base;
  c.tensors.pop_back();  // adam.exp_avg_sq.1
  EXPECT_EQ(refusal(c), "dir/ckpt-10.safetensors: no tensor 'adam.exp_avg_sq.1'");
  c = base;
  c.tensors.emplace_back("stray", torch::zeros({1}));
  EXPECT_EQ(refusal(c), "dir/ckpt-10.safetensors: unexpected tensor 'stray'");
  c = base;
  c.tensors.emplace_back("rank_buffers", torch::zeros({3}, torch::kFloat64));
  EXPECT_NE(refusal(c).find("not a [ranks, n] float64 tensor"), std::string::npos);
}

}  // namespace

namespace {

// A mid-epoch checkpoint whose other ranks keep their own BatchNorm statistics: rank 0's file
// records which shards belong to it, is not the latest until they are all there, and each rank
// reads back its own shard, refusing one of another state.
TEST_F(TrainingStateTest, ShardsBelongToTheirCheckpointAndCompleteIt) {
  TrainingState before = sample(false);
  before.schedule_steps = 6;
  before.save(dir_.string());
  TrainingState s = sample(true);
  s.rank_buffers = at::Tensor();
  s.rank_shards = true;
  s.world_size = 3;
  EXPECT_THROW(s.save(dir_.string()), pets::Error);  // committed only once its shards are there
  s.write(dir_.string());
  s.commit(dir_.string());
  std::vector<std::string> notices;
  std::optional<pets::train::Checkpoint> found =
      pets::train::load_latest_checkpoint(dir_.string(), &notices);
  ASSERT_TRUE(found);
  EXPECT_EQ(found->index, 6);  // without its shards the newer one is not complete
  ASSERT_EQ(notices.size(), 1u);
  EXPECT_NE(notices[0].find("ranks 1, 2 (ckpt-10.epoch-1.step-4.rank-1.safetensors, ...) are not "
                            "there"),
            std::string::npos)
      << notices[0];
  for (int rank = 1; rank < 3; ++rank) {
    TrainingState part = s;
    // The head is the same on every rank: the shard holds the names of per_rank alone.
    part.model = {{"fc.weight", torch::full({3, 2}, 7.0f)},
                  {"bn1.running_mean", torch::full({5}, 1.0f * rank)},
                  {"bn1.num_batches_tracked", torch::tensor(int64_t{11})}};
    part.per_rank = {"bn1.running_mean", "bn1.num_batches_tracked"};
    const std::string written = part.save_shard(dir_.string(), rank);
    EXPECT_EQ(fs::path(written).filename(),
              "ckpt-10.epoch-1.step-4.rank-" + std::to_string(rank) + ".safetensors");
  }
  EXPECT_THROW(s.save_shard(dir_.string(), 0), pets::Error);  // rank 0's part is the checkpoint
  TrainingState unknown = s;
  unknown.per_rank = {"bn9.running_mean"};
  EXPECT_THROW(unknown.save_shard(dir_.string(), 1), pets::Error);  // a name it does not hold
  notices.clear();
  found = pets::train::load_latest_checkpoint(dir_.string(), &notices);
  ASSERT_TRUE(found);
  EXPECT_TRUE(notices.empty());
  EXPECT_EQ(found->index, 10);
  const TrainingState read = TrainingState::from_checkpoint(*found);
  EXPECT_TRUE(read.rank_shards);
  EXPECT_FALSE(read.rank_buffers.defined());
  for (int rank = 1; rank < 3; ++rank) {
    const TrainingState own = read.read_shard(dir_.string(), rank);
    ASSERT_EQ(own.model.size(), 2u);  // fc.weight left out
    EXPECT_EQ(own.model[0].first, "bn1.running_mean");
    EXPECT_TRUE(torch::equal(own.model[0].second, torch::full({5}, 1.0f * rank)));
  }
  // A shard of another step under this one's name: refused, naming it.
  TrainingState later = s;
  later.position.step = 5;
  const std::string other = later.save_shard(dir_.string(), 2);
  fs::rename(other, dir_ / "ckpt-10.epoch-1.step-4.rank-2.safetensors");
  try {
    read.read_shard(dir_.string(), 2);
    FAIL() << "a shard of another step was read";
  } catch (const pets::UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("rank-2.safetensors: not rank 2's part of checkpoint 10 "
                                         "at epoch 1, step 4"),
              std::string::npos)
        << e.what();
  }
  fs::remove(dir_ / "ckpt-10.epoch-1.step-4.rank-2.safetensors");
  EXPECT_THROW(read.read_shard(dir_.string(), 2), pets::UsageError);
  // Shards of no checkpoint (another step a stop wrote; an index without a file) are removed,
  // those that belong to one stay.
  later.save_shard(dir_.string(), 1);
  TrainingState nowhere = s;
  nowhere.schedule_steps = 99;
  nowhere.save_shard(dir_.string(), 1);
  EXPECT_EQ(pets::train::remove_stray_shards(dir_.string()),
            (std::vector<std::string>{"ckpt-10.epoch-1.step-5.rank-1.safetensors",
                                      "ckpt-99.epoch-1.step-4.rank-1.safetensors"}));
  EXPECT_NO_THROW(read.read_shard(dir_.string(), 1));
  EXPECT_TRUE(pets::train::remove_stray_shards(dir_.string()).empty());
}

}  // namespace

TEST_F(TrainingStateTest, AnotherRanksPartHoldsItsShardAlone) {
  TrainingState s = sample(true);
  s.rank_buffers = at::Tensor();
  s.rank_shards = true;
  s.per_rank = {"bn1.running_mean", "bn1.num_batches_tracked"};
  const TrainingState part = s.shard_part();
  ASSERT_EQ(part.model.size(), 2u);  // fc left out, and Adam's moments
  EXPECT_EQ(part.model[0].first, "bn1.running_mean");
  EXPECT_TRUE(part.adam_exp_avg.empty() && part.adam_exp_avg_sq.empty());
  // Copies: training goes on changing the model's tensors in place.
  EXPECT_NE(part.model[0].second.data_ptr(), s.model[2].second.data_ptr());
  s.model[2].second.add_(1.0);
  EXPECT_FALSE(torch::equal(part.model[0].second, s.model[2].second));
  // The same shard file as the whole state writes, under the same checkpoint's name.
  const std::string written = part.save_shard(dir_.string(), 1);
  EXPECT_EQ(fs::path(written).filename(), "ckpt-10.epoch-1.step-4.rank-1.safetensors");
  const TrainingState own = s.read_shard(dir_.string(), 1);
  ASSERT_EQ(own.model.size(), 2u);
  EXPECT_TRUE(torch::equal(own.model[0].second, part.model[0].second));
  // Without shards (an epoch's start, one rank, --bn-mode eval) another rank keeps nothing.
  TrainingState whole = sample(false);
  EXPECT_TRUE(whole.shard_part().model.empty());
}
