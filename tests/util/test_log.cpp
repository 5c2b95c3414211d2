// Rank 0's console: results on stdout, notes on stderr, nothing from other ranks, and on a
// terminal a progress line that is wiped before any line is printed; elsewhere (a file, a pipe,
// a Slurm log) plain progress lines at a steady interval.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <string>

#include "pets/util/log.hpp"
#include "pets/util/progress.hpp"

namespace {

/// A temporary file standing in for a stream; text() reads back what was written.
class Capture {
 public:
  Capture() : file_(std::tmpfile()) {}
  ~Capture() { std::fclose(file_); }
  std::FILE* get() const { return file_; }
  std::string text() const {
    std::fflush(file_);
    std::rewind(file_);
    std::string out;
    for (int c; (c = std::fgetc(file_)) != EOF;) out += static_cast<char>(c);
    return out;
  }

 private:
  std::FILE* file_;
};

const std::string kWipe = "\r" + std::string(79, ' ') + "\r";

TEST(RankLog, LinesGoToTheirStreams) {
  Capture out, err;
  pets::RankLog log(true, out.get(), err.get(), false);
  log.result("epoch 0: 8.78");
  log.note("[epoch 0] loss 2.7900");
  log.progress("[epoch 1] step 1/9");  // not a terminal: nothing
  EXPECT_EQ(out.text(), "epoch 0: 8.78\n");
  EXPECT_EQ(err.text(), "[epoch 0] loss 2.7900\n");
}

TEST(RankLog, OtherRanksAreSilent) {
  Capture out, err;
  pets::RankLog log(false, out.get(), err.get(), true);
  log.result("epoch 0: 8.78");
  log.note("notice");
  log.progress("step");
  EXPECT_EQ(out.text(), "");
  EXPECT_EQ(err.text(), "");
}

TEST(RankLog, OnATerminalTheProgressLineIsWipedFirst) {
  Capture out, err;
  pets::RankLog log(true, out.get(), err.get(), true);
  log.progress("[epoch 0] step 1/2");
  log.result("epoch 0: 50.00");
  log.note("done");
  EXPECT_EQ(out.text(), "epoch 0: 50.00\n");
  EXPECT_EQ(err.text(), "\r[epoch 0] step 1/2   " + kWipe + kWipe + "done\n");
}

TEST(ProgressLine, DrawsOnlyOnAnEnabledTerminal) {
  Capture err;
  // A temporary file is no terminal.
  EXPECT_FALSE(pets::ProgressLine(err.get(), true).active());
  pets::ProgressLine off(err.get(), false, true);
  off.draw("x");
  off.clear();
  EXPECT_EQ(err.text(), "");
  pets::ProgressLine on(err.get(), true, true);
  EXPECT_TRUE(on.active());
  on.draw("a");
  on.clear();
  EXPECT_EQ(err.text(), "\ra   " + kWipe);
}

using pets::ProgressLine;
using pets::ProgressMode;
using std::chrono::seconds;

TEST(ProgressLine, AutoIsABarOnATerminalAndLinesElsewhere) {
  Capture err;
  EXPECT_EQ(ProgressLine(err.get(), true, ProgressMode::kAuto, seconds(30), true).mode(),
            ProgressMode::kBar);
  EXPECT_EQ(ProgressLine(err.get(), true, ProgressMode::kAuto, seconds(30), false).mode(),
            ProgressMode::kLines);
  // Left to isatty: a temporary file is no terminal (the case of mpirun's pipe, a Slurm log).
  EXPECT_EQ(ProgressLine(err.get(), true, ProgressMode::kAuto, seconds(30)).mode(),
            ProgressMode::kLines);
  // Other ranks show nothing, whatever the mode.
  for (ProgressMode m : {ProgressMode::kAuto, ProgressMode::kBar, ProgressMode::kLines})
    EXPECT_FALSE(ProgressLine(err.get(), false, m, seconds(30), true).active());
}

TEST(ProgressLine, LinesComeAtTheFirstDrawThenOncePerInterval) {
  Capture err;
  ProgressLine lines(err.get(), true, ProgressMode::kLines, seconds(30), true);
  const ProgressLine::Clock::time_point t0{};
  lines.draw("step 1", t0);
  lines.draw("step 2", t0 + seconds(10));
  lines.draw("step 3", t0 + seconds(29));
  lines.draw("step 4", t0 + seconds(30));
  lines.draw("step 5", t0 + seconds(45));
  lines.draw("step 6", t0 + seconds(61));
  lines.clear();  // nothing to wipe
  EXPECT_EQ(err.text(), "step 1\nstep 4\nstep 6\n");
}

TEST(ProgressLine, IntervalZeroWritesEveryDraw) {
  Capture err;
  ProgressLine lines(err.get(), true, ProgressMode::kLines, seconds(0), false);
  const ProgressLine::Clock::time_point t0{};
  lines.draw("a", t0);
  lines.draw("b", t0);
  EXPECT_EQ(err.text(), "a\nb\n");
}

TEST(ProgressLine, BarIsDrawnWhereverItIsAskedForAndNoneNever) {
  Capture bar_err, none_err;
  ProgressLine bar(bar_err.get(), true, ProgressMode::kBar, seconds(30), false);
  bar.draw("a");
  bar.clear();
  EXPECT_EQ(bar_err.text(), "\ra   " + kWipe);
  ProgressLine none(none_err.get(), true, ProgressMode::kNone, seconds(0), true);
  none.draw("a");
  none.clear();
  EXPECT_EQ(none_err.text(), "");
}

TEST(RankLog, ProgressLinesBetweenNotesNeedNoWipe) {
  Capture out, err;
  pets::RankLog log(true, ProgressMode::kLines, seconds(0), out.get(), err.get());
  log.progress("[epoch 0] step 1/2");
  log.note("done");
  EXPECT_EQ(err.text(), "[epoch 0] step 1/2\ndone\n");
  EXPECT_EQ(pets::to_string(ProgressMode::kLines), "lines");
}

}  // namespace
