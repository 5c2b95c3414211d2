// The checks of paths named by options and Slurm's one-rank guard, as the programs run them at
// start.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>

#include "pets/util/app.hpp"
#include "pets/util/error.hpp"

namespace {

namespace fs = std::filesystem;

class Paths : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("pets_app_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_ / "folder");
    std::ofstream(dir_ / "file") << "x";
  }
  void TearDown() override {
    ::chmod(dir_.c_str(), 0755);
    fs::remove_all(dir_);
  }
  std::string at(const std::string& name) const { return (dir_ / name).string(); }
  static std::string q(const std::string& path) { return "'" + path + "'"; }
  /// The folder holds only what SetUp made: no probe left behind.
  void expect_untouched() const {
    int entries = 0;
    for (const auto& e : fs::directory_iterator(dir_)) entries += e.path() == dir_ ? 0 : 1;
    EXPECT_EQ(entries, 2);
    EXPECT_TRUE(fs::is_empty(dir_ / "folder"));
  }
  fs::path dir_;
};

TEST_F(Paths, InputFile) {
  EXPECT_EQ(pets::input_file_problem(at("file")), std::nullopt);
  EXPECT_EQ(pets::input_file_problem(at("folder")), q(at("folder")) + " is a folder, not a file");
  EXPECT_EQ(pets::input_file_problem(at("missing")),
            "cannot read " + q(at("missing")) + ": No such file or directory");
  EXPECT_EQ(pets::input_file_problem(at("file/x")),
            "cannot read " + q(at("file/x")) + ": Not a directory");
}

TEST_F(Paths, OutputFile) {
  EXPECT_EQ(pets::output_file_problem(at("new.cfg")), std::nullopt);
  EXPECT_EQ(pets::output_file_problem(at("file")), std::nullopt);  // replaced
  EXPECT_EQ(pets::output_file_problem(at("folder")), q(at("folder")) + " is a folder, not a file");
  EXPECT_EQ(pets::output_file_problem(at("nodir/c.cfg")), "no folder " + q(at("nodir")));
  EXPECT_EQ(pets::output_file_problem(at("nodir/deeper/c.cfg")),
            "no folder " + q(at("nodir/deeper")));
  EXPECT_EQ(pets::output_file_problem(at("file/c.cfg")),
            q(at("file")) + " is a file, not a folder");
  EXPECT_EQ(pets::output_file_problem(at("file/sub/c.cfg")),
            q(at("file")) + " is a file, not a folder");
  expect_untouched();
}

TEST_F(Paths, RelativeOutputFileInTheCurrentFolder) {
  const fs::path before = fs::current_path();
  fs::current_path(dir_);
  EXPECT_EQ(pets::output_file_problem("c.cfg"), std::nullopt);
  EXPECT_EQ(pets::output_file_problem("nodir/c.cfg"), "no folder 'nodir'");
  EXPECT_EQ(pets::output_folder_problem("run"), std::nullopt);
  EXPECT_EQ(pets::output_folder_problem("file/run"), "'file' is a file, not a folder");
  fs::current_path(before);
  expect_untouched();
}

TEST_F(Paths, OutputFolder) {
  EXPECT_EQ(pets::output_folder_problem(at("folder")), std::nullopt);
  EXPECT_EQ(pets::output_folder_problem(at("folder/")), std::nullopt);
  EXPECT_EQ(pets::output_folder_problem(at("new/run")), std::nullopt);
  EXPECT_EQ(pets::output_folder_problem(at("file")), q(at("file")) + " is a file, not a folder");
  EXPECT_EQ(pets::output_folder_problem(at("file/run")),
            q(at("file")) + " is a file, not a folder");
  EXPECT_FALSE(fs::exists(at("new")));
  expect_untouched();
}

TEST_F(Paths, OutputFolderWhereNothingCanBeMade) {
  // Tried for real, so also as root: /proc takes no new folder.
  const auto problem = pets::output_folder_problem("/proc/pets_run");
  ASSERT_TRUE(problem.has_value());
  EXPECT_EQ(problem->rfind("cannot make a folder in '/proc': ", 0), 0u) << *problem;
  if (::geteuid() == 0) return;  // root writes in a folder of mode 0555
  ::chmod(dir_.c_str(), 0555);
  EXPECT_EQ(pets::output_folder_problem(at("run")),
            "cannot make a folder in " + q(dir_.string()) + ": Permission denied");
  EXPECT_EQ(pets::output_folder_problem(dir_.string()),
            "cannot write in " + q(dir_.string()) + ": Permission denied");
  EXPECT_EQ(pets::output_file_problem(at("c.cfg")),
            "cannot write in " + q(dir_.string()) + ": Permission denied");
}

/// Sets or unsets the Slurm variables for one test.
class SlurmEnvironment : public ::testing::Test {
 protected:
  void TearDown() override {
    ::unsetenv("SLURM_NTASKS");
    ::unsetenv("SLURM_STEP_ID");
  }
};

TEST_F(SlurmEnvironment, OneRankInAStepOfSeveralTasksIsRefused) {
  ::setenv("SLURM_NTASKS", "2", 1);
  ::setenv("SLURM_STEP_ID", "0", 1);
  const auto problem = pets::slurm_single_rank_problem(1);
  ASSERT_TRUE(problem.has_value());
  EXPECT_EQ(problem->rfind("Slurm started 2 tasks but this MPI world has 1 rank", 0), 0u);
  EXPECT_NE(problem->find("srun --mpi=pmix"), std::string::npos);
  // The world Slurm asked for: fine.
  EXPECT_EQ(pets::slurm_single_rank_problem(2), std::nullopt);
}

TEST_F(SlurmEnvironment, OutsideAStepOrWithOneTaskNothingIsWrong) {
  EXPECT_EQ(pets::slurm_single_rank_problem(1), std::nullopt);  // not under Slurm
  ::setenv("SLURM_NTASKS", "2", 1);
  EXPECT_EQ(pets::slurm_single_rank_problem(1), std::nullopt);  // the batch script, no step
  ::setenv("SLURM_STEP_ID", "0", 1);
  ::setenv("SLURM_NTASKS", "1", 1);
  EXPECT_EQ(pets::slurm_single_rank_problem(1), std::nullopt);  // a one-task step
}

}  // namespace

TEST(UnsignedOption, TakesEveryUnsignedValueAndNamesTheOptionOtherwise) {
  EXPECT_EQ(pets::unsigned_option("18446744073709551615", "--seed"), ~std::uint64_t{0});
  EXPECT_EQ(pets::unsigned_option("0", "--seed"), 0u);
  EXPECT_EQ(pets::unsigned_number("7"), std::optional<std::uint64_t>(7));
  for (const char* bad : {"", "-1", "+1", "1x", "18446744073709551616", "0x10", " 1"}) {
    EXPECT_FALSE(pets::unsigned_number(bad).has_value()) << bad;
    try {
      pets::unsigned_option(bad, "pets_synth: --seed");
      ADD_FAILURE() << "no error for '" << bad << "'";
    } catch (const pets::UsageError& e) {
      EXPECT_EQ(
          std::string(e.what()),
          std::string("pets_synth: --seed must be an integer in 0 .. 2^64-1, got '") + bad + "'");
    }
  }
}
