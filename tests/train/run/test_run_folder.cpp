// The --out folder of a run: one run at a time, a second refused naming the folder and the
// holder; no new run mixed into an earlier one's files without --resume or --overwrite, and
// --overwrite removes only pets_train's own files; --resume where there is nothing to resume
// refused, --resume=auto starting afresh only where there is no run.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <optional>

#include "pets/train/run/run_folder.hpp"
#include "pets/util/error.hpp"

namespace {

namespace fs = std::filesystem;
using pets::train::ResumeMode;
using pets::train::RunFolder;

class RunFolderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() /
            ("pets_run_folder_" + std::to_string(::getpid()) + "_" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
    fs::create_directories(root_);
    out_ = (root_ / "run").string();
  }
  void TearDown() override { fs::remove_all(root_); }

  void touch(const std::string& name) {
    fs::create_directories(out_);
    std::ofstream(fs::path(out_) / name) << "x";
  }
  bool exists(const std::string& name) const { return fs::exists(fs::path(out_) / name); }

  /// The UsageError's message when opening fails, "" when it succeeds.
  std::string refusal(ResumeMode resume, bool overwrite = false) {
    try {
      RunFolder folder(out_, resume, overwrite);
    } catch (const pets::UsageError& e) {
      return e.what();
    }
    return "";
  }

  fs::path root_;
  std::string out_;
};

#define EXPECT_MENTIONS(text, part) \
  EXPECT_NE(std::string(text).find(part), std::string::npos) << "in: " << (text)

TEST_F(RunFolderTest, FindsOnlyItsOwnFiles) {
  for (const char* name : {"ckpt-12.safetensors",
                           "ckpt-3.safetensors",
                           "latest",
                           "metrics.jsonl",
                           "model.safetensors",
                           "metrics.jsonl.tmp.123",
                           "ckpt-4.safetensors.tmp.9",
                           "notes.txt",
                           "ckpt-x.safetensors",
                           "confusion.json",
                           "confusion.json.tmp.5",
                           "model.safetensors.bak",
                           "latest.tmp.abc",
                           "train-17.out",
                           "ckpt-5.epoch-1.step-3.rank-1.safetensors",
                           "ckpt-05.safetensors",
                           "ckpt-5.epoch-1.step-3.rank-1.safetensors.bak",
                           "ckpt-5.epoch-1.step-3.safetensors",
                           "ckpt-5.epoch-1.step-3.rank-1.safetensors.tmp.node1.cluster.77",
                           "model.safetensors.tmp.node1.8",
                           "notes.txt.tmp.4"})
    touch(name);
  const pets::train::RunFiles files = pets::train::find_run_files(out_);
  EXPECT_EQ(files.checkpoints,
            (std::vector<std::string>{"ckpt-12.safetensors", "ckpt-3.safetensors",
                                      "ckpt-5.epoch-1.step-3.rank-1.safetensors"}));
  EXPECT_EQ(files.results, (std::vector<std::string>{"confusion.json", "latest", "metrics.jsonl",
                                                     "model.safetensors"}));
  // The atomic writer's temporaries, with the writer's host in the name or without.
  EXPECT_EQ(files.temporaries,
            (std::vector<std::string>{
                "ckpt-4.safetensors.tmp.9",
                "ckpt-5.epoch-1.step-3.rank-1.safetensors.tmp.node1.cluster.77",
                "confusion.json.tmp.5", "metrics.jsonl.tmp.123", "model.safetensors.tmp.node1.8"}));
  EXPECT_TRUE(files.holds_run());
  EXPECT_EQ(files.describe(),
            "confusion.json, latest, metrics.jsonl, model.safetensors, 3 checkpoints and 5 "
            "unfinished temporary files");
  EXPECT_FALSE(pets::train::find_run_files((root_ / "absent").string()).holds_run());
}

TEST_F(RunFolderTest, ANewRunCreatesTheFolderAndAFailedOneLeavesNone) {
  {
    RunFolder folder(out_, ResumeMode::kNo, false);
    EXPECT_FALSE(folder.resume());
    EXPECT_TRUE(fs::is_directory(out_));
    EXPECT_TRUE(exists(pets::train::kRunLockName));
  }
  // Nothing written but the lock: the folder it created is gone again (a run refused for bad
  // input leaves no --out behind).
  EXPECT_FALSE(fs::exists(out_));
  {
    RunFolder folder(out_, ResumeMode::kNo, false);
    touch("metrics.jsonl");
  }
  EXPECT_TRUE(exists("metrics.jsonl"));  // a run that wrote keeps its folder
}

TEST_F(RunFolderTest, ASecondRunIsRefusedNamingTheFolderAndTheHolder) {
  std::optional<RunFolder> first;
  first.emplace(out_, ResumeMode::kNo, false);
  // flock locks belong to an open file description: a second open in this process is refused
  // as another process's would be.
  for (ResumeMode mode : {ResumeMode::kNo, ResumeMode::kYes, ResumeMode::kAuto}) {
    const std::string message = refusal(mode);
    EXPECT_MENTIONS(message, "--out " + out_ + " is in use by another pets_train run (pid " +
                                 std::to_string(::getpid()) + " on ");
    EXPECT_MENTIONS(message, "started ");
  }
  first.reset();  // the first run ends: the lock is free
  EXPECT_EQ(refusal(ResumeMode::kNo), "");
}

