// Rank 0's console: results on stdout, notes on stderr, nothing from other ranks, and on a
// terminal a progress line that is wiped before any line is printed.
#include <gtest/gtest.h>

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

}  // namespace
