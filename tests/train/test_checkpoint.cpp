// Checkpoints: round trip, the latest pointer, and refusal of damaged files with fallback to the
// previous complete one.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "pets/train/checkpoint.hpp"
#include "pets/util/error.hpp"

namespace {

namespace fs = std::filesystem;
using pets::train::Checkpoint;

class CheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("pets_ckpt_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  pets::model::NamedTensors tensors(float value) const {
    return {{"fc.weight", torch::full({3, 4}, value)}, {"adam.step", torch::tensor({int64_t{7}})}};
  }
  std::string save(int64_t index) {
    return pets::train::save_checkpoint(dir_.string(), index, {{"sched_step", index * 10}},
                                        tensors(static_cast<float>(index)));
  }
  static void flip_byte(const std::string& path, std::streamoff from_end) {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(-from_end, std::ios::end);
    char c = 0;
    f.get(c);
    f.seekp(-from_end, std::ios::end);
    f.put(static_cast<char>(c ^ 0x10));
  }
  fs::path dir_;
};

TEST_F(CheckpointTest, RoundTripAndLatest) {
  save(1);
  save(2);
  std::vector<std::string> notices;
  const auto ckpt = pets::train::load_latest_checkpoint(dir_.string(), &notices);
  ASSERT_TRUE(ckpt.has_value());
  EXPECT_TRUE(notices.empty());
  EXPECT_EQ(ckpt->index, 2);
  EXPECT_EQ(ckpt->state.at("sched_step").get<int64_t>(), 20);
  ASSERT_EQ(ckpt->tensors.size(), 2u);
  EXPECT_TRUE(torch::equal(ckpt->tensors[0].second, torch::full({3, 4}, 2.f)));
}

TEST_F(CheckpointTest, EmptyFolderHasNone) {
  EXPECT_FALSE(pets::train::load_latest_checkpoint(dir_.string(), nullptr).has_value());
}

TEST_F(CheckpointTest, FlippedTensorByteIsRefusedAndOlderOneUsed) {
  save(1);
  const std::string second = save(2);
  flip_byte(second, 20);  // inside fc.weight's data
  EXPECT_THROW(pets::train::read_checkpoint(second), pets::UsageError);
  std::vector<std::string> notices;
  const auto ckpt = pets::train::load_latest_checkpoint(dir_.string(), &notices);
  ASSERT_TRUE(ckpt.has_value());
  EXPECT_EQ(ckpt->index, 1);
  ASSERT_EQ(notices.size(), 1u);
  EXPECT_NE(notices[0].find(second), std::string::npos) << notices[0];
  EXPECT_NE(notices[0].find("checksum mismatch"), std::string::npos) << notices[0];
}

TEST_F(CheckpointTest, TruncatedFileIsRefused) {
  save(1);
  const std::string second = save(2);
  fs::resize_file(second, fs::file_size(second) - 5);
  std::vector<std::string> notices;
  const auto ckpt = pets::train::load_latest_checkpoint(dir_.string(), &notices);
  ASSERT_TRUE(ckpt.has_value());
  EXPECT_EQ(ckpt->index, 1);
  EXPECT_EQ(notices.size(), 1u);
}

TEST_F(CheckpointTest, FlippedHeaderStateIsRefused) {
  const std::string path = save(3);
  // Change the recorded epoch inside the JSON state without breaking the JSON.
  std::ifstream in(path, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), {});
  in.close();
  const auto at = bytes.find("sched_step\\\":30");
  ASSERT_NE(at, std::string::npos);
  bytes[at + 13] = '7';
  std::ofstream(path, std::ios::binary) << bytes;
  try {
    pets::train::read_checkpoint(path);
    FAIL() << "damaged checkpoint accepted";
  } catch (const pets::UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("checksum mismatch"), std::string::npos) << e.what();
  }
}

TEST_F(CheckpointTest, FileNewerThanLatestPointerIsIgnored) {
  save(1);
  save(2);
  // A crash after writing epoch 3's file but before the pointer moved: epoch 2 stays latest.
  fs::copy_file(dir_ / "ckpt-2.safetensors", dir_ / "ckpt-3.safetensors");
  const auto ckpt = pets::train::load_latest_checkpoint(dir_.string(), nullptr);
  ASSERT_TRUE(ckpt.has_value());
  EXPECT_EQ(ckpt->index, 2);
}

}  // namespace
