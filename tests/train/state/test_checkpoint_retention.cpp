// --keep-checkpoints: which checkpoints prune_checkpoints keeps in a real run folder (the newest,
// the one `latest` names, the best epoch's, any it cannot read, any newer than `latest`), the
// shards it removes with theirs, and the default it resolves.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <set>

#include "pets/train/state/checkpoint.hpp"
#include "pets/train/state/checkpoint_retention.hpp"

namespace {

namespace fs = std::filesystem;
using pets::train::checkpoint_file_name;
using pets::train::prune_checkpoints;

class RetentionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("pets_retention_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  /// A checkpoint at `index` whose state is at `step` of `epoch` (step 0: the end of epoch - 1).
  void write(int64_t index, int64_t epoch, int64_t step = 0,
             const std::optional<pets::train::ShardSet>& shards = std::nullopt) {
    const nlohmann::json state = {{"epoch", epoch}, {"position", {{"step", step}}}};
    pets::train::write_checkpoint_file(dir_.string(), index, state,
                                       {{"fc.weight", torch::full({2, 3}, float(index))}}, shards);
  }
  /// Checkpoints of epochs 1 .. n, the end of each, at index 10 e; `latest` at the last.
  void write_epochs(int n) {
    for (int e = 1; e <= n; ++e) write(10 * e, e);
    pets::train::point_latest_at(dir_.string(), 10 * n);
  }
  std::set<std::string> names() const {
    std::set<std::string> out;
    for (const auto& entry : fs::directory_iterator(dir_))
      out.insert(entry.path().filename().string());
    return out;
  }
  std::set<std::string> checkpoints(std::initializer_list<int64_t> indices) const {
    std::set<std::string> out{"latest"};
    for (const int64_t i : indices) out.insert(checkpoint_file_name(i));
    return out;
  }

  fs::path dir_;
};

TEST_F(RetentionTest, KeepsTheNewestAndTheBestEpochs) {
  write_epochs(5);
  // ckpt-20 ends epoch 1 (0-based), the best.
  const auto removed = prune_checkpoints(dir_.string(), 2, 1);
  EXPECT_EQ(removed,
            (std::vector<std::string>{checkpoint_file_name(30), checkpoint_file_name(10)}));
  EXPECT_EQ(names(), checkpoints({50, 40, 20}));
  // A later prune with the best now the newest removes the old best.
  EXPECT_EQ(prune_checkpoints(dir_.string(), 2, 4).size(), 1u);
  EXPECT_EQ(names(), checkpoints({50, 40}));
}

TEST_F(RetentionTest, ZeroKeepsEveryCheckpoint) {
  write_epochs(4);
  EXPECT_TRUE(prune_checkpoints(dir_.string(), 0, std::nullopt).empty());
  EXPECT_EQ(names(), checkpoints({10, 20, 30, 40}));
}

TEST_F(RetentionTest, OneKeepsLatestAlone) {
  write_epochs(3);
  EXPECT_EQ(prune_checkpoints(dir_.string(), 1, std::nullopt).size(), 2u);
  EXPECT_EQ(names(), checkpoints({30}));
}

TEST_F(RetentionTest, NeverTouchesACheckpointNewerThanLatest) {
  write_epochs(3);
  write(35, 3, 5);  // a stop's checkpoint whose shards did not all come: never `latest`
  prune_checkpoints(dir_.string(), 1, std::nullopt);
  EXPECT_EQ(names(), checkpoints({30, 35}));
}

TEST_F(RetentionTest, RemovesAMidEpochCheckpointWithItsShards) {
  write(10, 1);
  write(15, 1, 5, pets::train::ShardSet{1, 5, 3});
  for (int rank = 1; rank < 3; ++rank)
    pets::train::write_shard_file(dir_.string(), {15, 1, 5, rank}, {{"epoch", 1}},
                                  {{"bn", torch::zeros({2})}});
  write(20, 2);
  pets::train::point_latest_at(dir_.string(), 20);
  const auto removed = prune_checkpoints(dir_.string(), 1, 0);  // ckpt-10 ends epoch 0
  EXPECT_EQ(removed.size(), 3u);
  EXPECT_EQ(names(), checkpoints({10, 20}));
}

TEST_F(RetentionTest, KeepsWhatItCannotRead) {
  write_epochs(3);
  std::ofstream(dir_ / checkpoint_file_name(5)) << "not a checkpoint";
  prune_checkpoints(dir_.string(), 1, std::nullopt);
  EXPECT_EQ(names(), checkpoints({5, 30}));
}

TEST_F(RetentionTest, NothingWithoutLatest) {
  for (int e = 1; e <= 3; ++e) write(10 * e, e);
  EXPECT_TRUE(prune_checkpoints(dir_.string(), 1, std::nullopt).empty());
  EXPECT_EQ(names().size(), 3u);
}

TEST(Retention, EpochEndedBy) {
  using pets::train::epoch_ended_by;
  EXPECT_EQ(epoch_ended_by(R"({"epoch": 3, "position": {"step": 0}})"), 2);
  EXPECT_EQ(epoch_ended_by(R"({"epoch": 3, "position": {"step": 4}})"), std::nullopt);
  EXPECT_EQ(epoch_ended_by(R"({"epoch": 0, "position": {"step": 0}})"), std::nullopt);
  EXPECT_EQ(epoch_ended_by(R"({"epoch": 3})"), std::nullopt);
  EXPECT_EQ(epoch_ended_by("not json"), std::nullopt);
}

TEST(Retention, TheDefaultKeepsEveryFrozenCheckpointAndThreeTrainedOnes) {
  pets::train::TrainOptions o;
  EXPECT_EQ(pets::train::checkpoints_kept(o), 0);
  o.unfreeze = pets::train::Unfreeze::kLayer4;
  EXPECT_EQ(pets::train::checkpoints_kept(o), 3);
  o.keep_checkpoints = 5;
  EXPECT_EQ(pets::train::checkpoints_kept(o), 5);
  o.unfreeze = pets::train::Unfreeze::kNone;
  o.keep_checkpoints = 1;
  EXPECT_EQ(pets::train::checkpoints_kept(o), 1);
}

}  // namespace
