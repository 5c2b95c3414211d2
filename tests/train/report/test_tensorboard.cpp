// `--tensorboard DIR` (pets/train/report/tensorboard.hpp): which tags at which global steps,
// progress points at most once an interval, no file from a rank other than 0 or before the first
// point, a resumed run's restart mark, and a failed write that warns once and lets the run go on.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "event_records.hpp"
#include "pets/train/report/tensorboard.hpp"

namespace {

namespace fs = std::filesystem;
using pets::test::DecodedEvent;
using pets::train::TensorBoardLog;
using Clock = TensorBoardLog::Clock;
using std::chrono::seconds;

fs::path fresh_folder(const std::string& name) {
  const fs::path dir =
      fs::temp_directory_path() / ("pets_tensorboard_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  return dir;
}

/// A RankLog whose stderr lines land in a temporary file.
struct CapturedLog {
  std::FILE* err = std::tmpfile();
  pets::RankLog log{true, err, err, false};
  ~CapturedLog() { std::fclose(err); }
  std::string text() {
    std::fflush(err);
    std::rewind(err);
    std::string s;
    for (int c; (c = std::fgetc(err)) != EOF;) s.push_back(static_cast<char>(c));
    return s;
  }
};

std::vector<std::string> tags(const DecodedEvent& e) {
  std::vector<std::string> t;
  for (const auto& v : e.values) t.push_back(v.tag);
  return t;
}

float value_of(const DecodedEvent& e, const std::string& tag) {
  for (const auto& v : e.values)
    if (v.tag == tag) return v.value;
  ADD_FAILURE() << "no " << tag << " at step " << e.step;
  return 0;
}

pets::train::EpochMetrics epoch_metrics() {
  pets::train::EpochMetrics m;
  m.accuracy = 91.25;
  m.train_loss = 0.5;
  m.lr = 1e-3;
  m.train_images_per_s = 120;
  m.eval_images_per_s = 400;
  return m;
}

TEST(TensorBoardLog, ProgressAtTheIntervalAndEpochsAtTheirLastStep) {
  const fs::path dir = fresh_folder("points");
  CapturedLog captured;
  TensorBoardLog board(dir.string(), true, seconds(30), captured.log);
  ASSERT_TRUE(board.active());
  EXPECT_FALSE(fs::exists(dir)) << "made before the first point";
  const Clock::time_point t0 = Clock::now();
  board.progress(1, 2.0, 10, 1e-3, t0);
  board.progress(2, 1.9, 11, 1e-3, t0 + seconds(29));  // within the interval: no point
  board.progress(3, 1.8, 12, 2e-3, t0 + seconds(30));
  board.progress(4, 1.7, 13, 2e-3, t0 + seconds(31));  // no point
  board.epoch(4, epoch_metrics());
  // A progress point at an epoch's last step holds the epoch's train/ values already.
  board.progress(8, 0.5, 120, 1e-3, t0 + seconds(90));
  board.epoch(8, epoch_metrics());
  ASSERT_FALSE(board.path().empty());
  const std::vector<DecodedEvent> events = pets::test::read_events(board.path());
  ASSERT_EQ(events.size(), 7u);
  EXPECT_EQ(events[0].file_version, "brain.Event:2");
  // A new run starts at step 1: TensorBoard drops what earlier files of DIR hold.
  EXPECT_TRUE(events[1].session_start);
  EXPECT_EQ(events[1].step, 1);
  const std::vector<std::string> train = {"train/loss", "train/images_per_s", "train/lr"};
  EXPECT_EQ(events[2].step, 1);
  EXPECT_EQ(tags(events[2]), train);
  EXPECT_EQ(value_of(events[2], "train/loss"), 2.0f);
  EXPECT_EQ(events[3].step, 3);
  EXPECT_EQ(value_of(events[3], "train/images_per_s"), 12.0f);
  EXPECT_EQ(value_of(events[3], "train/lr"), 2e-3f);
  EXPECT_EQ(events[4].step, 4);
  EXPECT_EQ(tags(events[4]),
            (std::vector<std::string>{"eval/accuracy", "eval/images_per_s", "train/loss",
                                      "train/images_per_s", "train/lr"}));
  EXPECT_EQ(value_of(events[4], "eval/accuracy"), 91.25f);
  EXPECT_EQ(value_of(events[4], "eval/images_per_s"), 400.0f);
  EXPECT_EQ(value_of(events[4], "train/loss"), 0.5f);
  EXPECT_EQ(value_of(events[4], "train/images_per_s"), 120.0f);
  EXPECT_EQ(value_of(events[4], "train/lr"), 1e-3f);
  EXPECT_EQ(events[5].step, 8);
  EXPECT_EQ(tags(events[5]), train);
  EXPECT_EQ(events[6].step, 8);
  EXPECT_EQ(tags(events[6]), (std::vector<std::string>{"eval/accuracy", "eval/images_per_s"}));
  for (std::size_t i = 2; i < events.size(); ++i) EXPECT_FALSE(events[i].session_start);
  EXPECT_EQ(captured.text(), "");
  fs::remove_all(dir);
}

// A sweep: besides the run's series (which follow each epoch's best head), a series per head.
TEST(TensorBoardLog, ASweepHasASeriesPerHead) {
  const fs::path dir = fresh_folder("sweep");
  CapturedLog captured;
  TensorBoardLog board(dir.string(), true, seconds(30), captured.log);
  pets::train::EpochMetrics m = epoch_metrics();
  for (const double max_lr : {1e-3, 3e-2}) {
    pets::train::HeadMetrics h;
    h.max_lr = max_lr;
    h.lr = max_lr / 25;
    h.train_loss = max_lr * 10;
    h.accuracy = max_lr * 1000;
    m.heads.push_back(h);
  }
  board.epoch(6, m);
  const std::vector<DecodedEvent> events = pets::test::read_events(board.path());
  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(events[2].step, 6);
  EXPECT_EQ(tags(events[2]),
            (std::vector<std::string>{
                "eval/accuracy", "eval/images_per_s", "train/loss", "train/images_per_s",
                "train/lr", "eval/accuracy/head_0", "train/loss/head_0", "train/lr/head_0",
                "eval/accuracy/head_1", "train/loss/head_1", "train/lr/head_1"}));
  EXPECT_EQ(value_of(events[2], "eval/accuracy/head_1"), 30.0f);
  EXPECT_EQ(value_of(events[2], "train/loss/head_0"), 1e-2f);
  EXPECT_EQ(value_of(events[2], "train/lr/head_1"), static_cast<float>(3e-2 / 25));
  fs::remove_all(dir);
}

TEST(TensorBoardLog, IntervalZeroIsEveryStep) {
  const fs::path dir = fresh_folder("every");
  CapturedLog captured;
  TensorBoardLog board(dir.string(), true, seconds(0), captured.log);
  const Clock::time_point t0 = Clock::now();
  for (int step = 1; step <= 5; ++step) board.progress(step, 1, 1, 1, t0);
  EXPECT_EQ(pets::test::read_events(board.path()).size(), 7u);
  fs::remove_all(dir);
}

TEST(TensorBoardLog, NothingWithoutAFolderOrOnOtherRanks) {
  const fs::path dir = fresh_folder("other_rank");
  CapturedLog captured;
  TensorBoardLog none("", true, seconds(0), captured.log);
  TensorBoardLog rank1(dir.string(), false, seconds(0), captured.log);
  for (TensorBoardLog* board : {&none, &rank1}) {
    EXPECT_FALSE(board->active());
    board->progress(1, 1, 1, 1);
    board->epoch(1, epoch_metrics());
    EXPECT_EQ(board->path(), "");
  }
  EXPECT_FALSE(fs::exists(dir));
}

TEST(TensorBoardLog, AResumedRunMarksItsRestartInANewFile) {
  const fs::path dir = fresh_folder("resume");
  CapturedLog captured;
  std::string first_path;
  {
    TensorBoardLog first(dir.string(), true, seconds(0), captured.log);
    first.progress(10, 1, 1, 1);
    first_path = first.path();
  }
  TensorBoardLog board(dir.string(), true, seconds(0), captured.log);
  board.resumed(6);
  board.progress(7, 1, 1, 1);
  EXPECT_NE(board.path(), first_path);
  EXPECT_EQ(pets::test::read_events(first_path).size(), 3u) << "the earlier file changed";
  const std::vector<DecodedEvent> events = pets::test::read_events(board.path());
  ASSERT_EQ(events.size(), 3u);
  EXPECT_TRUE(events[1].session_start);
  EXPECT_EQ(events[1].step, 7);
  EXPECT_EQ(events[2].step, 7);
  EXPECT_FALSE(events[2].session_start);
  fs::remove_all(dir);
}

TEST(TensorBoardLog, AResumeAtAnotherRankCountMarksNoStart) {
  const fs::path dir = fresh_folder("rescaled");
  CapturedLog captured;
  TensorBoardLog board(dir.string(), true, seconds(0), captured.log);
  board.resumed(std::nullopt);
  board.progress(3, 1, 1, 1);
  const std::vector<DecodedEvent> events = pets::test::read_events(board.path());
  ASSERT_EQ(events.size(), 2u);
  EXPECT_FALSE(events[1].session_start);
  EXPECT_EQ(events[1].step, 3);
  fs::remove_all(dir);
}

TEST(TensorBoardLog, AFailedWriteWarnsOnceAndTheRunGoesOn) {
  // A file where the folder should be (as if removed and replaced during the run).
  const fs::path dir = fresh_folder("fails");
  std::ofstream(dir.string()) << "x";
  CapturedLog captured;
  TensorBoardLog board(dir.string(), true, seconds(0), captured.log);
  EXPECT_NO_THROW(board.progress(1, 1, 1, 1));
  EXPECT_FALSE(board.active());
  EXPECT_NO_THROW(board.progress(2, 1, 1, 1));
  EXPECT_NO_THROW(board.epoch(2, epoch_metrics()));
  const std::string text = captured.text();
  EXPECT_EQ(text.rfind("warning: --tensorboard: cannot make the folder " + dir.string(), 0), 0u)
      << text;
  EXPECT_NE(text.find("the run goes on without TensorBoard points"), std::string::npos) << text;
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 1) << text;
  fs::remove(dir);
}

}  // namespace
