// Checkpoints: round trip, the latest pointer, refusal of damaged files with fallback to the
// previous complete one, and refusal of an older pets_train's format without fallback.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "pets/model/state_dict.hpp"
#include "pets/train/state/checkpoint.hpp"
#include "pets/util/error.hpp"

namespace {

namespace fs = std::filesystem;
using pets::train::Checkpoint;

/// The digest pets_train wrote before xxh3-64: FNV-1a 64 over the state text, then each
/// tensor's name, dtype name, sizes and bytes, as 16 hex digits.
std::string fnv1a_digest(const std::string& state_text, const pets::model::NamedTensors& tensors) {
  std::uint64_t h = 1469598103934665603ull;
  const auto add = [&h](const void* data, std::size_t size) {
    const auto* p = static_cast<const unsigned char*>(data);
    for (std::size_t i = 0; i < size; ++i) {
      h ^= p[i];
      h *= 1099511628211ull;
    }
  };
  add(state_text.data(), state_text.size());
  for (const auto& [name, tensor] : tensors) {
    const torch::Tensor t = tensor.detach().to(torch::kCPU).contiguous();
    add(name.data(), name.size());
    const std::string type = c10::toString(t.scalar_type());
    add(type.data(), type.size());
    for (int64_t d : t.sizes()) add(&d, sizeof d);
    add(t.data_ptr(), t.numel() * t.element_size());
  }
  char text[17];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(h));
  return text;
}

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

TEST_F(CheckpointTest, GivenAsPretrainedWeightsItNamesResume) {
  const std::string path = save(3);
  torch::nn::Linear module(4, 3);
  try {
    pets::model::load_state_dict(*module, path);
    FAIL() << "a checkpoint loaded as weights";
  } catch (const pets::UsageError& e) {
    EXPECT_EQ(std::string(e.what()),
              path + " is a pets_train checkpoint, not model weights: continue its run with " +
                  "--resume --out " + dir_.string() +
                  ", or start from the model.safetensors a finished run writes there");
  }
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

TEST_F(CheckpointTest, DigestIsXxh3OfStateAndTensors) {
  const std::string path = save(4);
  const auto file = pets::model::SafetensorsFile::open(path);
  const std::string digest = file.metadata().at("pets_digest");
  ASSERT_EQ(digest.size(), 8u + 16u) << digest;
  EXPECT_EQ(digest.substr(0, 8), "xxh3-64:");
  EXPECT_EQ(digest.find_first_not_of("0123456789abcdef", 8), std::string::npos) << digest;
  // Another value in one tensor, another digest.
  const std::string other = pets::train::save_checkpoint(
      (dir_ / "other").string(), 4, {{"sched_step", 40}},
      {{"fc.weight", torch::full({3, 4}, 4.f)}, {"adam.step", torch::tensor({int64_t{8}})}});
  EXPECT_NE(pets::model::SafetensorsFile::open(other).metadata().at("pets_digest"), digest);
}

TEST_F(CheckpointTest, OlderDigestFormatIsRefusedWithoutFallback) {
  save(1);
  // ckpt-2 exactly as the previous pets_train wrote it (FNV-1a digest), named by `latest`.
  const nlohmann::json state = {{"sched_step", 20}, {"index", 2}};
  const std::string state_text = state.dump();
  const pets::model::NamedTensors old_tensors = tensors(2.f);
  const std::string old = (dir_ / "ckpt-2.safetensors").string();
  pets::model::write_tensors(old, old_tensors,
                             {{"format", "pt"},
                              {"pets_state", state_text},
                              {"pets_digest", fnv1a_digest(state_text, old_tensors)}});
  std::ofstream(dir_ / "latest") << "ckpt-2.safetensors\n";

  try {
    pets::train::read_checkpoint(old);
    FAIL() << "an older format was accepted";
  } catch (const pets::train::IncompatibleCheckpoint& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find(old), std::string::npos) << what;
    EXPECT_NE(what.find("written by an older pets_train"), std::string::npos) << what;
    EXPECT_NE(what.find("fnv1a"), std::string::npos) << what;
    EXPECT_NE(what.find("start a fresh run"), std::string::npos) << what;
  }
  // Not mistaken for damage: no fallback to ckpt-1, the refusal reaches the caller (exit 2).
  std::vector<std::string> notices;
  EXPECT_THROW(pets::train::load_latest_checkpoint(dir_.string(), &notices),
               pets::train::IncompatibleCheckpoint);
  EXPECT_TRUE(notices.empty());
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
