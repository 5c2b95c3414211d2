// Checkpoints under crashes and full disks: a writer killed at random points of its writes, many
// times, or stopped by a file-size limit, never leaves `latest` naming an incomplete checkpoint.
// Two mechanisms each guarantee it (files replaced by rename; the pointer moved only after the
// file is complete): with both removed, the kill test fails.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <random>

#include "pets/train/state/checkpoint.hpp"
#include "pets/util/error.hpp"

namespace {

namespace fs = std::filesystem;

class CheckpointCrash : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("pets_crash_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  /// Big enough (4 MiB) that a write takes a while and a kill lands inside it.
  static pets::model::NamedTensors payload(int64_t index) {
    return {{"fc.weight", torch::full({1024, 1024}, static_cast<float>(index))},
            {"step", torch::tensor({index})}};
  }
  void save(int64_t index) const {
    pets::train::save_checkpoint(dir_.string(), index, {{"index_copy", index}}, payload(index));
  }
  /// The latest checkpoint must verify and hold its own index's values.
  int64_t check_latest() const {
    std::vector<std::string> notices;
    const auto ckpt = pets::train::load_latest_checkpoint(dir_.string(), &notices);
    EXPECT_TRUE(notices.empty()) << notices.front();
    if (!ckpt) return -1;
    EXPECT_EQ(ckpt->state.at("index_copy").get<int64_t>(), ckpt->index);
    EXPECT_EQ(ckpt->tensors.at(0).second[7][9].item<float>(), static_cast<float>(ckpt->index));
    return ckpt->index;
  }
  fs::path dir_;
};

TEST_F(CheckpointCrash, KilledAtRandomPointsNeverLeavesAPartialLatest) {
  save(0);
  std::mt19937 rng(1234);
  int64_t last_seen = 0;
  // 25 rounds; on a machine so loaded that no write completed in them, more, with longer times
  // before the kill (up to ~2 s), until one has.
  for (int round = 0; round < 25 || (last_seen == 0 && round < 60); ++round) {
    const pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      for (int64_t i = last_seen + 1;; ++i) save(i);  // until killed
    }
    const int longest = round < 25 ? 60'000 : 60'000 * (1 + (round - 25));
    ::usleep(std::uniform_int_distribution<int>(2'000, longest)(rng));
    ::kill(child, SIGKILL);
    int status = 0;
    ::waitpid(child, &status, 0);
    ASSERT_TRUE(WIFSIGNALED(status));
    const int64_t latest = check_latest();
    ASSERT_GE(latest, last_seen) << "round " << round;
    last_seen = latest;
  }
  EXPECT_GT(last_seen, 0) << "no write ever completed: the kills came too early to test anything";
}

TEST_F(CheckpointCrash, FileSizeLimitFailsTheWriteAndKeepsThePrevious) {
  save(1);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::signal(SIGXFSZ, SIG_IGN);  // the write then fails with EFBIG, as on a full disk
    rlimit limit{1 << 20, 1 << 20};
    ::setrlimit(RLIMIT_FSIZE, &limit);
    try {
      save(2);
    } catch (const pets::Error&) {
      ::_exit(3);
    }
    ::_exit(0);
  }
  int status = 0;
  ::waitpid(child, &status, 0);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 3) << "the over-limit write did not fail";
  EXPECT_EQ(check_latest(), 1);
  for (const auto& entry : fs::directory_iterator(dir_))
    EXPECT_EQ(entry.path().filename().string().find(".tmp."), std::string::npos)
        << "temporary file left: " << entry.path();
}

}  // namespace
