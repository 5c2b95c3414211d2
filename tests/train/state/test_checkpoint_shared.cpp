// share_latest_checkpoint under mpiexec -n 2: rank 0 alone reads the checkpoint and looks for its
// shards, and every rank gets what it found. Each rank is given its own folder, and rank 1's holds
// another run's checkpoint (or none at all): whatever rank 1 ends with can only have come from
// rank 0's folder. What rank 0 refuses ends every rank with rank 0's message.
#include <gtest/gtest.h>
#include <mpi.h>
#include <torch/torch.h>
#include <unistd.h>

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "pets/model/state_dict.hpp"
#include "pets/train/state/checkpoint.hpp"
#include "pets/util/error.hpp"

namespace {

namespace fs = std::filesystem;
using pets::train::Checkpoint;
using pets::train::ShardSet;

class SharedCheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
    long pid = ::getpid();
    MPI_Bcast(&pid, 1, MPI_LONG, 0, MPI_COMM_WORLD);
    root_ = fs::temp_directory_path() /
            ("pets_shared_ckpt_" + std::to_string(pid) + "_" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    dir_ = root_ / ("rank-" + std::to_string(rank_));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    fs::remove_all(dir_);
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank_ == 0) fs::remove_all(root_);
  }

  /// This rank's folder: rank 0's is the one read.
  std::string dir() const { return dir_.string(); }
  std::string rank0_dir() const { return (root_ / "rank-0").string(); }

  static pets::model::NamedTensors tensors(float value) {
    return {{"model.fc.weight", torch::full({3, 4}, value)},
            {"adam.exp_avg.0", torch::arange(6, torch::kFloat64).reshape({2, 3}) * value},
            {"model.bn1.num_batches_tracked", torch::tensor({int64_t{7}})}};
  }

  int rank_ = 0;
  int size_ = 1;
  fs::path root_;
  fs::path dir_;
};

TEST_F(SharedCheckpointTest, OnlyRankZeroReadsTheCheckpointAndEveryRankGetsIt) {
  ASSERT_EQ(size_, 2) << "run under mpiexec -n 2";
  const ShardSet shards{1, 4, 2};
  if (rank_ == 0) {
    // A mid-epoch checkpoint with rank 1's shard beside it.
    pets::train::write_checkpoint_file(dir(), 10, {{"epoch", 1}}, tensors(2.5f), shards);
    pets::train::point_latest_at(dir(), 10);
    pets::train::write_shard_file(dir(), {10, 1, 4, 1}, {{"rank", 1}}, tensors(1.0f));
  } else {
    // Another run's checkpoint, newer, and no shard: were it read here, it would win.
    pets::train::save_checkpoint(dir(), 99, {{"epoch", 7}}, tensors(-1.0f));
  }
  std::vector<std::string> notices;
  const std::optional<Checkpoint> found =
      pets::train::share_latest_checkpoint(dir(), &notices, MPI_COMM_WORLD);
  ASSERT_TRUE(found);
  EXPECT_TRUE(notices.empty());
  EXPECT_EQ(found->path, (fs::path(rank0_dir()) / "ckpt-10.safetensors").string());
  EXPECT_EQ(found->index, 10);
  EXPECT_EQ(found->state.at("epoch"), 1);
  ASSERT_TRUE(found->shards);
  EXPECT_EQ(found->shards->epoch, 1);
  EXPECT_EQ(found->shards->step, 4);
  EXPECT_EQ(found->shards->ranks, 2);
  const pets::model::NamedTensors expected = tensors(2.5f);
  ASSERT_EQ(found->tensors.size(), expected.size());
  for (std::size_t i = 0; i < expected.size(); ++i) {
    EXPECT_EQ(found->tensors[i].first, expected[i].first);
    EXPECT_EQ(found->tensors[i].second.scalar_type(), expected[i].second.scalar_type());
    EXPECT_TRUE(torch::equal(found->tensors[i].second, expected[i].second)) << expected[i].first;
  }
}

TEST_F(SharedCheckpointTest, EveryRankGetsNothingWhenRankZeroFindsNone) {
  // Rank 0's checkpoint is missing rank 1's shard (refused with a notice, on rank 0); rank 1's
  // folder has a complete one.
  if (rank_ == 0) {
    pets::train::write_checkpoint_file(dir(), 10, {{"epoch", 1}}, tensors(2.5f), ShardSet{1, 4, 2});
    pets::train::point_latest_at(dir(), 10);
  } else {
    pets::train::save_checkpoint(dir(), 10, {{"epoch", 1}}, tensors(2.5f));
  }
  std::vector<std::string> notices;
  EXPECT_FALSE(pets::train::share_latest_checkpoint(dir(), &notices, MPI_COMM_WORLD));
  if (rank_ == 0) {
    ASSERT_EQ(notices.size(), 1u);
    EXPECT_NE(notices[0].find("the shard of rank 1 (ckpt-10.epoch-1.step-4.rank-1.safetensors) is "
                              "not there"),
              std::string::npos)
        << notices[0];
  } else {
    EXPECT_TRUE(notices.empty());
  }
}

TEST_F(SharedCheckpointTest, RankZerosRefusalIsThrownOnEveryRankWithItsMessage) {
  // Rank 0's latest checkpoint is an older pets_train's (its digest format); rank 1's is fine.
  if (rank_ == 0) {
    pets::model::write_tensors((dir_ / "ckpt-3.safetensors").string(), tensors(1.0f),
                               {{pets::model::kTrainingStateMetadataKey, R"({"index":3})"},
                                {"pets_digest", "0123456789abcdef"}});
    pets::train::point_latest_at(dir(), 3);
  } else {
    pets::train::save_checkpoint(dir(), 3, {{"epoch", 1}}, tensors(1.0f));
  }
  const std::string path = (fs::path(rank0_dir()) / "ckpt-3.safetensors").string();
  try {
    pets::train::share_latest_checkpoint(dir(), nullptr, MPI_COMM_WORLD);
    ADD_FAILURE() << "rank " << rank_ << ": no error";
  } catch (const pets::train::IncompatibleCheckpoint& e) {
    EXPECT_EQ(std::string(e.what()).rfind(path + ": written by an older pets_train", 0), 0u)
        << e.what();
  }
}

}  // namespace