TEST_F(RunFolderTest, ANewRunIntoAnEarlierRunIsRefused) {
  touch("ckpt-10.safetensors");
  touch("latest");
  touch("metrics.jsonl");
  const std::string message = refusal(ResumeMode::kNo);
  EXPECT_EQ(message, "--out " + out_ +
                         " holds an earlier run (latest, metrics.jsonl and ckpt-10.safetensors): "
                         "continue it with --resume, start over with --overwrite (removes those "
                         "files), or choose another --out");
  // Only a final model is a run too (the user's own files are not).
  fs::remove_all(out_);
  touch("model.safetensors");
  EXPECT_MENTIONS(refusal(ResumeMode::kNo), "holds an earlier run (model.safetensors)");
  fs::remove_all(out_);
  touch("notes.txt");
  touch("train-17.out");
  EXPECT_EQ(refusal(ResumeMode::kNo), "");
}

TEST_F(RunFolderTest, OverwriteRemovesOnlyTheRunsOwnFiles) {
  for (const char* name : {"ckpt-5.safetensors", "ckpt-10.safetensors", "latest", "metrics.jsonl",
                           "model.safetensors", "latest.tmp.77", "notes.txt", "slurm-3.out"})
    touch(name);
  RunFolder folder(out_, ResumeMode::kNo, true);
  EXPECT_FALSE(folder.resume());
  EXPECT_EQ(folder.remove_earlier_run(), 6u);
  std::vector<std::string> left;
  for (const auto& e : fs::directory_iterator(out_)) left.push_back(e.path().filename().string());
  std::sort(left.begin(), left.end());
  EXPECT_EQ(left,
            (std::vector<std::string>{pets::train::kRunLockName, "notes.txt", "slurm-3.out"}));
}

TEST_F(RunFolderTest, ResumeWhereThereIsNothingToResume) {
  // A mistyped --out: refused, and no folder is made there.
  EXPECT_EQ(refusal(ResumeMode::kYes),
            "--resume: " + out_ +
                " does not exist, so there is no run to continue (a new run starts there without "
                "--resume; --resume=auto continues one only where there is one)");
  EXPECT_FALSE(fs::exists(out_));
  // An empty folder, or one with the run's other files but no checkpoint.
  fs::create_directories(out_);
  EXPECT_MENTIONS(refusal(ResumeMode::kYes),
                  "--resume: no checkpoint (ckpt-<step>.safetensors) in " + out_ +
                      ", so there is nothing to continue");
  EXPECT_TRUE(fs::is_directory(out_));  // the user's folder stays
  touch("metrics.jsonl");
  for (ResumeMode mode : {ResumeMode::kYes, ResumeMode::kAuto})
    EXPECT_MENTIONS(refusal(mode), "; it holds metrics.jsonl: start over with --overwrite");
  touch("ckpt-4.safetensors");
  RunFolder folder(out_, ResumeMode::kYes, false);
  EXPECT_TRUE(folder.resume());
}

TEST_F(RunFolderTest, ResumeAutoStartsAfreshOnlyWhereThereIsNoRun) {
  {
    RunFolder folder(out_, ResumeMode::kAuto, false);
    EXPECT_FALSE(folder.resume());
    ASSERT_EQ(folder.notices().size(), 1u);
    EXPECT_MENTIONS(folder.notices()[0], "--resume=auto: no run in " + out_);
  }
  touch("notes.txt");  // not a run
  EXPECT_FALSE(RunFolder(out_, ResumeMode::kAuto, false).resume());
  touch("ckpt-8.safetensors");
  touch("latest");
  EXPECT_TRUE(RunFolder(out_, ResumeMode::kAuto, false).resume());
}

TEST_F(RunFolderTest, OutThatIsNoFolderOrCannotBeWritten) {
  std::ofstream(out_) << "a file";
  EXPECT_EQ(refusal(ResumeMode::kNo), "--out " + out_ + " is not a folder");
  fs::remove(out_);
  if (::geteuid() != 0) {  // root writes anywhere
    fs::create_directories(out_);
    ::chmod(out_.c_str(), 0555);
    EXPECT_MENTIONS(refusal(ResumeMode::kNo), "cannot write into the folder");
    ::chmod(out_.c_str(), 0755);
  }
  const std::string below_file = out_ + "_file/run";
  std::ofstream(out_ + "_file") << "a file";
  try {
    RunFolder folder(below_file, ResumeMode::kNo, false);
    ADD_FAILURE() << "a folder below a file was accepted";
  } catch (const pets::UsageError& e) {
    EXPECT_MENTIONS(e.what(), "--out " + below_file + ": cannot create the folder");
  }
}

}  // namespace
